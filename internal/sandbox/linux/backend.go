package linux

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/cgroup"
)

// ReaperArg0 is argv[0] of the re-executed cgroup reaper; the cordon binary's main dispatches on it.
const ReaperArg0 = "cordon-cgroup-reaper"

// initCaps are the capabilities init keeps across its exec, over its own namespaces only (they mean
// nothing on the host): enough to build the root, configure loopback, and then drop them all.
var initCaps = []uintptr{
	unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_NET_ADMIN, unix.CAP_SYS_CHROOT,
	unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_CHOWN, unix.CAP_SYS_RESOURCE,
	unix.CAP_NET_BIND_SERVICE, // the gateway's DNS socket on port 53 inside
}

// Backend is the native Linux backend.
type Backend struct {
	// Exe is the cordon binary to re-execute as init and reaper; /proc/self/exe when empty.
	Exe string
	// Warn receives one-line warnings about layers this host cannot provide.
	Warn func(string)
	// RunName names the run's cgroup ("cordon-<run id>").
	RunName string
}

var _ sandbox.Backend = (*Backend)(nil)

func (b *Backend) warn(s string) {
	if b.Warn != nil {
		b.Warn(s)
	}
}

// Start implements sandbox.Backend: Launch and Start in one step.
func (b *Backend) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	l, err := b.Launch(LaunchOptions{User: spec.User, Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr, TTY: spec.TTY, Egress: spec.Egress})
	if err != nil {
		return nil, err
	}
	return l.Start(ctx, spec)
}

// LaunchOptions is what must be known before init is cloned: who it maps to and its streams, and
// whether the egress gateway is attached.
type LaunchOptions struct {
	User                  sandbox.User
	Stdin, Stdout, Stderr *os.File
	TTY                   bool
	// Egress, when set, has init create the gateway's sockets and nftables rules as soon as it
	// starts, while the caller still prepares the run; the spec's Egress must then be the same.
	Egress *sandbox.EgressPorts
}

// Launched is an init that was cloned into fresh namespaces and is booting, waiting for its config.
// Launching first lets init's start-up overlap with the caller's own preparation (run state, the
// workspace, the spec); it does nothing inside the namespaces until Start sends the spec.
type Launched struct {
	b        *Backend
	exe      string
	s        *running
	cfgW     *os.File
	statR    *os.File
	user     sandbox.User
	tty      bool
	egress   *sandbox.EgressPorts
	finished bool
	// hostIDs are the host ids the sandbox user maps to when cordon runs as root; nil rootless.
	hostIDs *hostIDs
}

// Launch clones init. The caller must call Start or Abort.
func (b *Backend) Launch(opts LaunchOptions) (*Launched, error) {
	if opts.User.UID == 0 {
		return nil, &sandbox.SetupError{Step: "checking the sandbox spec", Err: errors.New("the sandbox user must not be root")}
	}
	exe := b.Exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	l := &Launched{b: b, exe: exe, user: opts.User, tty: opts.TTY, egress: opts.Egress,
		s: &running{done: make(chan struct{}), exited: make(chan struct{}), warn: b.warn}}
	if err := l.clone(opts); err != nil {
		return nil, err
	}
	return l, nil
}

// NetNS is the path of the sandbox's network namespace, valid from Launch until the sandbox ends: the
// gateway creates its listening sockets in it and installs its nftables rules there before Start, so
// that the command never runs a moment without them.
func (l *Launched) NetNS() string {
	return fmt.Sprintf("/proc/%d/ns/net", l.s.pid)
}

// Abort ends a launched init that will not be started.
func (l *Launched) Abort() {
	if l.finished {
		return
	}
	l.finished = true
	l.cfgW.Close()
	l.statR.Close()
	l.s.Kill()
	<-l.s.done
	l.s.cleanup()
}

// Start sends the spec to the launched init, which builds the boundary and runs the command. The
// spec's User and TTY must be those given to Launch.
func (l *Launched) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	if l.finished {
		return nil, errors.New("linux: Start after Start or Abort")
	}
	fail := func(err error) (sandbox.Sandbox, error) {
		l.Abort()
		return nil, err
	}
	if err := validate(spec); err != nil {
		return fail(&sandbox.SetupError{Step: "checking the sandbox spec", Err: err})
	}
	if spec.User != l.user || spec.TTY != l.tty {
		return fail(&sandbox.SetupError{Step: "checking the sandbox spec", Err: errors.New("user or terminal differs from the launch")})
	}
	if (spec.Egress == nil) != (l.egress == nil) || spec.Egress != nil && *spec.Egress != *l.egress {
		return fail(&sandbox.SetupError{Step: "checking the sandbox spec", Err: errors.New("egress ports differ from the launch")})
	}
	etc, err := etcEntries(spec)
	if err != nil {
		return fail(&sandbox.SetupError{Step: "reading /etc", Err: err})
	}
	cfg := initConfig{Spec: *spec, Etc: etc, LandlockABI: LandlockABI()}
	l.s.timeout = spec.Limits.Timeout
	if err := l.b.limits(l.exe, spec.Limits, l.s, &cfg); err != nil {
		return fail(err)
	}
	if l.hostIDs != nil {
		// As root, cordon opens what the sandbox shows of the host itself (idmap.go) and hands it
		// to init before the config that says so.
		files, err := openHostSources(l.exe, spec, *l.hostIDs, l.b.warn)
		if err == nil {
			err = sendHostSources(int(l.statR.Fd()), files)
			closeAll(files)
		}
		var se *sandbox.SetupError
		if errors.As(err, &se) {
			return fail(se)
		}
		if err != nil {
			return fail(&sandbox.SetupError{Step: "opening the workspace and policy paths", Err: err})
		}
		cfg.HostSources = true
	}
	l.finished = true
	if err := l.s.start(&cfg, l.cfgW, l.statR); err != nil {
		l.statR.Close()
		l.s.cleanup()
		return nil, err
	}
	go l.s.awaitExit(l.statR)
	return l.s, nil
}

// limits puts the run in a cgroup of its own when the policy sets memory, pids or CPU limits. What
// the host cannot enforce through a cgroup falls back to rlimits, with one warning line each; nothing
// is skipped silently.
func (b *Backend) limits(exe string, l sandbox.Limits, s *running, cfg *initConfig) error {
	if l.MemoryBytes == 0 && l.Pids == 0 && l.CPU == 0 {
		return nil
	}
	name := b.RunName
	if name == "" {
		name = fmt.Sprintf("cordon-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	g, unenforced, err := cgroup.New(name, cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPU: l.CPU})
	why := func(limit string) string {
		if err != nil {
			return err.Error()
		}
		if w := g.Why(limit); w != "" {
			return w
		}
		return "controller not available"
	}
	if err != nil {
		g, unenforced = nil, []string{cgroup.Memory, cgroup.Pids, cgroup.CPU}
	}
	for _, u := range unenforced {
		switch {
		case u == cgroup.Pids && l.Pids > 0:
			cfg.SetRlimitNproc = true
			b.warn(fmt.Sprintf("limits.pids: no usable cgroup (%s); falling back to RLIMIT_NPROC", why(u)))
		case u == cgroup.Memory && l.MemoryBytes > 0:
			cfg.RlimitData = uint64(l.MemoryBytes)
			b.warn(fmt.Sprintf("limits.memory: no usable cgroup (%s); falling back to RLIMIT_DATA, per process", why(u)))
		case u == cgroup.CPU && l.CPU > 0:
			b.warn(fmt.Sprintf("limits.cpu: no usable cgroup (%s); CPU is not limited", why(u)))
		}
	}
	if g == nil {
		return nil
	}
	keepalive, err := cgroup.StartReaper(exe, []string{ReaperArg0}, g)
	if err != nil {
		g.Destroy()
		return &sandbox.SetupError{Step: "starting the cgroup reaper", Err: err}
	}
	s.cgroup, s.keepalive = g, keepalive
	return nil
}

func validate(spec *sandbox.Spec) error {
	if len(spec.Args) == 0 {
		return errors.New("no command")
	}
	ws := spec.Workspace
	if !filepath.IsAbs(ws.Path) || !filepath.IsAbs(ws.Source) {
		return fmt.Errorf("workspace %q: not an absolute path", ws.Path)
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Path()) {
			return fmt.Errorf("mount %q at %q: not an absolute path", m.Source, m.Path())
		}
	}
	if spec.User.UID == 0 {
		return errors.New("the sandbox user must not be root")
	}
	return nil
}

// running is a started sandbox.
type running struct {
	// pid is init's host pid. pidfd refers to init until it is reaped, when it is closed (-1); pidMu
	// orders the two, so that a signal can never reach another process that reused the pid or a file
	// that reused the descriptor.
	pid         int
	pidMu       sync.Mutex
	pidfd       int
	waitStatus  unix.WaitStatus
	terminal    *os.File
	egress      []*os.File
	egressRoles []string
	cgroup      *cgroup.Group
	keepalive   *os.File
	timeout     time.Duration
	warn        func(string)

	mu       sync.Mutex
	timedOut bool
	done     chan struct{} // closed when init has been reaped
	// exited is closed when init reported the command's end (code), with every other process of the
	// sandbox already gone; init itself is then exiting, and the kernel tearing down the namespaces
	// (unmounting the tree, the overlay's sync) takes milliseconds that nobody needs to wait for.
	exited chan struct{}
	code   int
}

func (l *Launched) clone(opts LaunchOptions) error {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return &sandbox.SetupError{Step: "creating the config pipe", Err: err}
	}
	defer cfgR.Close()
	// Status comes back as datagrams on a socket pair, so that init can also hand over the master
	// side of the pseudo-terminal it created inside the sandbox.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		cfgW.Close()
		return &sandbox.SetupError{Step: "creating the status channel", Err: err}
	}
	statR, statW := os.NewFile(uintptr(fds[0]), "status"), os.NewFile(uintptr(fds[1]), "status")
	defer statW.Close()
	stdin, stdout, stderr := opts.Stdin, opts.Stdout, opts.Stderr
	if opts.TTY || stdin == nil || stdout == nil || stderr == nil {
		// The caller's terminal never enters the sandbox: init's own streams are /dev/null and the
		// command gets a pseudo-terminal of the sandbox's own devpts. A stream not given is
		// /dev/null too.
		devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			cfgW.Close()
			statR.Close()
			return &sandbox.SetupError{Step: "opening /dev/null", Err: err}
		}
		defer devnull.Close()
		if opts.TTY {
			stdin, stdout, stderr = devnull, devnull, devnull
		}
		stdin, stdout, stderr = cmp.Or(stdin, devnull), cmp.Or(stdout, devnull), cmp.Or(stderr, devnull)
	}

	uidMap, gidMap, cred, err := l.idMappings(opts.User)
	if err != nil {
		cfgW.Close()
		statR.Close()
		return &sandbox.SetupError{Step: "choosing the sandbox's host ids", Err: err}
	}
	pidfd := -1
	attr := &syscall.ProcAttr{
		// The runtime is told to use one processor: init's work is one sequence on one locked
		// thread, and with more the runtime spins up idle threads that compete for the CPU with
		// cordon's own preparation of the run. Setting it also spares the runtime from reading the
		// cgroup's CPU limit at start. Init's environment is its own: the command gets spec.Env.
		Env:   []string{"GOMAXPROCS=1"},
		Files: []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd(), cfgR.Fd(), statW.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings:                uidMap,
			GidMappings:                gidMap,
			GidMappingsEnableSetgroups: cred != nil,
			Credential:                 cred,
			AmbientCaps:                initCaps,
			// If cordon dies by any means, the kernel kills init, and with pid 1 gone every process
			// of the sandbox's pid namespace dies with it.
			Pdeathsig: syscall.SIGKILL,
			Setsid:    true,
			PidFD:     &pidfd,
		},
	}
	// syscall.ForkExec rather than os/exec: os.StartProcess first probes whether pidfds work by
	// starting and reaping a throwaway process, on the path that starts the sandbox. Cordon needs a
	// kernel with pidfds anyway (close_range, mount_setattr are newer).
	argv := []string{InitArg0}
	if opts.Egress != nil {
		b, err := json.Marshal(opts.Egress)
		if err != nil {
			cfgW.Close()
			statR.Close()
			return &sandbox.SetupError{Step: "encoding the egress ports", Err: err}
		}
		argv = append(argv, string(b))
	}
	pid, err := syscall.ForkExec(l.exe, argv, attr)
	if err != nil {
		cfgW.Close()
		statR.Close()
		return &sandbox.SetupError{Step: "creating the namespaces", Err: fmt.Errorf("%w (does this kernel allow user namespaces? see `cordon doctor`)", err)}
	}
	l.s.pid, l.s.pidfd = pid, pidfd
	l.cfgW, l.statR = cfgW, statR
	go l.s.wait()
	return nil
}

// idMappings says how the sandbox's user namespace maps the sandbox user. Rootless, the user's
// own uid and gid are the only ids mapped (to the same user inside, or to uid 1000). As root, the
// user is mapped to unprivileged host ids of cordon's reserved range (idmap.go), never to 0: init
// then has to take that uid itself (cred), since it starts as host root, unmapped in the new
// namespace, and it clears root's supplementary groups (which would otherwise stay with it, unseen,
// and keep root's group rights), so setgroups must be allowed there. Nothing in the sandbox can
// call setgroups later: every capability is dropped before the command runs.
func (l *Launched) idMappings(u sandbox.User) (uidMap, gidMap []syscall.SysProcIDMap, cred *syscall.Credential, err error) {
	hostUID, hostGID := os.Getuid(), os.Getgid()
	if hostUID == 0 {
		ids, err := rootHostIDs(u, hostIDFiles())
		if err != nil {
			return nil, nil, nil, err
		}
		l.hostIDs = &ids
		hostUID, hostGID = ids.UID, ids.GID
		cred = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}}
	}
	uidMap = []syscall.SysProcIDMap{{ContainerID: u.UID, HostID: hostUID, Size: 1}}
	gidMap = []syscall.SysProcIDMap{{ContainerID: u.GID, HostID: hostGID, Size: 1}}
	return uidMap, gidMap, cred, nil
}

// start places init in the run's cgroup, sends it the config and waits for its verdict.
func (s *running) start(cfg *initConfig, cfgW, statR *os.File) error {
	spec := &cfg.Spec
	if s.cgroup != nil {
		if err := s.cgroup.Add(s.pid); err != nil {
			s.Kill()
			<-s.done
			return &sandbox.SetupError{Step: "joining the run's cgroup", Err: err}
		}
	}
	err := json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	if err != nil {
		s.Kill()
		<-s.done
		return &sandbox.SetupError{Step: "sending the sandbox config", Err: err}
	}

	st, err := s.readStatus(statR)
	switch {
	case err != nil:
		s.Kill()
		<-s.done
		return &sandbox.SetupError{Step: "starting init", Err: fmt.Errorf("init ended before reporting: %s", describe(s.waitStatus))}
	case st.Error != "":
		<-s.done
		return &sandbox.SetupError{Step: st.Step, Err: errors.New(st.Error)}
	case st.Exec != "":
		<-s.done
		return &sandbox.ExecError{Path: spec.Args[0], NotFound: st.NotFound, Err: errors.New(st.Exec)}
	}
	for _, w := range st.Warnings {
		s.warn(w)
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

// readStatus reads init's messages until the one that says how the start ended, keeping the
// pseudo-terminal's master when init sends it.
func (s *running) readStatus(f *os.File) (status, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*16))
	for {
		n, oobn, _, _, err := unix.Recvmsg(int(f.Fd()), buf, oob, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return status{}, err
		}
		if n == 0 {
			return status{}, io.EOF
		}
		var st status
		if err := json.Unmarshal(buf[:n], &st); err != nil {
			return status{}, fmt.Errorf("malformed status from init: %w", err)
		}
		var files []*os.File
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return status{}, err
			}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err != nil {
					return status{}, err
				}
				for _, fd := range fds {
					files = append(files, os.NewFile(uintptr(fd), "from-init"))
				}
			}
		}
		switch {
		case st.PTY && len(files) == 1 && s.terminal == nil:
			s.terminal = files[0]
		case len(st.Sockets) > 0 && len(files) == len(st.Sockets) && s.egress == nil:
			s.egress, s.egressRoles = files, st.Sockets
		default:
			for _, f := range files {
				f.Close()
			}
			if st.PTY || len(st.Sockets) > 0 {
				return status{}, errors.New("init sent descriptors that do not match its message")
			}
			return st, nil
		}
	}
}

// wait reaps init. Only this goroutine waits for init's pid, so the pid stays init's until then.
func (s *running) wait() {
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
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		var st status
		if json.Unmarshal(buf[:n], &st) == nil && st.Exited {
			s.code = st.Code
			close(s.exited)
			return
		}
	}
}

func (s *running) cleanup() {
	if s.cgroup != nil {
		s.cgroup.Destroy()
	}
	if s.keepalive != nil {
		s.keepalive.Close()
	}
}

// Wait implements sandbox.Sandbox. It returns as soon as init reports the command's end, when every
// other process of the sandbox is already gone, without waiting for the kernel to finish tearing
// init and its namespaces down (init is reaped in the background). With a cgroup it does wait:
// the cgroup can only be removed once init has left it.
func (s *running) Wait() (sandbox.ExitStatus, error) {
	select {
	case <-s.done:
	case <-s.exited:
		if s.cgroup != nil {
			<-s.done
		}
	}
	defer s.cleanup()
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
	return st, nil
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

// EgressSockets implements sandbox.Sandbox.
func (s *running) EgressSockets() ([]*os.File, []string) { return s.egress, s.egressRoles }

// Terminal implements sandbox.Sandbox.
func (s *running) Terminal() *os.File { return s.terminal }

// Pid implements sandbox.Sandbox.
func (s *running) Pid() int { return s.pid }
