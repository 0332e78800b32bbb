//go:build linux

package linux

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUntilExited: the wait for init parks on its pidfd until the process has ended, then wait
// reaps it. A wait that returned at once (the fallback, a blocking wait4 after it) fails the first
// check; one that never saw the exit fails the second.
func TestUntilExited(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pidfd := -1
	// The child ends when the pipe's write end is closed: when the test says so.
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "read x; exit 7"}, &syscall.ProcAttr{
		Files: []uintptr{r.Fd(), os.Stderr.Fd(), os.Stderr.Fd()},
		Sys:   &syscall.SysProcAttr{PidFD: &pidfd},
	})
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	s := newRunning(nil)
	s.pid, s.pidfd = pid, pidfd
	returned := make(chan struct{})
	go func() { s.untilExited(); close(returned) }()
	select {
	case <-returned:
		w.Close()
		t.Fatal("untilExited returned while the process was running")
	case <-time.After(50 * time.Millisecond):
	}
	w.Close()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("untilExited did not return after the process ended")
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || info.Code == 0 {
		t.Fatalf("untilExited returned before the exit (waitid: %v)", err)
	}
	go s.wait()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not reap the process")
	}
	if !s.waitStatus.Exited() || s.waitStatus.ExitStatus() != 7 || s.pidfd != -1 {
		t.Fatalf("wait status %v, pidfd %d", s.waitStatus, s.pidfd)
	}
}
