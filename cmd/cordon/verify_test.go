//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
	"github.com/cordon-sandbox/cordon/internal/workspace"
)

// scorecard parses `cordon verify|probe --json` output.
func scorecard(t *testing.T, r result) probe.Scorecard {
	t.Helper()
	var sc probe.Scorecard
	if err := json.Unmarshal([]byte(r.stdout), &sc); err != nil || len(sc.Results) == 0 {
		t.Fatalf("no scorecard (%v):\n%s", err, r)
	}
	return sc
}

func statuses(sc probe.Scorecard) map[string]probe.Result {
	m := map[string]probe.Result{}
	for _, r := range sc.Results {
		m[r.ID] = r
	}
	return m
}

// requireNoFail asserts a verify run exited 0 with no FAIL row, and that the probes named in mustPass
// actually passed (a SKIP there would mean verify proved nothing about that boundary).
func requireNoFail(t *testing.T, r result, mustPass ...string) {
	t.Helper()
	sc := scorecard(t, r)
	for _, res := range sc.Results {
		if res.Status == probe.Fail {
			t.Errorf("%s FAILED: %s", res.ID, res.Evidence)
		}
	}
	if r.code != 0 || !sc.OK {
		t.Fatalf("cordon verify exited %d (ok=%v):\n%s", r.code, sc.OK, r.stderr)
	}
	got := statuses(sc)
	for _, id := range mustPass {
		if got[id].Status != probe.Pass {
			t.Errorf("%s: want PASS, got %s (%s)", id, got[id].Status, got[id].Evidence)
		}
	}
}

// Probes that need nothing but the default policy and must pass (not skip) under cordon.
var defaultMustPass = []string{
	"fs.secret-direct", "fs.secret-alias", "fs.symlink-escape", "fs.hardlink-escape", "fs.write-outside",
	"fs.mount", "fs.leaked-fds", "net.loopback", "net.udp", "net.dns-tunnel", "cred.env", "cred.proc-environ",
	"cred.agent-sockets", "cred.keyring", "proc.host-visible", "proc.signal", "proc.ptrace", "proc.tiocsti",
	"proc.abstract-unix", "proc.setuid", "proc.userns", "proc.io_uring", "proc.raw-socket",
	"persist.git-hook", "persist.hooks-path", "persist.envrc", "persist.vscode-tasks",
	"net.vsock", "proc.socket-families", "proc.netlink", "fs.inherited-streams",
}

// TestVerifyDefaultPolicy: cordon verify with the built-in policy finds no escape.
func TestVerifyDefaultPolicy(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		r := h.cordon(nil, "", "verify", "--json")
		requireNoFail(t, r, defaultMustPass...)
		if entries, _ := os.ReadDir(h.home); len(entries) > 3 {
			t.Errorf("verify left files in the home: %v", entries)
		}
	})
}

// TestVerifyRealisticPolicy: a policy allowing two hosts (pinned to a local upstream) and setting
// limits; the network probes that misuse an allowed path (CONNECT relays, Host and SNI lies) run.
func TestVerifyRealisticPolicy(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		port := upstream(t, h.canary)
		// docs.test is not pinned: verify's canary resolver answers it with loopback, where verify
		// listens on its port; the gateway must refuse to dial it.
		pol := h.policy(fmt.Sprintf(`network:
  allow:
    - {host: api.test, ports: [%[1]d]}
    - {host: code.test, ports: [%[1]d]}
    - {host: docs.test, ports: [%[2]d]}
    - {host: cred.test, ports: [%[1]d]}
  hosts: {api.test: 127.0.0.1, code.test: 127.0.0.1, cred.test: 127.0.0.1}
credentials:
  - name: API_TOKEN
    from: {env: CORDON_VERIFY_TOKEN}
    inject: {host: cred.test, header: x-api-key}
limits:
  memory: 1GiB
  pids: 64
  openFiles: 4096
`, port, freePort(t)))
		r := h.cordon([]string{"CORDON_VERIFY_TOKEN=sk-ant-api03-" + h.canary}, "", "verify", "--json", "--policy", pol)
		// res.memory may SKIP where touching memory is too slow to reach the limit in its time bound.
		requireNoFail(t, r, append(defaultMustPass, "net.connect-relay", "net.host-mismatch", "net.sni-mismatch", "net.name-to-loopback", "res.pids", "res.open-files", "cred.placeholder", "cred.cleartext")...)
		if !strings.Contains(r.stdout, "UPSTREAM") && !strings.Contains(statuses(scorecard(t, r))["net.host-mismatch"].Evidence, "200") {
			t.Errorf("net.host-mismatch never reached the allowed upstream, so it proved nothing:\n%s", r.stdout)
		}
	})
}

// TestVerifyTableAndExit: the human table lists every probe with a verdict and the scores.
func TestVerifyTableAndExit(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		r := h.cordon(nil, "", "verify")
		if r.code != 0 || !strings.Contains(r.stdout, "persist.envrc") || !strings.Contains(r.stdout, "no probe escaped") || !strings.Contains(r.stdout, "processes") {
			t.Fatalf("%s", r)
		}
	})
}

// TestProbeUnsandboxedFails runs the probes on the bare host with canaries planted: they must fail,
// with evidence. This is what proves each probe can fail.
func TestProbeUnsandboxedFails(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		set, err := canary.Plant(canary.Options{Home: h.home, Dir: h.base, Exe: cordonBin, WriteDirs: []string{h.home}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
		c := set.Coordinates()
		// The caller owns its home's files; the canaries were planted by the test (root).
		os.Chown(c.SecretFile.Path, h.who.uid, h.who.gid)
		os.Chown(set.AgentSocket(), h.who.uid, h.who.gid)
		js, _ := json.Marshal(c)
		r := run(t, h.command([]string{set.EnvVar(), "SSH_AUTH_SOCK=" + set.AgentSocket()}, cordonBin, "probe", "--json", "--canaries", string(js)), "")
		if r.code != 1 {
			t.Fatalf("cordon probe on the bare host exited %d, want 1:\n%s", r.code, r)
		}
		got := statuses(scorecard(t, r))
		mustFail := []string{"fs.secret-direct", "fs.secret-alias", "fs.symlink-escape", "fs.write-outside", "net.loopback", "net.udp",
			"net.dns-tunnel", "cred.env", "cred.agent-sockets", "cred.keyring", "proc.host-visible", "proc.abstract-unix", "proc.setuid", "res.memory", "res.cpu"}
		if h.who.uid == 0 {
			// The canary process runs as root: only root reads its environment and signals it. Root
			// may also mount, open raw sockets and push input into terminals.
			mustFail = append(mustFail, "cred.proc-environ", "proc.signal", "fs.mount", "proc.raw-socket", "proc.tiocsti", "proc.ptrace", "proc.io_uring", "proc.userns")
		}
		for _, id := range mustFail {
			if res := got[id]; res.Status != probe.Fail || res.Evidence == "" {
				t.Errorf("%s on the bare host: want FAIL with evidence, got %s (%s)", id, res.Status, res.Evidence)
			}
		}
		if _, err := os.Stat(c.SecretFile.Path); err != nil {
			t.Errorf("the probe disturbed the canary: %v", err)
		}
	})
}

// TestVerifyDistrustsReportedPaths: the report comes from inside, so a path the probe cannot have
// chosen is a failure and is never touched on the host.
func TestVerifyDistrustsReportedPaths(t *testing.T) {
	victim := t.TempDir() + "/precious"
	if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, ev := judgeWrites([]string{victim}, "abc")
	if st != probe.Fail || !strings.Contains(ev, "cannot have chosen") {
		t.Fatalf("got %s %s", st, ev)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatal("verify removed a host file named by the report")
	}
	// Control: a path the probe would choose, present on the host, is an escape (and is removed).
	planted := t.TempDir() + "/cordon-probe-write-abc"
	os.WriteFile(planted, nil, 0o600)
	if st, _ := judgeWrites([]string{planted}, "abc"); st != probe.Fail {
		t.Fatalf("a write that reached the host passed")
	}
	if st, _ := judgeWrites([]string{planted}, "abc"); st != probe.Pass {
		t.Fatalf("a write that stayed inside failed")
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestVerifyJudgesPlants: a planted file counts as caught only when it is not in the real project and
// the workspace guard flags it.
func TestVerifyJudgesPlants(t *testing.T) {
	project := t.TempDir()
	planted := project + "/.envrc"
	h := hostView{project: project}
	risks := []workspace.Risk{{Path: ".envrc", Reason: "direnv runs it"}}
	if st, ev := judgePlant([]string{planted}, h, risks, nil); st != probe.Pass {
		t.Fatalf("flagged and not in the project: got %s %s", st, ev)
	}
	if st, _ := judgePlant([]string{planted}, h, nil, nil); st != probe.Fail {
		t.Fatal("a plant the guard does not flag passed")
	}
	if st, _ := judgePlant([]string{planted}, h, risks, errors.New("no run")); st != probe.Fail {
		t.Fatal("a plant passed without asking the guard")
	}
	if st, _ := judgePlant([]string{"/etc/x"}, h, risks, nil); st != probe.Fail {
		t.Fatal("a plant outside the project passed")
	}
	os.WriteFile(planted, nil, 0o644)
	if st, ev := judgePlant([]string{planted}, h, risks, nil); st != probe.Fail || !strings.Contains(ev, "real project") {
		t.Fatalf("a plant that reached the project: got %s %s", st, ev)
	}
}

// TestJudgeHeld: the host fails a credential variable that held the real value, passes placeholders,
// and skips what it cannot know.
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
