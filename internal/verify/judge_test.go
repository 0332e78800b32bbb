package verify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
)

// TestJudgeWritesDistrustsReportedPaths: the report comes from inside, so a path the probe cannot
// have chosen is a failure and is never touched on the host.
func TestJudgeWritesDistrustsReportedPaths(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{victim, "relative/cordon-probe-write-abc", "/tmp/../tmp/cordon-probe-write-abc"} {
		if st, ev := judgeWrites([]string{p}, "abc"); st != probe.Fail || !strings.Contains(ev, "cannot have chosen") {
			t.Errorf("judgeWrites(%q) = %s %s, want a failure naming an untrustworthy report", p, st, ev)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatal("a host file named by the report was removed")
	}
	// A path the probe would choose, present on the host, is an escape (and is removed).
	planted := filepath.Join(t.TempDir(), "cordon-probe-write-abc")
	if err := os.WriteFile(planted, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, _ := judgeWrites([]string{planted}, "abc"); st != probe.Fail {
		t.Fatal("a write that reached the host passed")
	}
	if st, _ := judgeWrites([]string{planted}, "abc"); st != probe.Pass {
		t.Fatal("a write that stayed inside failed")
	}
}

// TestJudgePlant: a planted file counts as caught only when it is not in the real project and the
// workspace guard flags it.
func TestJudgePlant(t *testing.T) {
	project := t.TempDir()
	if err := makeProject(project); err != nil {
		t.Fatal(err)
	}
	envrc := filepath.Join(project, ".envrc")
	gitcfg := filepath.Join(project, ".git/config")
	flagged := []cordon.Risk{{Path: ".envrc", Reason: "direnv runs it"}, {Path: ".git/config", Reason: "git runs what it names"}}
	for _, tc := range []struct {
		name     string
		paths    []string
		risks    []cordon.Risk
		guardErr error
		want     probe.Status
	}{
		{"flagged and not in the project", []string{envrc}, flagged, nil, probe.Pass},
		{"the .git/config the project already has, unchanged and flagged", []string{gitcfg}, flagged, nil, probe.Pass},
		{"not flagged by the guard", []string{envrc}, nil, nil, probe.Fail},
		{"the guard not asked", []string{envrc}, flagged, errNoRun, probe.Fail},
		{"outside the project", []string{"/etc/x"}, flagged, nil, probe.Fail},
		{"a sibling sharing the project's prefix", []string{project + "x/.envrc"}, flagged, nil, probe.Fail},
	} {
		if st, ev := judgePlant(tc.paths, project, tc.risks, tc.guardErr); st != tc.want {
			t.Errorf("%s: got %s %s, want %s", tc.name, st, ev, tc.want)
		}
	}
	if err := os.WriteFile(envrc, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st, ev := judgePlant([]string{envrc}, project, flagged, nil); st != probe.Fail || !strings.Contains(ev, "real project") {
		t.Errorf("a plant that reached the project: got %s %s", st, ev)
	}
	if err := os.WriteFile(gitcfg, []byte("[core]\n\thooksPath = /tmp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, ev := judgePlant([]string{gitcfg}, project, flagged, nil); st != probe.Fail || !strings.Contains(ev, ".git/config changed") {
		t.Errorf("the real .git/config changed: got %s %s", st, ev)
	}
}

// TestJudgeHeld: the host fails a credential variable that held the real value, passes placeholders,
// and skips what it cannot know, never showing a hash.
func TestJudgeHeld(t *testing.T) {
	real := map[string]string{"A": "aaaa", "B": "bbbb"}
	for _, tc := range []struct {
		held map[string]string
		want probe.Status
	}{
		{map[string]string{"A": "1111", "B": "2222"}, probe.Pass},
		{map[string]string{"A": "1111", "B": "bbbb"}, probe.Fail},
		{map[string]string{"C": "3333"}, probe.Skip},
	} {
		st, ev := judgeHeld(tc.held, real)
		if st != tc.want || strings.Contains(ev, "bbbb") {
			t.Errorf("judgeHeld(%v) = %v %q, want %v and no hash in the evidence", tc.held, st, ev, tc.want)
		}
	}
}

// TestCredentialHashes: the host hashes the value the run injects (for a variable set twice, the
// one the run reads), reads files as the run does, and never runs a command to learn a value.
func TestCredentialHashes(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	pol := &policy.Policy{Credentials: []policy.Credential{
		{Name: "TWICE", From: policy.Source{Env: "TWICE_SRC"}},
		{Name: "UNSET", From: policy.Source{Env: "NOT_SET"}},
		{Name: "FILE", From: policy.Source{File: keyFile}},
		{Name: "CMD", From: policy.Source{Command: []string{"touch", marker}}},
	}}
	env := []string{"TWICE_SRC=first", "TWICE_SRC=second"}
	got := credentialHashes(context.Background(), pol, env)
	want := map[string]string{"FILE": probe.Sum([]byte("file-secret"))}
	// The value the run injects is the one its source reads.
	sec, err := creds.FromEnv(env, "TWICE_SRC").Secret(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want["TWICE"] = probe.Sum([]byte(sec.Reveal()))
	if len(got) != len(want) || got["TWICE"] != want["TWICE"] || got["FILE"] != want["FILE"] {
		t.Errorf("credentialHashes = %v, want %v", got, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a command credential was run to learn its value")
	}
}

// TestHostChecksWithoutTheRun: when the run's record is gone the guard cannot be asked, so a plant
// fails; a held credential's hashes never reach the scorecard; what the host saw nothing of stands.
func TestHostChecksWithoutTheRun(t *testing.T) {
	set := plant(t)
	project := t.TempDir()
	in := []probe.Result{
		{ID: "persist.envrc", Status: probe.Skip, Planted: []string{filepath.Join(project, ".envrc")}},
		{ID: "cred.placeholder", Status: probe.Skip, Held: map[string]string{"A": "1111"}},
		{ID: "net.dns-tunnel", Status: probe.Pass, Evidence: "no answer"},
	}
	out := hostChecks(in, hostView{project: project, set: set, realHashes: map[string]string{"A": "aaaa"}})
	if r := out[0]; r.Status != probe.Fail || !strings.Contains(r.Evidence, errNoRun.Error()) {
		t.Errorf("a plant with no run to ask: got %s %s", r.Status, r.Evidence)
	}
	if r := out[1]; r.Status != probe.Pass || r.Held != nil {
		t.Errorf("cred.placeholder: got %s %s, held %v", r.Status, r.Evidence, r.Held)
	}
	if r := out[2]; r.Status != probe.Pass || r.Evidence != "no answer" {
		t.Errorf("net.dns-tunnel, nothing seen on the host: got %s %s", r.Status, r.Evidence)
	}
}

// plant plants a canary set for a test, the test binary serving as the canary process.
func plant(t *testing.T) *canary.Set {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	set, err := canary.Plant(canary.Options{Dir: t.TempDir(), Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	return set
}
