//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/procstat"
)

// brokenRunsc is a runsc that says it is a recent release and then fails the way runsc does, with
// an error in its --log file and exit status 128, before any sandbox exists.
const brokenRunsc = `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	for _, a := range os.Args[1:] {
		if a == "--version" {
			fmt.Println("runsc version release-20270101.0")
			return
		}
	}
	for _, a := range os.Args[1:] {
		if log, ok := strings.CutPrefix(a, "--log="); ok {
			os.WriteFile(log, []byte("{\"msg\":\"creating container: the broken runsc of the test refuses\",\"level\":\"error\"}\n"), 0o600)
		}
	}
	os.Exit(128)
}
`

// TestGVisorTierFailsClosed: whatever keeps the gVisor tier from being what was asked for stops
// the run before the command runs, with exit 125 and one line that names the step: runsc missing
// (with how to get it), runsc failing to start its sandbox (with runsc's own reason), a caller
// asking for a weaker tier than the policy's, and a rootless caller. The control is the same
// command with a working runsc, named by sandbox.runsc (not on PATH), which runs.
func TestGVisorTierFailsClosed(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		marker := "ran-" + h.canary
		script := "touch " + marker + "; echo " + marker
		ran := func(r result) bool { return strings.Contains(r.stdout, marker) }
		noRunscPath := []string{"PATH=/usr/bin:/bin"}
		if h.who.uid != 0 {
			r := h.cordon(noRunscPath, "", "run", "--isolation", "gvisor", "--", "sh", "-c", script)
			if r.code != 125 || ran(r) || !strings.Contains(r.stderr, "needs cordon to run as root") {
				t.Fatalf("rootless --isolation gvisor: want exit 125 saying it needs root:\n%s", r)
			}
			return
		}
		runsc := runscPath(t)
		t.Run("control", func(t *testing.T) {
			pol := h.policy("sandbox:\n  isolation: gvisor\n  runsc: " + runsc + "\n")
			r := h.cordon(noRunscPath, "", "run", "--policy", pol, "--", "sh", "-c", script+"; uname -v")
			if r.code != 0 || !ran(r) {
				t.Fatalf("the gVisor tier with sandbox.runsc did not run the command:\n%s", r)
			}
		})
		t.Run("runsc missing", func(t *testing.T) {
			r := h.cordon(noRunscPath, "", "run", "--isolation", "gvisor", "--", "sh", "-c", script)
			if r.code != 125 || ran(r) || !strings.Contains(r.stderr, "runsc not found") || !strings.Contains(r.stderr, "go install gvisor.dev/gvisor/runsc@") || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("want exit 125 and one line saying how to get runsc:\n%s", r)
			}
		})
		t.Run("runsc fails", func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "main.go")
			if err := os.WriteFile(src, []byte(brokenRunsc), 0o644); err != nil {
				t.Fatal(err)
			}
			build := exec.Command("go", "build", "-o", filepath.Join(dir, "runsc"), src)
			build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building the broken runsc: %v\n%s", err, out)
			}
			os.Chmod(dir, 0o755)
			r := h.cordon([]string{"PATH=" + dir + ":/usr/bin:/bin"}, "", "run", "--isolation", "gvisor", "--", "sh", "-c", script)
			if r.code != 125 || ran(r) || !strings.Contains(r.stderr, "starting the gVisor sandbox (runsc)") || !strings.Contains(r.stderr, "the broken runsc of the test refuses") {
				t.Fatalf("want exit 125 naming the step and runsc's reason:\n%s", r)
			}
			if _, err := os.Stat(filepath.Join(h.ws, marker)); err == nil {
				t.Fatal("the command ran on the host")
			}
		})
		t.Run("weaker than the policy", func(t *testing.T) {
			pol := h.policy("sandbox:\n  isolation: gvisor\n")
			r := h.cordon(nil, "", "run", "--policy", pol, "--isolation", "native", "--", "sh", "-c", script)
			if r.code != 125 || ran(r) || !strings.Contains(r.stderr, "may not weaken") {
				t.Fatalf("--isolation native under a gvisor policy: want exit 125:\n%s", r)
			}
		})
	})
}

// TestGVisorRuntimeDescriptorTable: runsc is started with descriptor 255 open (/dev/null,
// read-only), so that its gofer and sandbox begin with descriptor tables of 256 entries and the
// Sentry's move of the command's streams to 253-255 grows none while it has many threads (a kernel
// RCU grace period, 10-30 ms of every start). Seen from the host while a run sleeps: the gofer, which
// never grows its own table, has 256 entries (64 without the descriptor), and neither the gofer nor
// the sandbox holds the descriptor itself (runsc marks what it inherited close-on-exec before it
// starts them): nothing of it reaches the Sentry.
func TestGVisorRuntimeDescriptorTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the gVisor tier needs root")
	}
	h := newHarness(t, who{name: "root", uid: 0, gid: 0})
	h.useGVisor(t)
	cmd := h.command(nil, cordonBin, h.tierArgs([]string{"run", "--", "sh", "-c", "echo ready; exec sleep 60"})...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("the run did not start: %q, %v", line, err)
	}
	found := map[string]int{}
	var walk func(pid int)
	walk = func(pid int) {
		for _, c := range procstat.Children(pid) {
			argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
			name, _, _ := strings.Cut(string(argv), "\x00")
			if name == "runsc-gofer" || name == "runsc-sandbox" {
				found[name] = c
			}
			walk(c)
		}
	}
	walk(cmd.Process.Pid)
	for _, name := range []string{"runsc-gofer", "runsc-sandbox"} {
		pid, ok := found[name]
		if !ok {
			t.Fatalf("no %s process below cordon (found %v)", name, found)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		var size int
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "FDSize:"); ok {
				size, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if size < 256 {
			t.Errorf("%s (pid %d) has a descriptor table of %d entries, want at least 256", name, pid, size)
		}
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/255", pid))
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/255", pid))
		if target == os.DevNull && strings.Contains(string(info), "flags:\t0100000\n") || target == os.DevNull && name == "runsc-gofer" {
			t.Errorf("%s (pid %d) holds the descriptor runsc was started with (255 -> %s, %q)", name, pid, target, info)
		}
	}
}
