//go:build linux

package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCheckThreadsDropped: the check fails on a process whose threads hold capabilities (this test,
// as root) and passes on one whose threads hold none (a child started as an unprivileged user, with
// threads of its own: a Go program).
func TestCheckThreadsDropped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a process that holds capabilities, and one started without them")
	}
	if err := checkThreadsDropped("/proc/self/task", 0); err == nil || !strings.Contains(err.Error(), "still holds capabilities") {
		t.Fatalf("checkThreadsDropped on this process (root, with capabilities) = %v; want a thread named", err)
	}
	// The test binary again, as nobody (from a copy nobody may execute): it waits on stdin with the
	// runtime's threads started.
	dir, err := os.MkdirTemp("", "cordon-threads-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "child")
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CORDON_TEST_THREADS_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	buf := make([]byte, 6)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("the child did not start: %q %v", buf, err)
	}
	task := fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)
	if ents, _ := os.ReadDir(task); len(ents) < 2 {
		t.Fatalf("the child has %d threads; the check needs several to prove anything", len(ents))
	}
	if err := checkThreadsDropped(task, 0); err != nil {
		t.Fatalf("checkThreadsDropped on an unprivileged process = %v; want nil", err)
	}
	// A listing that does not hold the thread asking is refused, not passed: it may be another pid
	// namespace's /proc, whose thread ids capget would not find.
	if err := checkThreadsDropped(task, unix.Gettid()); err == nil || !strings.Contains(err.Error(), "does not list this thread") {
		t.Fatalf("checkThreadsDropped of another process's threads, as this thread's = %v; want a refusal", err)
	}
}

// threadsChild is TestCheckThreadsDropped's child (TestMain runs it): it says it is ready and waits
// for its stdin to close.
func threadsChild() {
	os.Stdout.WriteString("ready\n")
	b := make([]byte, 1)
	os.Stdin.Read(b)
}
