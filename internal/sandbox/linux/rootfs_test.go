//go:build linux

package linux

import (
	"os"
	"path/filepath"
	"testing"
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
