//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// The review commands resolve "last" and id prefixes within the project of the current directory,
// so that a command typed in one project never acts on another's run; gc removes only what holds
// nothing to lose unless told otherwise; a run whose cordon was killed is not "running".

// gitRepo makes a git repository at dir (relative to the harness's base, or the harness's own
// project for "") with one committed file, owned by the caller, and returns its path.
func (h *harness) gitRepo(dir string) string {
	h.t.Helper()
	requireTool(h.t, "git")
	path := h.ws
	if dir != "" {
		path = filepath.Join(h.base, dir)
	}
	h.writeFile(filepath.Join(path, "file.txt"), "original\n", 0o644)
	h.chownAll(path)
	cmd := h.command([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"},
		"sh", "-ec", "git init -q -b main . && git add -A && git commit -qm init")
	cmd.Dir = path
	if r := run(h.t, cmd, ""); r.code != 0 {
		h.t.Fatalf("git init %s: %s", path, r)
	}
	return path
}

// cordonIn runs `cordon ARGS...` as the caller with dir as the current directory.
func (h *harness) cordonIn(dir string, args ...string) result {
	h.t.Helper()
	cmd := h.command(nil, cordonBin, h.tierArgs(args)...)
	cmd.Dir = dir
	return run(h.t, cmd, "")
}

// agentIn runs a sandboxed script with dir as the current directory (and so as the workspace) and
// returns the run's id.
func (h *harness) agentIn(dir, script string) string {
	h.t.Helper()
	r := h.cordonIn(dir, "run", "--policy", h.policy(""), "--", "sh", "-c", script)
	if r.code != 0 {
		h.t.Fatalf("agent run in %s: %s", dir, r)
	}
	return runID(h.t, r)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunsScopedToProject(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		a, b := h.gitRepo("repo-a"), h.gitRepo("repo-b")
		idB := h.agentIn(b, "echo from-b > file.txt")
		// A's run is the newest: the one a global "last" would pick.
		idA := h.agentIn(a, "echo from-a > file.txt")

		// From B, a prefix of A's run is refused, naming the run and its project.
		prefixA := idA[:len(idA)-2]
		if r := h.cordonIn(b, "apply", prefixA); r.code == 0 || !strings.Contains(r.stderr, idA) || !strings.Contains(r.stderr, a) || !strings.Contains(r.stderr, "full id") {
			t.Errorf("apply of another project's run by prefix was not refused with a reason:\n%s", r)
		}
		for _, cmd := range [][]string{{"diff", prefixA}, {"log", prefixA}, {"discard", prefixA}, {"export", "--branch", "x", prefixA}} {
			if r := h.cordonIn(b, cmd...); r.code == 0 || !strings.Contains(r.stderr, idA) {
				t.Errorf("%s of another project's run by prefix was not refused:\n%s", cmd[0], r)
			}
		}
		// From B, last is B's run: applying it changes B and never A.
		if r := h.cordonIn(b, "apply", "last"); r.code != 0 || !strings.Contains(r.stdout, idB) {
			t.Fatalf("apply last in B: %s", r)
		}
		if got := readFile(t, filepath.Join(b, "file.txt")); got != "from-b\n" {
			t.Errorf("B after apply last: %q", got)
		}
		if got := readFile(t, filepath.Join(a, "file.txt")); got != "original\n" {
			t.Fatalf("apply last in B changed A: %q", got)
		}

		// runs lists B's runs only; --all every project's; -q the ids; --json one object a run.
		if r := h.cordonIn(b, "runs"); r.code != 0 || !strings.Contains(r.stdout, idB) || strings.Contains(r.stdout, idA) {
			t.Errorf("runs in B:\n%s", r)
		}
		if r := h.cordonIn(b, "runs", "--all"); !strings.Contains(r.stdout, idB) || !strings.Contains(r.stdout, idA) {
			t.Errorf("runs --all:\n%s", r)
		}
		if r := h.cordonIn(b, "runs", "-q"); r.stdout != idB+"\n" {
			t.Errorf("runs -q in B: %q, want %q", r.stdout, idB+"\n")
		}
		if r := h.cordonIn(b, "runs", "--all", "-q"); r.stdout != idA+"\n"+idB+"\n" {
			t.Errorf("runs --all -q: %q, want newest first", r.stdout)
		}
		r := h.cordonIn(a, "runs", "--json")
		var rec runRecord
		if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || strings.Count(r.stdout, "\n") != 1 {
			t.Fatalf("runs --json in A: %v:\n%s", err, r)
		}
		if rec.ID != idA || rec.Project != a || rec.State != "exited" || rec.Changed == nil || *rec.Changed != 1 {
			t.Errorf("runs --json in A: %+v", rec)
		}

		// Anywhere inside A (a subdirectory too) is A's project.
		sub := filepath.Join(a, "sub")
		h.writeFile(filepath.Join(sub, "x"), "", 0o644)
		h.chownAll(sub)
		if r := h.cordonIn(sub, "diff", "last"); r.code != 0 || !strings.Contains(r.stdout, "+from-a") {
			t.Errorf("diff last in A's subdirectory:\n%s", r)
		}
		// Outside every project there are no runs to name by last; the refusal says where they are.
		elsewhere := filepath.Join(h.base, "elsewhere")
		h.writeFile(filepath.Join(elsewhere, "x"), "", 0o644)
		h.chownAll(elsewhere)
		if r := h.cordonIn(elsewhere, "apply", "last"); r.code == 0 || !strings.Contains(r.stderr, idA) {
			t.Errorf("apply last outside both projects:\n%s", r)
		}
		if r := h.cordonIn(elsewhere, "runs"); strings.Contains(r.stdout, idA) || !strings.Contains(r.stderr, "--all") {
			t.Errorf("runs outside both projects:\n%s", r)
		}

		// The full id reaches a run of another project from anywhere.
		if r := h.cordonIn(b, "apply", idA); r.code != 0 {
			t.Fatalf("apply of A's run by full id from B: %s", r)
		}
		if got := readFile(t, filepath.Join(a, "file.txt")); got != "from-a\n" {
			t.Errorf("A after apply by full id: %q", got)
		}
	})
}

func TestGCKeepsUnappliedWork(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		p, q := h.gitRepo(""), h.gitRepo("other")
		applied := h.agentIn(p, "echo 1 > file.txt")
		if r := h.cordonIn(p, "apply", applied); r.code != 0 {
			t.Fatalf("apply: %s", r)
		}
		discarded := h.agentIn(p, "echo 2 > file.txt")
		if r := h.cordonIn(p, "discard", discarded); r.code != 0 {
			t.Fatalf("discard: %s", r)
		}
		// A run that changed nothing says no id (and may be removed at once): find it in the listing.
		before := h.cordonIn(p, "runs", "-q").stdout
		if r := h.cordonIn(p, "run", "--policy", h.policy(""), "--", "true"); r.code != 0 {
			t.Fatalf("unchanged run: %s", r)
		}
		unchanged, _, _ := strings.Cut(strings.TrimSuffix(h.cordonIn(p, "runs", "-q").stdout, before), "\n")
		if unchanged == "" {
			t.Log("the unchanged run was removed as it ended")
		}
		pending := h.agentIn(p, "echo 3 > new.txt")
		otherApplied := h.agentIn(q, "echo 4 > file.txt")
		if r := h.cordonIn(q, "apply", otherApplied); r.code != 0 {
			t.Fatalf("apply in other: %s", r)
		}
		listed := func(dir string) string { return h.cordonIn(dir, "runs", "--all", "-q").stdout }

		r := h.cordonIn(p, "gc")
		if r.code != 0 {
			t.Fatalf("gc: %s", r)
		}
		left := listed(p)
		for _, id := range []string{applied, discarded, unchanged} {
			if id != "" && strings.Contains(left, id) {
				t.Errorf("gc kept %s:\n%s\nleft:\n%s", id, r, left)
			}
		}
		if !strings.Contains(left, pending) || !strings.Contains(left, otherApplied) {
			t.Fatalf("gc removed unapplied work or another project's run:\n%s\nleft:\n%s", r, left)
		}

		if r := h.cordonIn(p, "gc", "--unapplied"); r.code != exitUsage || !strings.Contains(r.stderr, "--older-than") {
			t.Errorf("gc --unapplied without an age: %s", r)
		}
		if r := h.cordonIn(p, "gc", "--unapplied", "--older-than", "7d"); r.code != 0 || !strings.Contains(listed(p), pending) {
			t.Errorf("gc --unapplied --older-than 7d removed a run of a moment ago: %s", r)
		}
		r = h.cordonIn(p, "gc", "--unapplied", "--older-than", "0s")
		removing := strings.Index(r.stdout, "removing "+pending)
		if r.code != 0 || removing < 0 || !strings.Contains(r.stdout, "1 unapplied changes") || removing > strings.Index(r.stdout, "removed "+pending) {
			t.Errorf("gc --unapplied did not name the run before removing it:\n%s", r)
		}
		if strings.Contains(listed(p), pending) {
			t.Errorf("gc --unapplied --older-than 0s kept %s", pending)
		}
		if r := h.cordonIn(p, "gc", "--all"); r.code != 0 || strings.Contains(listed(p), otherApplied) {
			t.Errorf("gc --all kept the other project's applied run: %s", r)
		}
	})
}

// zombie starts a child that exits at once and stays unreaped until the test ends: what a killed
// cordon is while its parent has not waited for it. It returns the pid and start time.
func zombie(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			start, err := runstate.ProcessStart(pid)
			if err != nil {
				t.Fatal(err)
			}
			return pid, start
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not become a zombie", pid)
		}
	}
}

func TestKilledRunIsNotRunning(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		p := h.gitRepo("")
		id := h.agentIn(p, "echo changed > file.txt")
		// Record the run as running under a cordon that was killed and not reaped yet.
		pid, start := zombie(t)
		meta := filepath.Join(h.home, ".local", "state", "cordon", "runs", id, "meta.json")
		var m map[string]any
		if err := json.Unmarshal([]byte(readFile(t, meta)), &m); err != nil {
			t.Fatal(err)
		}
		m["state"], m["pid"], m["pid_start"] = "running", pid, start
		b, _ := json.Marshal(m)
		if err := os.WriteFile(meta, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := h.cordonIn(p, "runs")
		if !strings.Contains(r.stdout, id) || strings.Contains(r.stdout, "running") || !strings.Contains(r.stdout, "interrupted") {
			t.Errorf("a run whose cordon is a zombie is listed as running:\n%s", r)
		}
		if r := h.cordonIn(p, "apply", "last"); r.code != 0 {
			t.Fatalf("apply refused a run whose cordon is a zombie: %s", r)
		}
		if got := readFile(t, filepath.Join(p, "file.txt")); got != "changed\n" {
			t.Errorf("file after apply: %q", got)
		}
	})
}
