package kubetest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOwnDirRefusesOthers: the state directory is refused when it is a link, open to others, or
// (as root) another user's, as one made first by someone else in the shared temporary directory is.
func TestOwnDirRefusesOthers(t *testing.T) {
	base := t.TempDir()
	mine := filepath.Join(base, "mine")
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := ownDir(mine); err != nil {
		t.Fatalf("a 0700 directory of ours: %v", err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	refused := []string{open, link}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		if err := os.Mkdir(theirs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		refused = append(refused, theirs)
	}
	for _, d := range refused {
		if err := ownDir(d); err == nil {
			t.Errorf("%s was accepted", filepath.Base(d))
		}
	}
}
