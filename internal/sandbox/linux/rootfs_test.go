//go:build linux

package linux

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteAfterHostFile: the generated CA bundle is the host's bundle, a newline when it lacks its
// last one (two PEM blocks on one line would hide the first certificate), then the run's CA; a
// host file that is gone fails the step rather than leaving a bundle without the host's roots.
func TestWriteAfterHostFile(t *testing.T) {
	for _, tc := range []struct{ name, host, want string }{
		{"ends in a newline", "HOST\n", "HOST\nCA\n"},
		{"no last newline", "HOST", "HOST\nCA\n"},
		{"empty", "", "CA\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "host.crt")
			if err := os.WriteFile(src, []byte(tc.host), 0o644); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(dir, "bundle.crt")
			if err := writeAfterHostFile(src, dst, []byte("CA\n")); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if err := writeAfterHostFile(src, dst, nil); err == nil {
				t.Fatal("an existing file was written over")
			}
		})
	}
	dir := t.TempDir()
	if err := writeAfterHostFile(filepath.Join(dir, "missing"), filepath.Join(dir, "out"), []byte("CA\n")); err == nil {
		t.Fatal("a missing host file was taken for an empty one")
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Fatal("a bundle was left without the host's part")
	}
}

// TestEnsureTarget: a mount point is made with its missing parents, one that exists is left as it is,
// and a symbolic link in its place is not followed (an open with O_CREAT would have made the file the
// link names, wherever that is).
func TestEnsureTarget(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		dir     bool
		wantErr bool
		want    os.FileMode // the type of what is at the path afterwards
	}{
		{name: "new", want: 0},
		{name: "a/b/new", want: 0},
		{name: "newdir", dir: true, want: os.ModeDir},
		{name: "c/d/newdir", dir: true, want: os.ModeDir},
		{name: "kept", want: 0},
		{name: "link", want: os.ModeSymlink},
		{name: "link", dir: true, want: os.ModeSymlink},
		{name: "file/under", wantErr: true},
		{name: "file/under", dir: true, wantErr: true},
	} {
		p := filepath.Join(dir, tc.name)
		err := ensureTarget(p, tc.dir)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s (dir %v): made under a file", tc.name, tc.dir)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s (dir %v): %v", tc.name, tc.dir, err)
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s (dir %v): %v", tc.name, tc.dir, err)
			continue
		}
		if fi.Mode().Type() != tc.want {
			t.Errorf("%s (dir %v): a %v, want a %v", tc.name, tc.dir, fi.Mode().Type(), tc.want)
		}
	}
	if _, err := os.Lstat(outside); err == nil {
		t.Error("the symbolic link was followed: its target was made")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kept")); err != nil || string(b) != "content" {
		t.Errorf("an existing file was changed: %q, %v", b, err)
	}
}

// TestWriteNewFile: a generated file is made new with its content, never written over one there.
func TestWriteNewFile(t *testing.T) {
	// No umask, so that the mode checked is the one asked for: under the usual 022 a 0666 would pass.
	defer unix.Umask(unix.Umask(0))
	dir := t.TempDir()
	p := filepath.Join(dir, "hosts")
	if err := writeNewFile(p, []byte("127.0.0.1\tlocalhost\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "127.0.0.1\tlocalhost\n" {
		t.Fatalf("got %q, %v", b, err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v: want 0644, readable by all, writable by its owner only", fi.Mode(), err)
	}
	if err := writeNewFile(p, []byte("other")); err == nil {
		t.Fatal("an existing file was written over")
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := writeNewFile(filepath.Join(dir, "link"), []byte("x")); err == nil {
		t.Fatal("a file was written through a symbolic link")
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Fatal("the symbolic link's target was made")
	}
}
