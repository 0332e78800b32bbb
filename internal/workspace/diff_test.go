package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gitEdits changes only what git can represent (no 0600 modes, no binary), so that the diff can be
// checked by git itself and an export compared with the agent's view.
const gitEdits = `
printf 'hello\nthere\nworld\n' > README.md
printf 'new\n' > NEW.txt
rm src/util.go
mv docs/a.md docs/b.md
mv dir moved
chmod 644 script.sh
ln -s NEW.txt new-link
rm readme-link && ln -s moved/y.txt readme-link
printf 'no newline' > nonl.txt
mkdir -p deep/er && printf 'd\n' > deep/er/file
rm -rf src && mkdir src && printf 'package src\n' > src/fresh.go
`

func TestDiffAppliesWithGit(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	orig := filepath.Join(t.TempDir(), "orig")
	sh(t, "/", "cp -a "+p+" "+orig)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	view := agent(t, ws, gitEdits)
	exited(t, r)
	var b strings.Builder
	if err := Diff(&b, r, false); err != nil {
		t.Fatal(err)
	}
	d := b.String()
	for _, want := range []string{
		"diff --git a/NEW.txt b/NEW.txt\nnew file mode 100644\n--- /dev/null\n+++ b/NEW.txt\n@@ -0,0 +1 @@\n+new\n",
		"diff --git a/src/util.go b/src/util.go\ndeleted file mode 100644\n",
		"diff --git a/script.sh b/script.sh\nold mode 100755\nnew mode 100644\n",
		"diff --git a/new-link b/new-link\nnew file mode 120000\n",
		"+moved/y.txt\n\\ No newline at end of file\n",
		"diff --git a/docs/a.md b/docs/a.md\ndeleted file mode",
		"diff --git a/docs/b.md b/docs/b.md\nnew file mode",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q", want)
		}
	}
	// The real check: git applies cordon's diff to the original and gets the agent's view.
	patch := filepath.Join(t.TempDir(), "p.diff")
	if err := os.WriteFile(patch, []byte(d), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, orig, "git apply --whitespace=nowarn "+patch)
	sameTree(t, "original + git apply of the diff vs agent's view", tree(t, orig, noGit), tree(t, view, noGit))

	b.Reset()
	if err := Diff(&b, r, true); err != nil {
		t.Fatal(err)
	}
	st := b.String()
	for _, want := range []string{" README.md ", "| 1 +\n", "files changed", "insertion"} {
		if !strings.Contains(st, want) {
			t.Errorf("stat lacks %q:\n%s", want, st)
		}
	}
}

func TestDiffBinaryAndQuoting(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	agent(t, ws, `printf '\000\003changed' > data.bin; printf 'x\n' > 'sp ace"q'; printf 'x\n' > "$(printf 'nl\tt')"`)
	exited(t, r)
	var b strings.Builder
	if err := Diff(&b, r, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Binary files a/data.bin and b/data.bin differ", `"a/sp ace\"q"`, `"b/nl\tt"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("diff lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := Diff(&b, r, true); err != nil || !strings.Contains(b.String(), "Bin 9 -> 9 bytes") {
		t.Errorf("stat: %v\n%s", err, b.String())
	}
}

func TestExport(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	sh(t, p, "printf 'uncommitted\\n' >> docs/a.md && printf 'staged\\n' > staged.txt && git add staged.txt")
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	view := agent(t, ws, gitEdits+"\nprintf 'evil\\n' > .envrc")
	exited(t, r)
	work := tree(t, p, noGit)
	index, _ := os.ReadFile(filepath.Join(p, ".git", "index"))
	head := sh(t, p, "git rev-parse HEAD && git symbolic-ref HEAD")

	_, err := Export(r, "cordon/fix", ApplyOptions{})
	var re *RiskError
	if !errors.As(err, &re) || !hasRisk(re.Risks, ".envrc", "direnv") {
		t.Fatalf("Export with a planted .envrc = %v, want it refused", err)
	}
	if out := sh(t, p, "git branch --list cordon/fix"); out != "" {
		t.Fatal("a refused export created the branch")
	}
	commit, err := Export(r, "cordon/fix", ApplyOptions{IncludeRisky: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(sh(t, p, "git rev-parse cordon/fix")); got != commit {
		t.Errorf("branch at %s, Export returned %s", got, commit)
	}
	if parent := sh(t, p, "git rev-parse cordon/fix^"); parent != strings.SplitN(head, "\n", 2)[0]+"\n" {
		t.Errorf("commit parent %s, want HEAD %s", parent, head)
	}
	// The user's working tree, index and HEAD are exactly as they were.
	sameTree(t, "working tree after export", tree(t, p, noGit), work)
	if idx, _ := os.ReadFile(filepath.Join(p, ".git", "index")); string(idx) != string(index) {
		t.Error("export changed the user's index")
	}
	if h := sh(t, p, "git rev-parse HEAD && git symbolic-ref HEAD"); h != head {
		t.Errorf("HEAD moved: %s -> %s", head, h)
	}
	// The branch holds the agent's view (committed files only: HEAD plus the run's changes; the
	// user's uncommitted edit to docs/a.md is not the agent's and docs/a.md was renamed anyway).
	clone := filepath.Join(t.TempDir(), "clone")
	sh(t, "/", "git clone -q --branch cordon/fix "+p+" "+clone)
	want := tree(t, view, noGit)
	delete(want, "staged.txt") // staged but not committed by the user: not part of HEAD
	got := tree(t, clone, noGit)
	for k, v := range want {
		if strings.HasPrefix(v, "d") {
			delete(want, k) // directories: git stores none of their modes
		}
	}
	for k, v := range got {
		if strings.HasPrefix(v, "d") {
			delete(got, k)
		}
	}
	sameTree(t, "exported branch vs agent's view", got, want)

	if _, err := Export(r, "cordon/fix", ApplyOptions{IncludeRisky: true}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second export to the same branch: %v", err)
	}
	if _, err := Export(r, "bad..name", ApplyOptions{IncludeRisky: true}); err == nil {
		t.Error("invalid branch name accepted")
	}
}
