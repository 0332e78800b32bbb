//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/warn"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-sandbox/cordon/internal/starttrace"
)

// running is a started sandbox (and, until Start, the init that a launched box is waiting in).
type running struct {
	// pid is init's host pid. pidfd refers to init until it is reaped, when it is closed (-1); pidMu
	// orders the two, so that a signal can never reach another process that reused the pid or a file
	// that reused the descriptor.
	pid        int
	pidMu      sync.Mutex
	pidfd      int
	waitStatus unix.WaitStatus
	terminal   *os.File
	cgroup     *cgroup.Group
	keepalive  *os.File
	timeout    time.Duration
	warn       warn.Func
	// publish asks init for connections to the published ports; nil when there are none.
	publish *publisher

	mu       sync.Mutex
	timedOut bool
	// egress are the gateway's sockets as init sent them, until EgressListeners hands them over
	// (egressTaken); wantEgress says the launch asked for them.
	egress      []*os.File
	egressRoles []socketRole
	wantEgress  bool
	egressTaken bool

	done chan struct{} // closed when init has been reaped
	// exited is closed when init reported the command's end (code), with every other process of the
	// sandbox already gone; init itself is then exiting, and the kernel tearing down the namespaces
	// (unmounting the tree, the overlay's sync) takes milliseconds that nobody needs to wait for.
	exited      chan struct{}
	code        int
	cleanupOnce sync.Once
}

func newRunning(w warn.Func) *running {
	if w == nil {
		w = func(string) {}
	}
	return &running{done: make(chan struct{}), exited: make(chan struct{}), warn: w, pidfd: -1}
}

// start places init in the run's cgroup, sends it the config and waits for its verdict.
func (s *running) start(cfg *initConfig, cfgW, statR *os.File) error {
	if s.cgroup != nil {
		if err := s.cgroup.Add(s.pid); err != nil {
			cfgW.Close()
			s.Kill()
			<-s.done
			return &sandbox.SetupError{Step: "joining the run's cgroup", Err: err}
		}
	}
	err := sendConfig(cfgW, cfg)
	starttrace.Mark("config sent")
	cfgW.Close()
	if err != nil {
		s.Kill()
		<-s.done
		return &sandbox.SetupError{Step: "sending the sandbox config", Err: err}
	}

	m, err := s.readStatus(statR)
	if err != nil {
		s.Kill()
		<-s.done
		if errors.Is(err, errChannelClosed) {
			err = fmt.Errorf("init ended before reporting: %s", describe(s.waitStatus))
		}
		return &sandbox.SetupError{Step: "starting init", Err: err}
	}
	switch m := m.(type) {
	case *failedMsg:
		<-s.done
		err := errors.New(m.Error)
		if m.NoOverlay {
			err = sandbox.NoOverlay(err)
		}
		return &sandbox.SetupError{Step: m.Step, Err: err}
	case *execFailedMsg:
		<-s.done
		return &sandbox.ExecError{Path: cfg.Spec.Args[0], NotFound: m.NotFound, Interpreter: m.Interpreter, NoExecBit: m.NoExecBit, Err: errors.New(m.Error)}
	case *startedMsg:
		if s.wantEgress && s.egress == nil {
			// Fail closed: init said the command started without handing over the gateway's sockets.
			s.Kill()
			<-s.done
			return &sandbox.SetupError{Step: "egress", Err: errors.New("the sandbox started without the gateway's sockets")}
		}
		for _, w := range m.Warnings {
			s.warn(w)
		}
	}
	if s.timeout > 0 {
		t := time.AfterFunc(s.timeout, func() {
			s.mu.Lock()
			s.timedOut = true
			s.mu.Unlock()
			s.Kill()
		})
		go func() { <-s.done; t.Stop() }()
	}
	return nil
}

// sendConfig writes the config message on the config pipe.
func sendConfig(w *os.File, cfg *initConfig) error {
	b, err := encodeMsg(cfg)
	if err == nil {
		_, err = w.Write(b)
	}
	return err
}

// readStatus reads init's messages until the one that says how the start ended, keeping the
// pseudo-terminal's master and the gateway's sockets when init sends them. It returns a
// *startedMsg, *failedMsg or *execFailedMsg.
func (s *running) readStatus(f *os.File) (message, error) {
	e, err := pollEndpoint(f)
	if err != nil {
		return nil, err
	}
	r := newReceiverOn(e, maxSockets)
	for {
		m, files, err := r.recv()
		if err != nil {
			return nil, err
		}
		switch m := m.(type) {
		case *terminalMsg:
			if s.terminal != nil {
				closeAll(files)
				return nil, errors.New("init sent a second terminal")
			}
			s.terminal = files[0]
		case *socketsMsg:
			if s.egress != nil || !s.wantEgress {
				closeAll(files)
				return nil, errors.New("init sent sockets that were not asked for")
			}
			s.egress, s.egressRoles = files, m.Roles
		case *startedMsg, *failedMsg, *execFailedMsg:
			return m, nil
		default:
			closeAll(files)
			return nil, fmt.Errorf("unexpected %s message from init", m.kind())
		}
	}
}

// wait reaps init. Only this goroutine waits for init's pid, so the pid stays init's until then.
func (s *running) wait() {
	s.untilExited()
	for {
		_, err := unix.Wait4(s.pid, &s.waitStatus, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	s.pidMu.Lock()
	unix.Close(s.pidfd)
	s.pidfd = -1
	s.pidMu.Unlock()
	close(s.done)
}

// untilExited returns once init has exited, parked in the runtime's poller on a duplicate of its
// pidfd (readable when the process has ended) rather than in a wait4 that holds one of cordon's
// processors in a system call for the whole run (see endpoint). When that cannot be done it returns
// at once, and wait's wait4 blocks as before.
func (s *running) untilExited() {
	s.pidMu.Lock()
	fd, err := unix.FcntlInt(uintptr(s.pidfd), unix.F_DUPFD_CLOEXEC, 0)
	s.pidMu.Unlock()
	if err != nil {
		return
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if err != unix.EINTR {
				return err != nil || n > 0
			}
		}
	})
}

// describe says how init ended, for error messages.
func describe(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Sprintf("signal: %v", ws.Signal())
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}

// awaitExit reads init's last message, which says how the command ended, and closes f. If init dies
// without sending it (killed, timed out), exited is never closed and Wait goes by init's own status.
func (s *running) awaitExit(f *os.File) {
	defer f.Close()
	e, err := pollEndpoint(f)
	if err != nil {
		return
	}
	r := newReceiverOn(e, 1)
	for {
		m, files, err := r.recv()
		closeAll(files)
		var malformed *malformedError
		if errors.As(err, &malformed) {
			continue // a malformed message is not the end; init's own status will tell
		}
		if err != nil {
			return
		}
		if m, ok := m.(*exitedMsg); ok {
			s.code = m.Code
			close(s.exited)
			return
		}
	}
}

// cleanup releases what the host keeps for the run, once: its cgroup, the reaper's keepalive, and
// gateway sockets nobody took.
func (s *running) cleanup() {
	s.cleanupOnce.Do(func() {
		if s.cgroup != nil {
			s.cgroup.Destroy()
		}
		if s.keepalive != nil {
			s.keepalive.Close()
		}
		s.mu.Lock()
		closeAll(s.egress)
		s.egress = nil
		s.mu.Unlock()
		s.publish.close()
	})
}

// Wait implements sandbox.Sandbox. It returns as soon as init reports the command's end, when every
// other process of the sandbox is already gone, without waiting for the kernel to finish tearing
// init and its namespaces down (init is reaped in the background). With a cgroup it does wait:
// the cgroup can only be removed once init has left it. If ctx ends first, the sandbox is killed.
func (s *running) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	var ctxErr error
	select {
	case <-s.done:
	case <-s.exited:
		if s.cgroup != nil {
			<-s.done
		}
	case <-ctx.Done():
		ctxErr = ctx.Err()
		s.Kill()
		<-s.done
	}
	s.cleanup()
	var st sandbox.ExitStatus
	select {
	case <-s.exited:
		// The command's own status, even if init was killed after reporting it.
		st.Code = s.code
		if st.Code > 128 && st.Code < 128+65 {
			st.Signal = syscall.Signal(st.Code - 128)
		}
	default:
		ws := s.waitStatus
		switch {
		case ws.Exited():
			st.Code = ws.ExitStatus()
			if st.Code > 128 && st.Code < 128+65 {
				st.Signal = syscall.Signal(st.Code - 128)
			}
		case ws.Signaled():
			st.Code = 128 + int(ws.Signal())
			st.Signal = ws.Signal()
		}
	}
	s.mu.Lock()
	st.TimedOut = s.timedOut
	s.mu.Unlock()
	return st, ctxErr
}

// Signal implements sandbox.Sandbox: init forwards it to the command.
func (s *running) Signal(sig os.Signal) error {
	ss, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("linux: unsupported signal %v", sig)
	}
	return s.signal(ss)
}

// signal sends sig to init through its pidfd, never by pid: once init is reaped the pid may belong
// to another process.
func (s *running) signal(sig syscall.Signal) error {
	s.pidMu.Lock()
	defer s.pidMu.Unlock()
	if s.pidfd < 0 {
		return os.ErrProcessDone
	}
	err := unix.PidfdSendSignal(s.pidfd, sig, nil, 0)
	if err == unix.ESRCH {
		return os.ErrProcessDone
	}
	return err
}

// Kill implements sandbox.Sandbox. Killing pid 1 of the sandbox's pid namespace kills every process
// in it; the cgroup, when there is one, catches anything that got out of the namespace's reach.
func (s *running) Kill() error {
	err := s.signal(syscall.SIGKILL)
	if s.cgroup != nil {
		s.cgroup.Kill()
	}
	return err
}

// EgressListeners implements sandbox.Sandbox.
func (s *running) EgressListeners() (sandbox.Listeners, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.egressTaken {
		return sandbox.Listeners{}, errors.New("linux: the gateway's sockets were already handed over")
	}
	s.egressTaken = true
	files, roles := s.egress, s.egressRoles
	s.egress, s.egressRoles = nil, nil
	switch {
	case !s.wantEgress:
		return sandbox.Listeners{}, nil
	case files == nil:
		return sandbox.Listeners{}, errors.New("linux: the sandbox has no gateway sockets (it ended?)")
	}
	l, err := listenersFromFiles(files, roles)
	if err != nil {
		return l, fmt.Errorf("linux: the gateway's sockets: %w", err)
	}
	return l, nil
}

// Terminal implements sandbox.Sandbox.
func (s *running) Terminal() *os.File { return s.terminal }

// Pid implements sandbox.Sandbox.
func (s *running) Pid() int { return s.pid }
