package workspace

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestTrackedUnchanged: a file is reported only when its content is what the index holds for it; a
// changed, untracked, symlinked or missing file is not, and an unreadable index reports nothing.
func TestTrackedUnchanged(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("fixtures/keys.txt", "AKIAEXAMPLEEXAMPLE12\n")
	write("changed.env", "TOKEN=one\n")
	write("exec.sh", "#!/bin/sh\n")
	os.Chmod(filepath.Join(dir, "exec.sh"), 0o755)
	if err := os.Symlink("fixtures/keys.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("commit", "-qm", "fixtures")
	write("changed.env", "TOKEN=two\n")
	write("untracked.env", "TOKEN=three\n")

	paths := []string{"fixtures/keys.txt", "exec.sh", "changed.env", "untracked.env", "link", "missing"}
	got := TrackedUnchanged(dir, paths, nil)
	want := map[string]bool{"fixtures/keys.txt": true, "exec.sh": true}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for p := range want {
		if !got[p] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}

	// With a memo: the verdicts are kept, and reused while index and file are as they were (a
	// forged verdict is believed, which shows the index was not decoded again), until either changes.
	memo := &TrackedMemo{racy: -time.Hour}
	if got := TrackedUnchanged(dir, paths, memo); !got["fixtures/keys.txt"] || !memo.Files["fixtures/keys.txt"].Tracked {
		t.Fatalf("with a memo: %v, memo %+v", got, memo)
	}
	forged := *memo
	forged.Files = map[string]TrackedVerdict{}
	for p, v := range memo.Files {
		v.Tracked = !v.Tracked
		forged.Files[p] = v
	}
	if got := TrackedUnchanged(dir, paths, &forged); got["fixtures/keys.txt"] || !got["changed.env"] {
		t.Fatalf("the memo was not used: %v", got)
	}
	write("fixtures/keys.txt", "AKIAEXAMPLEEXAMPLE12\nchanged\n")
	if got := TrackedUnchanged(dir, paths, &forged); got["fixtures/keys.txt"] || got["changed.env"] != true {
		t.Fatalf("a changed file's verdict was reused or another's dropped: %v", got)
	}
	git("add", "fixtures/keys.txt") // the index changes: no verdict is reused
	if got := TrackedUnchanged(dir, paths, &forged); !got["fixtures/keys.txt"] || got["changed.env"] {
		t.Fatalf("after the index changed: %v", got)
	}

	// A linked work tree's .git is a file naming the git directory.
	wt := filepath.Join(t.TempDir(), "wt")
	git("worktree", "add", "-q", wt)
	if got := TrackedUnchanged(wt, []string{"fixtures/keys.txt"}, nil); !got["fixtures/keys.txt"] {
		t.Fatalf("linked work tree: %v", got)
	}

	// A .git file may name any directory: one whose index is a FIFO must not hang the start.
	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "index"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, ".git"), []byte("gitdir: "+fifoDir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan map[string]bool, 1)
	go func() { done <- TrackedUnchanged(other, []string{"a"}, nil) }()
	select {
	case got := <-done:
		if len(got) != 0 {
			t.Fatalf("a FIFO index reported %v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TrackedUnchanged hung on a FIFO named as the index")
	}

	// The index is the project's to corrupt: nothing is reported, nothing panics.
	for _, junk := range []string{"", "DIRC", "DIRC\x00\x00\x00\x02\xff\xff\xff\xff", "not an index at all"} {
		if err := os.WriteFile(filepath.Join(dir, ".git", "index"), []byte(junk), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := TrackedUnchanged(dir, paths, nil); len(got) != 0 {
			t.Fatalf("a corrupt index (%q) reported %v", junk, got)
		}
	}
}
