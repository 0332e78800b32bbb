//go:build linux

package inpod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// killTimeout bounds the wait for the command's leftovers to be gone after SIGKILL: a process stuck
// in the kernel (an NFS read, say) may take a while; one that never goes means no patch.
const killTimeout = 10 * time.Second

// forwarded are the signals the wrapper passes on to the command.
var forwarded = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP}

// runAndKill runs the command to its end, then kills everything else the wrapper can signal and
// waits until it is gone. It returns the exit code, an error when the command could not run, and an
// error when something outlived the kill.
func runAndKill(ctx context.Context, o AgentOptions) (code int, runErr, killErr error) {
	// Every orphan of the command's becomes the wrapper's child (in a pod the wrapper is pid 1 and
	// that is so anyway), so that waiting for its children is waiting for all of them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return exitWrapper, fmt.Errorf("agent: becoming the command's subreaper: %w", err), nil
	}
	// The command runs as the wrapper's uid, so it may signal, trace or reprioritise it. Every signal
	// is caught (the forwarded ones passed on, the rest dropped: an uncaught SIGQUIT or SIGSEGV would
	// end the wrapper and leave the results to the command), and the wrapper is not dumpable (no
	// ptrace of it, its /proc files root's: no oom_score_adj write). exec gives the command its own
	// defaults back.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return exitWrapper, fmt.Errorf("agent: making the wrapper undumpable: %w", err), nil
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	defer signal.Stop(sigs)

	code, runErr = run(ctx, o, sigs)
	return code, runErr, killOthers(sigs, time.Now().Add(killTimeout))
}

// run starts the command and supervises it: signals are forwarded, every child that ends is reaped,
// and the command's own status is returned.
func run(ctx context.Context, o AgentOptions, sigs <-chan os.Signal) (int, error) {
	path, err := lookPath(o.Env, o.Args[0])
	if err != nil {
		return exitNotFound, fmt.Errorf("agent: %w", err)
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(o.Dir, path)
	}
	p, err := os.StartProcess(path, o.Args, &os.ProcAttr{
		Dir: o.Dir, Env: o.Env, Files: []*os.File{o.Stdin, o.Stdout, o.Stderr}, Sys: terminalAttr(o.Stdin),
	})
	if err != nil {
		return startError(err), fmt.Errorf("agent: starting %s: %w", o.Args[0], err)
	}
	defer p.Release()
	pid := p.Pid
	for {
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || wpid <= 0 {
				break
			}
			if wpid == pid {
				if ws.Signaled() {
					return 128 + int(ws.Signal()), nil
				}
				return ws.ExitStatus(), nil
			}
		}
		select {
		case s := <-sigs:
			if slices.Contains(forwarded, s) {
				_ = unix.Kill(pid, s.(syscall.Signal))
			}
		case <-ctx.Done():
			_ = unix.Kill(pid, unix.SIGKILL)
			ctx = context.Background() // once
		}
	}
}

// terminalAttr makes a terminal on stdin the command's controlling terminal: when it is the
// wrapper's own (a pod's tty), the command's process group becomes its foreground group, so that
// the terminal's ^C and window changes go to the command; when it belongs to no session the command
// starts one with it. Without a terminal the command stays in the wrapper's group.
func terminalAttr(stdin *os.File) *syscall.SysProcAttr {
	fd := int(stdin.Fd())
	if !term.IsTerminal(fd) {
		return &syscall.SysProcAttr{}
	}
	sid, err := unix.IoctlGetInt(fd, unix.TIOCGSID)
	switch {
	case err == nil && sid == getsid():
		return &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	case errors.Is(err, unix.ENOTTY):
		return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	return &syscall.SysProcAttr{} // another session's terminal: it cannot be the command's
}

func getsid() int {
	sid, err := unix.Getsid(0)
	if err != nil {
		return -1
	}
	return sid
}

// killOthers sends SIGKILL to every process the wrapper may signal and returns once none of them
// is alive. Its own descendants are its children (subreaper) and are reaped until none is left;
// anything else (a process exec'd into the container) is found in /proc and waited for through a
// pidfd. Processes the kernel's kill(-1) passes over (pid 1 and the wrapper) are not its concern.
func killOthers(sigs <-chan os.Signal, deadline time.Time) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		if err := unix.Kill(-1, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("killing the command's leftovers: %w", err)
		}
		children := true
		for children {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			switch {
			case errors.Is(err, unix.EINTR):
			case errors.Is(err, unix.ECHILD):
				children = false
			case err != nil:
				return fmt.Errorf("reaping the command's leftovers: %w", err)
			case wpid == 0: // children remain, not yet dead
				select {
				case <-sigs:
				case <-timer.C:
					return errors.New("the command's leftover processes did not end after SIGKILL; no patch was made")
				}
			}
		}
		if err := unix.Kill(-1, 0); errors.Is(err, unix.ESRCH) {
			return nil
		}
		alive, err := othersAlive()
		if err != nil {
			return err
		}
		if len(alive) == 0 {
			return nil // zombies of someone else's: they run no more
		}
		if err := waitGone(alive, deadline); err != nil {
			return err
		}
	}
}

// othersAlive lists, as pidfds, the live processes other than pid 1 and the wrapper that the
// wrapper may signal.
func othersAlive() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	self := os.Getpid()
	var fds []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 || pid == self {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone already
		}
		// Pinned by the pidfd: pid names this process until fd is closed.
		if unix.PidfdSendSignal(fd, 0, nil, 0) != nil || zombie(pid) {
			unix.Close(fd)
			continue
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// zombie says whether pid has ended (its parent has yet to reap it).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// waitGone kills the processes of fds and waits until each has ended, closing the fds.
func waitGone(fds []int, deadline time.Time) error {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, fd := range fds {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	for left := len(pfds); left > 0; {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return fmt.Errorf("%d processes the command left did not end after SIGKILL; no patch was made", left)
		}
		if _, err := unix.Poll(pfds, ms); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("waiting for the command's leftovers: %w", err)
		}
		left = 0
		for i := range pfds {
			if pfds[i].Revents != 0 {
				pfds[i].Fd = -1 // ended: poll ignores it from now on
			}
			if pfds[i].Fd >= 0 {
				left++
			}
		}
	}
	return nil
}
