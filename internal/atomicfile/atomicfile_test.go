package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(string, []byte, os.FileMode) error
	}{
		{"durable", Write},
		{"lazy", WriteLazy},
		{"from a reader", func(p string, b []byte, m os.FileMode) error { return WriteFrom(p, bytes.NewReader(b), m) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := tc.write(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(path, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != "new" {
				t.Fatalf("read back %q, %v; want new", b, err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600 (the perm of the last write, whatever the umask)", fi.Mode().Perm())
			}
			assertOnly(t, dir, "f")
		})
	}
}

// TestWriteFailureLeavesOld makes the rename fail (the target is a non-empty directory): the old
// content must stay and no temporary file may be left beside it.
func TestWriteFailureLeavesOld(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "t")
	if err := os.MkdirAll(filepath.Join(target, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(target, []byte("x"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	if fi, err := os.Stat(filepath.Join(target, "keep")); err != nil || !fi.IsDir() {
		t.Fatalf("the old directory was disturbed: %v", err)
	}
	assertOnly(t, dir, "t")

	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}

	// A reader that fails halfway leaves the old file and no temporary one.
	f := filepath.Join(dir, "f")
	if err := Write(f, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	failing := io.MultiReader(strings.NewReader("half"), iotest.ErrReader(errors.New("read failed")))
	if err := WriteFrom(f, failing, 0o600); err == nil || !strings.Contains(err.Error(), "read failed") {
		t.Fatalf("WriteFrom a failing reader: %v", err)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "old" {
		t.Fatalf("after a failed WriteFrom: %q, %v; want old", b, err)
	}
	assertOnly(t, dir, "f", "t")
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("directory holds %q, want only %q (a temporary file left behind?)", got, names)
	}
	for i := range got {
		if got[i] != names[i] {
			t.Fatalf("directory holds %q, want only %q", got, names)
		}
	}
}
