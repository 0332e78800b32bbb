package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// agentEdits is a bit of everything an agent does, none of it risky.
const agentEdits = `
printf 'hello\nthere\nworld\n' > README.md
printf 'new\n' > NEW.txt
rm src/util.go
mv docs/a.md docs/b.md
mv dir moved
rm -rf src && mkdir src && printf 'package src\n' > src/fresh.go
chmod 600 README.md
chmod 644 script.sh
ln -s NEW.txt new-link
rm readme-link && ln -s moved/y.txt readme-link
printf '\000\003changed' > data.bin
mkdir -p deep/er && printf 'd\n' > deep/er/file
`

func TestPrepareIsOverlayAndConstant(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	if ws.Overlay == nil {
		t.Fatal("overlayfs in a user namespace works on this host, but Prepare fell back to a copy")
	}
	if ws.Path != p || ws.Source != p {
		t.Errorf("workspace %+v, want path and source %s", ws, p)
	}
	ents, err := os.ReadDir(ws.Overlay.Upper)
	if err != nil || len(ents) != 0 {
		t.Errorf("upper layer not empty after Prepare: %v %v", ents, err)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, manifestFile)); err == nil {
		t.Error("overlay Prepare walked the project (wrote a manifest)")
	}
	if _, err := Prepare(r, p); err == nil {
		t.Error("Prepare twice for one run succeeded")
	}
	// The run's state must never be inside the project (the agent would see it).
	inside := testRun(t, p)
	inside.Dir = filepath.Join(p, "state")
	if err := os.Mkdir(inside.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(inside, p); err == nil {
		t.Error("Prepare accepted a run directory inside the project")
	}
}

func TestApplyYieldsAgentView(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeOverlay, ModeCopy} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			p := newProject(t)
			before := tree(t, p, nil)
			r := testRun(t, p)
			ws := prepare(t, r, p, PrepareOptions{ForceCopy: mode == ModeCopy})
			view := agent(t, ws, agentEdits)
			exited(t, r)
			sameTree(t, "project changed before apply", tree(t, p, nil), before)

			cs, err := Changes(r)
			if err != nil {
				t.Fatal(err)
			}
			got := changePaths(cs)
			for _, want := range []string{"m README.md", "a NEW.txt", "d src/util.go", "d docs/a.md", "a docs/b.md",
				"d dir", "d dir/sub/x.txt", "a moved/sub/x.txt", "d src/main.go", "a src/fresh.go", "m script.sh",
				"a new-link", "m readme-link", "m data.bin", "a deep/er/file"} {
				if !slices.Contains(got, want) {
					t.Errorf("Changes lacks %q; got %v", want, got)
				}
			}
			rep, err := Apply(r, ApplyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, "project after apply vs agent's view", tree(t, p, nil), tree(t, view, nil))
			if len(rep.Added) == 0 || len(rep.Deleted) == 0 || len(rep.Modified) == 0 {
				t.Errorf("report %+v", rep)
			}
			got2, _ := runstate.Load(r.Dir)
			if got2.Meta.State != runstate.StateApplied {
				t.Errorf("state %s after apply", got2.Meta.State)
			}
			if _, err := Apply(r, ApplyOptions{}); err == nil {
				t.Error("applying twice succeeded")
			}
			if ents, _ := filepath.Glob(filepath.Join(p, ".cordon-apply-*")); len(ents) > 0 {
				t.Errorf("staging left behind: %v", ents)
			}
		})
	}
}

func TestConflicts(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	agent(t, ws, `printf 'agent\n' >> README.md; printf 'agent\n' >> src/main.go; rm -rf dir; printf 'a\n' >> docs/a.md`)
	exited(t, r)
	// The user works on the project meanwhile.
	sh(t, p, `printf 'user\n' >> README.md; rm src/main.go; printf 'new\n' > dir/user.txt; printf 'user\n' >> src/util.go`)
	before := tree(t, p, nil)
	_, err := Apply(r, ApplyOptions{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Apply error = %v, want a ConflictError", err)
	}
	var paths []string
	for _, c := range ce.Conflicts {
		paths = append(paths, c.Path)
	}
	for _, want := range []string{"README.md", "src/main.go", "dir/user.txt"} {
		if !slices.Contains(paths, want) {
			t.Errorf("conflict on %s not reported; got %v", want, ce.Conflicts)
		}
	}
	for _, not := range []string{"src/util.go", "docs/a.md"} {
		if slices.Contains(paths, not) {
			t.Errorf("%s reported as a conflict, but only one side changed it", not)
		}
	}
	sameTree(t, "project after refused apply", tree(t, p, nil), before)

	// The check is what protects the user's edit: applying without it loses the edit.
	info, _ := LoadInfo(r)
	cs, _ := Changes(r)
	if err := commitChanges(r, info, cs, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(p, "README.md")); strings.Contains(string(b), "user") {
		t.Fatal("without the conflict check the user's edit survived; the test proves nothing")
	}
}

func TestCrashMidApply(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 5, 9} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			crashAndRerun(t, n)
		})
	}
}

func crashAndRerun(t *testing.T, n int) {
	{
		p := newProject(t)
		r := testRun(t, p)
		ws := prepare(t, r, p, PrepareOptions{})
		view := agent(t, ws, agentEdits)
		exited(t, r)
		before := tree(t, p, nil)
		_, err := Apply(r, ApplyOptions{crashAfter: n})
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d: %v", n, err)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, journalFile)); err != nil {
			t.Fatalf("crash after %d: no journal left: %v", n, err)
		}
		if len(diffKeys(tree(t, p, nil), before)) == 0 {
			t.Fatalf("crash after %d: nothing was applied before the crash", n)
		}
		rep, err := Apply(r, ApplyOptions{})
		if err != nil {
			t.Fatalf("rerun after crash at %d: %v", n, err)
		}
		if !rep.Resumed {
			t.Errorf("crash after %d: rerun did not resume", n)
		}
		sameTree(t, "after crash and rerun", tree(t, p, nil), tree(t, view, nil))
		if _, err := os.Stat(filepath.Join(r.Dir, journalFile)); err == nil {
			t.Error("journal left after completion")
		}
	}
}

func TestCrashLeavesHalfAppliedUntilRerun(t *testing.T) {
	t.Parallel()
	// Proves the crash hook really stops halfway (so the rerun test above can fail).
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	view := agent(t, ws, agentEdits)
	exited(t, r)
	before := tree(t, p, nil)
	if _, err := Apply(r, ApplyOptions{crashAfter: 4}); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	mid := tree(t, p, func(rel string) bool { return strings.HasPrefix(rel, ".cordon-apply-") })
	if len(diffKeys(mid, before)) == 0 || len(diffKeys(mid, tree(t, view, nil))) == 0 {
		t.Fatal("after a crash at step 4 the project is not half-applied")
	}
}

func diffKeys(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

func TestFailedApplyRollsBack(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	agent(t, ws, agentEdits)
	exited(t, r)
	before := tree(t, p, nil)
	// A half-done commit whose process "died", then a journal turned to rollback: the rerun must
	// undo what was done and leave the project as it was.
	if _, err := Apply(r, ApplyOptions{crashAfter: 6}); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, journalFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, journalFile), []byte(strings.Replace(string(b), `"phase":"commit"`, `"phase":"rollback"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	info, _ := LoadInfo(r)
	done, err := recoverApply(r, info)
	if err != nil || done {
		t.Fatalf("recover = %v, %v; want a rollback", done, err)
	}
	sameTree(t, "after rollback", tree(t, p, nil), before)
}

func TestInterruptedRunApplies(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	view := agent(t, ws, `printf 'fix\n' >> src/main.go`)
	// cordon died: its pid is gone (pid 0 never names a live cordon), state still "running".
	if err := r.Update(func(m *runstate.Meta) error { m.PID, m.PIDStart = 0, 0; return nil }); err != nil {
		t.Fatal(err)
	}
	list, err := runstate.Store{Root: filepath.Dir(filepath.Dir(r.Dir))}.List()
	if err != nil || len(list) != 1 || list[0].Meta.State != runstate.StateInterrupted {
		t.Fatalf("List = %v, %v; want one interrupted run", list, err)
	}
	var diff strings.Builder
	if err := Diff(&diff, list[0], false); err != nil || !strings.Contains(diff.String(), "+fix") {
		t.Fatalf("diff of interrupted run: %v\n%s", err, diff.String())
	}
	if _, err := Apply(list[0], ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "interrupted run applied", tree(t, p, nil), tree(t, view, nil))
}

func TestApplyRefusesLiveRun(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p) // this process is its cordon: alive
	ws := prepare(t, r, p, PrepareOptions{})
	agent(t, ws, `printf 'x\n' >> README.md`)
	if _, err := Apply(r, ApplyOptions{}); err == nil {
		t.Fatal("applied a run whose agent may still be writing")
	}
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	agent(t, ws, `printf 'x\n' >> README.md`)
	exited(t, r)
	if err := Discard(r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, upperDir)); err == nil {
		t.Error("upper layer kept after discard")
	}
	if _, err := Apply(r, ApplyOptions{}); err == nil {
		t.Error("applied a discarded run")
	}
}
