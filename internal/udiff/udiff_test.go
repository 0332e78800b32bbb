package udiff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"insert in the middle", "a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\nNEW\ne\nf\ng\nh\n",
			"--- x\n+++ y\n@@ -2,6 +2,7 @@\n b\n c\n d\n+NEW\n e\n f\n g\n"},
		{"from nothing", "", "a\nb\n", "--- x\n+++ y\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"change one line", "a\nb\nc\n", "a\nB\nc\n", "--- x\n+++ y\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"no final newline", "a\nb", "a\nb\nc\n", "--- x\n+++ y\n@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n",
			"--- x\n+++ y\n@@ -1,3 +1,4 @@\n+0\n 1\n 2\n 3\n@@ -10,3 +11,4 @@\n 10\n 11\n 12\n+13\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unified("x", "y", tc.a, tc.b); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestAgainstDiffAndPatch checks random texts against the real tools: GNU patch applies every diff
// to give the second text, and the diff changes as few lines as diff --minimal does.
func TestAgainstDiffAndPatch(t *testing.T) {
	for _, tool := range []string{"diff", "patch"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (diffutils, patch): %v", tool, err)
		}
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		var b strings.Builder
		for range r.IntN(30) {
			fmt.Fprintf(&b, "line %d\n", r.IntN(8))
		}
		return b.String()
	}
	for i := range 300 {
		a, b := text(), text()
		if i%7 == 0 {
			b = strings.TrimSuffix(b, "\n")
		}
		d := Unified("a", "b", a, b)
		pa, pb, pd := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "d")
		os.WriteFile(pa, []byte(a), 0o644)
		os.WriteFile(pb, []byte(b), 0o644)
		if a == b {
			if d != "" {
				t.Fatalf("equal texts gave a diff:\n%s", d)
			}
			continue
		}
		os.WriteFile(pd, []byte(d), 0o644)
		if out, err := exec.Command("patch", "-s", "--dry-run", "-o", filepath.Join(dir, "out"), pa, pd).CombinedOutput(); err != nil {
			t.Fatalf("patch refused the diff of %q → %q: %v\n%s\n%s", a, b, err, out, d)
		}
		if out, err := exec.Command("patch", "-s", "-o", filepath.Join(dir, "out"), pa, pd).CombinedOutput(); err != nil {
			t.Fatalf("patch: %v\n%s", err, out)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "out")); string(got) != b {
			t.Fatalf("patching %q with\n%s\ngave %q, want %q", a, d, got, b)
		}
		ref, _ := exec.Command("diff", "--minimal", "-u", pa, pb).Output()
		if got, want := changed(d), changed(string(ref)); got != want {
			t.Fatalf("%d lines changed, diff --minimal changes %d:\n%s\n%s", got, want, d, ref)
		}
	}
}

// changed counts the added and removed lines of a unified diff.
func changed(d string) int {
	n := 0
	for _, l := range strings.Split(d, "\n") {
		if (strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-")) && !strings.HasPrefix(l, "+++") && !strings.HasPrefix(l, "---") {
			n++
		}
	}
	return n
}
