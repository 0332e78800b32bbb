//go:build linux

package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

func TestExitCodesAndStreams(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		pol := h.policy("")
		h.writeFile(filepath.Join(h.ws, "tools", "hello.sh"), "#!/bin/sh\necho hello from $0\n", 0o755)
		h.chownAll(h.ws)
		// A script run by a relative path sees that path as $0 natively; gVisor's runsc resolves the
		// executable against the working directory before it execs it, so there the script (whose
		// interpreter is given the path exec'd) sees the absolute one (SECURITY-MODEL, gVisor tier).
		relScript := "./tools/hello.sh"
		if h.tier == "gvisor" {
			relScript = filepath.Join(h.ws, "tools/hello.sh")
		}
		tests := []struct {
			name     string
			stdin    string
			args     []string
			code     int
			stdout   string
			stderrRE string
		}{
			{"pipe passes through", "hi\n", []string{"run", "--policy", pol, "--", "cat"}, 0, "hi\n", ""},
			{"exit status", "", []string{"run", "--policy", pol, "--", "sh", "-c", "exit 3"}, 3, "", ""},
			{"killed by signal", "", []string{"run", "--policy", pol, "--", "sh", "-c", "kill -9 $$"}, 137, "", ""},
			{"not found", "", []string{"run", "--policy", pol, "--", "no-such-agent"}, 127, "", `no-such-agent: command not found inside the sandbox`},
			{"relative to the workspace", "", []string{"run", "--policy", pol, "--", "./tools/hello.sh"}, 0, "hello from " + relScript + "\n", ""},
			{"relative and missing", "", []string{"run", "--policy", pol, "--", "./tools/nope.sh"}, 127, "", `\./tools/nope.sh: command not found inside the sandbox`},
			{"not executable", "", []string{"run", "--policy", pol, "--", "/etc/hostname"}, 126, "", `cannot be executed inside the sandbox`},
			{"no command", "", []string{"run", "--policy", pol}, exitCordon, "", `run: no command given`},
			{"unknown flag", "", []string{"run", "--bogus", "--", "true"}, exitCordon, "", `run: unknown flag --bogus`},
			{"unknown command", "", []string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
			{"missing policy", "", []string{"run", "--policy", filepath.Join(h.base, "nope.yaml"), "--", "true"}, exitCordon, "", `nope.yaml`},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := h.cordon(nil, tc.stdin, tc.args...)
				if r.code != tc.code || (tc.stdout != "" && r.stdout != tc.stdout) {
					t.Fatalf("want exit %d stdout %q, got\n%s", tc.code, tc.stdout, r)
				}
				if tc.stderrRE != "" && !regexp.MustCompile(tc.stderrRE).MatchString(r.stderr) {
					t.Fatalf("stderr does not match %q:\n%s", tc.stderrRE, r)
				}
				if strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 && tc.code >= exitCordon {
					t.Fatalf("a failure must be one line:\n%s", r.stderr)
				}
			})
		}
	})
}

// TestPolicyErrors checks that a malformed policy names file, line and column and starts nothing.
func TestPolicyErrors(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		pol := h.policy("limits:\n  memory: 2 gigs\n")
		r := h.cordon(nil, "", "run", "--policy", pol, "--", "echo", "STARTED")
		if r.code != exitCordon || !strings.Contains(r.stderr, pol+":3:11:") || !strings.Contains(r.stderr, "limits.memory") {
			t.Fatalf("want exit 125 with file:line:col, got\n%s", r)
		}
		if strings.Contains(r.stdout, "STARTED") {
			t.Fatal("the command ran despite a malformed policy")
		}
		r = h.cordon(nil, "", "policy", "check", pol)
		if r.code == 0 || !strings.Contains(r.stderr, pol+":3:11:") {
			t.Fatalf("policy check accepted a malformed policy:\n%s", r)
		}
		good := h.policy("limits:\n  pids: 100\n")
		if r = h.cordon(nil, "", "policy", "check", good); r.code != 0 || !strings.Contains(r.stdout, "pids: 100") {
			t.Fatalf("policy check on a good policy:\n%s", r)
		}
	})
}

// TestPolicyInsideWorkspaceRefused: the agent must not be able to edit its own boundary.
func TestPolicyInsideWorkspaceRefused(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		inside := filepath.Join(h.ws, "policy.yaml")
		h.writeFile(inside, "version: 1\n", 0o644)
		outsideLink := filepath.Join(h.base, "link.yaml")
		os.Symlink(inside, outsideLink)
		for _, p := range []string{inside, outsideLink} {
			r := h.cordon(nil, "", "run", "--policy", p, "--", "true")
			if r.code != exitCordon || !strings.Contains(r.stderr, "policy") {
				t.Fatalf("a policy inside the workspace (%s) was accepted:\n%s", p, r)
			}
		}
		// Control: the same policy outside the workspace is accepted.
		if r := h.cordon(nil, "", "run", "--policy", h.policy(""), "--", "true"); r.code != 0 {
			t.Fatalf("control: %s", r)
		}
	})
}

// TestWorkspaceRefusesHome: running cordon in the home directory would expose ~/.ssh.
func TestWorkspaceRefusesHome(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		r := h.cordon(nil, "", "run", "--policy", h.policy(""), "--workspace", h.home, "--", "true")
		if r.code != exitCordon || !strings.Contains(r.stderr, "home directory") {
			t.Fatalf("a workspace containing the home directory was accepted:\n%s", r)
		}
	})
}

// TestTerminal runs cordon on a terminal: the sandbox gets its own pseudo-terminal with the caller's
// window size, and TIOCSTI on it is refused.
func TestTerminal(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		// tty names the terminal from /proc/self/fd/0, which gVisor shows as host:[N] for the
		// terminal runsc made in the box's devpts: python's isatty says whether there is one.
		script := `stty size; tty; python3 -c 'import os; print("ISATTY", os.isatty(0))'; python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("TIOCSTI", libc.ioctl(0, ctypes.c_ulong(0x5412), ctypes.c_char_p(b"x")), ctypes.get_errno())
'
i=0; while [ "$(stty size)" = "37 91" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo "resized to $(stty size)"`
		cmd := h.command(nil, cordonBin, h.tierArgs([]string{"run", "--policy", h.policy(""), "--", "sh", "-c", script})...)
		ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 37, Cols: 91})
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		var out syncbuf.Buffer
		done := make(chan struct{})
		go func() { io.Copy(&out, ptmx); close(done) }()
		for i := 0; i < 1500 && !strings.Contains(out.String(), "TIOCSTI"); i++ { // up to 30 s: a loaded machine starts slowly
			time.Sleep(20 * time.Millisecond)
		}
		pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 120})
		cmd.Process.Signal(syscall.SIGWINCH)
		errc := make(chan error, 1)
		go func() { errc <- cmd.Wait() }()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("cordon on a terminal: %v\n%s", err, out.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("cordon on a terminal did not finish:\n%s", out.String())
		}
		ptmx.Close()
		<-done
		s := out.String()
		if !strings.Contains(s, "37 91") {
			t.Errorf("the window size did not reach the sandbox:\n%s", s)
		}
		if !strings.Contains(s, "ISATTY True") || h.tier == "" && !strings.Contains(s, "/dev/pts/") {
			t.Errorf("the sandbox has no terminal:\n%s", s)
		}
		if !strings.Contains(s, "resized to 50 120") {
			t.Errorf("the window size change did not reach the sandbox:\n%s", s)
		}
		if !strings.Contains(s, "TIOCSTI -1 1") {
			t.Errorf("TIOCSTI was not refused with EPERM:\n%s", s)
		}
	})
}

func TestDoctor(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		r := h.cordon(nil, "", "doctor")
		if r.code != 0 {
			t.Fatalf("doctor failed on a host where cordon works:\n%s", r)
		}
		for _, want := range []string{"user namespaces", "landlock", "seccomp", "cgroups", "kernel relay", "sandbox", "nftables", "tier native", "tier gvisor"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("doctor does not report %s:\n%s", want, r.stdout)
			}
		}
		// As root with runsc on PATH the gVisor tier is there; rootless, doctor says it needs root.
		wantGVisor := "warn tier gvisor --isolation gvisor needs cordon to run as root"
		if h.who.uid == 0 {
			runsc := runscPath(t)
			r = h.cordon([]string{"PATH=" + filepath.Dir(runsc) + ":/usr/bin:/bin"}, "", "doctor")
			wantGVisor = "ok tier gvisor --isolation gvisor: started /bin/true on gVisor's kernel"
			// And without runsc it says how to get one.
			if m := h.cordon([]string{"PATH=/usr/bin:/bin"}, "", "doctor"); !strings.Contains(m.stdout, "go install gvisor.dev/gvisor/runsc@") {
				t.Errorf("doctor without runsc does not say how to get it:\n%s", m.stdout)
			}
		}
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), wantGVisor) {
			t.Errorf("doctor's gVisor line: want %q in:\n%s", wantGVisor, r.stdout)
		}
	})
}

// TestWorkspaceInsideRepository: started in a subdirectory of a git repository, cordon takes that
// directory as the workspace (no more is exposed than asked) and says, in one line, that git inside
// will find no repository and how to include it; started at the root, or with --workspace, it says
// nothing.
func TestWorkspaceInsideRepository(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		sub := filepath.Join(h.ws, "sub")
		h.writeFile(filepath.Join(h.ws, ".git", "HEAD"), "ref: refs/heads/main\n", 0o644)
		h.writeFile(filepath.Join(sub, "f.txt"), "x", 0o644)
		h.chownAll(h.ws)
		pol := h.policy("")
		cmd := h.command(nil, cordonBin, "run", "--policy", pol, "--", "sh", "-c", "pwd; ls -A ..")
		cmd.Dir = sub
		r := run(t, cmd, "")
		want := "cordon: the workspace is " + sub + ", inside the git repository " + h.ws + ", which it does not include (git inside finds no repository); to include it: --workspace " + h.ws
		if r.code != 0 || !strings.Contains(r.stderr, want) || strings.Contains(r.stdout, ".git") {
			t.Fatalf("from a subdirectory: want the workspace to be it, and the line %q:\n%s", want, r)
		}
		for _, args := range [][]string{
			{"run", "--policy", pol, "--", "true"},
			{"run", "--policy", pol, "--workspace", sub, "--", "true"},
		} {
			cmd := h.command(nil, cordonBin, args...)
			if slices.Contains(args, "--workspace") {
				cmd.Dir = sub
			}
			if r := run(t, cmd, ""); r.code != 0 || strings.Contains(r.stderr, "git repository") {
				t.Errorf("%v: said something about the repository:\n%s", args, r)
			}
		}
	})
}
