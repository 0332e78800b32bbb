//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
