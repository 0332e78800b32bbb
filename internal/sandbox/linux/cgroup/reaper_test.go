//go:build linux

package cgroup

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startHolder starts a process that plays cordon (see holderMain) and returns its report.
func startHolder(t *testing.T, name string) (*exec.Cmd, holderReport) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "__holder", name)
	cmd.Stderr = os.Stderr
	out := lines(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var r holderReport
	select {
	case l := <-out:
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("holder said %q: %v", l, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("holder did not report")
	}
	if r.Err != "" {
		t.Fatalf("holder: %s", r.Err)
	}
	// Whatever happens, leave nothing behind.
	t.Cleanup(func() { _ = (&Group{dirs: r.Dirs}).Destroy() })
	return cmd, r
}

func allGone(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// reaperBound is how long the reaper may take to clean up after a SIGKILL. It acts within
// milliseconds; the bound is for a loaded CI machine, where a fixed short wait would fail at random.
const reaperBound = 30 * time.Second

// cordon is SIGKILLed: it cannot clean up, so the reaper must (the child dies and the cgroups go);
// and while cordon lives the reaper must leave the run alone.
func TestReaperCleansUpAfterSIGKILL(t *testing.T) {
	needRoot(t)
	holder, r := startHolder(t, testName(t))
	child := pidfd(t, r.Child)

	time.Sleep(200 * time.Millisecond)
	if allGone(r.Paths) || exited(child, 0) {
		t.Fatal("the reaper acted while its keepalive's holder was alive")
	}

	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	deadline := killed.Add(reaperBound)
	// The child's exit is an event to wait on; the directories' removal, which follows it, is polled.
	if !exited(child, reaperBound) {
		t.Fatalf("child %d still alive %v after the holder's SIGKILL", r.Child, reaperBound)
	}
	for !allGone(r.Paths) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("cgroups gone %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	if !allGone(r.Paths) {
		t.Errorf("cgroups %v still there %v after the holder's SIGKILL", r.Paths, reaperBound)
	}
}

// A normal exit destroys the group first; the reaper then finds nothing and exits quietly.
func TestReaperAfterNormalExit(t *testing.T) {
	needRoot(t)
	holder, r := startHolder(t, testName(t)+"-clean")
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if !allGone(r.Paths) {
		t.Errorf("cgroups %v left after a normal exit", r.Paths)
	}
}

// The reaper kills what cgroup.procs lists and removes directories: it refuses instructions naming
// anything but a cgroup below a hierarchy's root.
func TestReaperRefusesNonCgroupPaths(t *testing.T) {
	tmp := t.TempDir()
	bad := []string{
		`{"dirs":[{"path":"` + tmp + `"}]}`,         // not a cgroup file system
		`{"dirs":[{"path":"relative/x"}]}`,          // not absolute
		`{"dirs":[{"path":"/sys/fs/cgroup/../x"}]}`, // not clean
		`{"dirs":[]}`, // nothing to do is a mistake
		`not json`,
	}
	if h, err := readHost(); err == nil {
		for _, x := range h.hierarchies {
			if x.cur == x.mount {
				bad = append(bad, `{"dirs":[{"path":"`+x.mount+`"}]}`) // a hierarchy's root
				break
			}
		}
	}
	for _, in := range bad {
		if _, err := readInstructions(strings.NewReader(in + "\n")); err == nil {
			t.Errorf("accepted %s", in)
		}
	}
	if _, err := readInstructions(strings.NewReader(`{"dirs":[{"path":"/sys/fs/cgroup/gone-already"}]}` + "\n")); err != nil {
		t.Errorf("refused a cgroup path that no longer exists: %v", err)
	}
}
