//go:build linux

package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
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
	"fs.etc-secrets", "fs.dev-nodes", "res.core-dumps",
}

// tierMustPass is mustPass with the probes whose verdict depends on the tier: natively pid 1 is
// cordon's init, which proc.init-inspect attacks; in gVisor's tier the command itself is pid 1 (the
// box's init is outside, on the host), and the probe says so (checkInitInspect).
func tierMustPass(h *harness, mustPass ...string) []string {
	if h.tier == "gvisor" {
		return mustPass
	}
	return append(mustPass, "proc.init-inspect")
}

// checkInitInspect: in gVisor's tier proc.init-inspect skips because the probes are pid 1, and for
// no other reason.
func checkInitInspect(t *testing.T, h *harness, r result) {
	t.Helper()
	if h.tier != "gvisor" {
		return
	}
	if res := statuses(scorecard(t, r))["proc.init-inspect"]; res.Status != probe.Skip || !strings.Contains(res.Evidence, "this process is pid 1") {
		t.Errorf("proc.init-inspect in the gVisor tier: want SKIP as pid 1, got %s (%s)", res.Status, res.Evidence)
	}
}

// TestVerifyDefaultPolicy: cordon verify with the built-in policy finds no escape.
func TestVerifyDefaultPolicy(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		r := h.cordon(nil, "", "verify", "--json")
		requireNoFail(t, r, tierMustPass(h, defaultMustPass...)...)
		checkInitInspect(t, h, r)
		// The scorecard says which tier it tested.
		if want := cmp.Or(h.tier, "native"); scorecard(t, r).Tier != want {
			t.Errorf("the scorecard's tier is %q, want %q", scorecard(t, r).Tier, want)
		}
		if entries, _ := os.ReadDir(h.home); len(entries) > 3 {
			t.Errorf("verify left files in the home: %v", entries)
		}
	})
}

// TestVerifyRealisticPolicy: a policy allowing two hosts (pinned to a local upstream) and setting
// limits; the network probes that misuse an allowed path (CONNECT relays, Host and SNI lies) run.
func TestVerifyRealisticPolicy(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
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
		requireNoFail(t, r, tierMustPass(h, append(defaultMustPass, "net.connect-relay", "net.host-mismatch", "net.sni-mismatch", "net.name-to-loopback", "res.pids", "res.open-files", "cred.placeholder", "cred.cleartext")...)...)
		checkInitInspect(t, h, r)
		// The limit is 4096: the probe opened files until the kernel refused, at the limit.
		if ev := statuses(scorecard(t, r))["res.open-files"].Evidence; !strings.Contains(ev, "stopped at descriptor") || !strings.Contains(ev, "EMFILE") {
			t.Errorf("res.open-files did not open files up to the limit: %s", ev)
		}
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
			"net.dns-tunnel", "cred.env", "cred.agent-sockets", "cred.keyring", "proc.host-visible", "proc.abstract-unix", "proc.setuid", "res.memory", "res.cpu",
			"fs.dev-nodes"}
		if h.who.uid == 0 {
			// The canary process runs as root: only root reads its environment and signals it. Root
			// may also mount, open raw sockets, push input into terminals, mknod, read /etc/shadow
			// and look into pid 1.
			mustFail = append(mustFail, "cred.proc-environ", "proc.signal", "fs.mount", "proc.raw-socket", "proc.tiocsti", "proc.ptrace", "proc.io_uring", "proc.userns",
				"fs.etc-secrets", "proc.init-inspect")
		} else {
			if hostEtcReadable() {
				mustFail = append(mustFail, "fs.etc-secrets")
			}
			// Unprivileged, the host's pid 1 is out of reach, but its threads' capabilities show.
			if hostInitHoldsCapabilities() {
				mustFail = append(mustFail, "proc.init-inspect")
			}
		}
		// A core-dump limit the host lets any process raise: the probe raises it and a crash dumps core.
		var core syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_CORE, &core) == nil && core.Max != 0 {
			mustFail = append(mustFail, "res.core-dumps")
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

// hostEtcReadable says whether any user may read one of the host's /etc secrets fs.etc-secrets looks
// for: machine-id is world-readable and /etc/ssh world-listable where a host has them.
func hostEtcReadable() bool {
	for _, p := range []string{"/etc/machine-id", "/etc/ssh"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o004 != 0 {
			return true
		}
	}
	return false
}

// hostInitHoldsCapabilities says whether the host's pid 1 has an effective capability, which
// proc.init-inspect reports from /proc/1/task/*/status.
func hostInitHoldsCapabilities() bool {
	b, err := os.ReadFile("/proc/1/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strings.Trim(strings.TrimSpace(v), "0") != ""
		}
	}
	return false
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

// TestVerifyInterrupted: Ctrl-C (SIGINT) or SIGTERM while the sandbox starts or while the probes
// run ends verify with 130, and still removes what it planted: the canary in the home, its
// throwaway project, and its run.
func TestVerifyInterrupted(t *testing.T) {
	for _, tc := range []struct {
		when string
		sig  syscall.Signal
	}{
		{"starting", syscall.SIGINT},
		{"probing", syscall.SIGINT},
		{"probing", syscall.SIGTERM},
	} {
		t.Run(tc.when+"/"+tc.sig.String(), func(t *testing.T) {
			forEachIdentity(t, func(t *testing.T, h *harness) {
				// An allowed upstream that accepts and never answers: a connection to it means the
				// probes run, and the probe that made it waits.
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Close() })
				probing := make(chan struct{}, 1)
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						t.Cleanup(func() { c.Close() })
						select {
						case probing <- struct{}{}:
						default:
						}
					}
				}()
				pol := fmt.Sprintf("network:\n  allow: [{host: api.test, ports: [%d]}]\n  hosts: {api.test: 127.0.0.1}\n", l.Addr().(*net.TCPAddr).Port)
				// A credential command that holds the start until the signal: it runs before the
				// sandbox does, once the canaries are planted.
				credStarted := filepath.Join(h.base, "cred-started")
				if tc.when == "starting" {
					pol += fmt.Sprintf("credentials:\n  - {name: T, from: {command: [sh, -c, 'touch %s; exec sleep 600']}, inject: {host: api.test, header: x-api-key}}\n", credStarted)
				}
				// Short: the canary's agent socket lives below it.
				tmp, err := os.MkdirTemp("", "cv-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(tmp) })
				os.Chown(tmp, h.who.uid, h.who.gid)
				cmd := h.command([]string{"TMPDIR=" + tmp}, cordonBin, "verify", "--json", "--policy", h.policy(pol))
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				for ready := false; !ready; {
					select {
					case err := <-done:
						t.Fatalf("verify ended before the signal (%v):\n%s", err, stderr.String())
					case <-probing:
						ready = true
					case <-time.After(10 * time.Millisecond):
						_, err := os.Stat(credStarted)
						ready = err == nil
					}
				}
				cmd.Process.Signal(tc.sig)
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					cmd.Process.Kill()
					<-done
					t.Fatal("verify did not end after the signal")
				}
				if code := cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted") {
					t.Errorf("verify after %v: exit %d, want %d and a line saying so:\n%s", tc.sig, code, exitInterrupted, stderr.String())
				}
				runs := filepath.Join(h.home, ".local", "state", "cordon", "runs")
				for _, dir := range []string{tmp, runs} {
					if entries, _ := os.ReadDir(dir); len(entries) > 0 {
						t.Errorf("verify left %v in %s", entries, dir)
					}
				}
				if left, _ := filepath.Glob(filepath.Join(h.home, ".cordon-canary-*")); len(left) > 0 {
					t.Errorf("verify left its canary in the home: %v", left)
				}
			})
		})
	}
}
