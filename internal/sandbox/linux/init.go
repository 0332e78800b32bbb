//go:build linux

package linux

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/netns"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/seccomp"
	"github.com/cordon-sandbox/cordon/internal/starttrace"
)

// IsInit reports whether this process was started as the sandbox's init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == InitArg0 }

// InitMain is the body of cordon's init, pid 1 inside the sandbox. It returns the exit code to use:
// the command's own, 128+signal when a signal ended it, 125 when the boundary could not be built,
// 126/127 when the command could not be executed.
func InitMain() int {
	// Catch signals before the command exists, so that none sent during setup is lost (or ends init
	// by the runtime's default); they are forwarded once it runs. This is done before the config
	// arrives, while cordon is still preparing the run, and before the thread is locked: the runtime
	// enables each signal in a round trip with a thread of its own, and from a locked thread every
	// round trip has to wake that thread again (0.94 ms for the eleven signals locked, 0.50 ms not).
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, forwardedSignals...)
	starttrace.Mark("signals caught")
	// Every per-thread operation below (cgroup namespace, capabilities, the fork of the command) must
	// happen on one thread, so that the command inherits exactly the state that was set up.
	runtime.LockOSThread()
	// Nothing init holds reaches the command but the streams: the config pipe, the status socket and
	// anything inherited are close-on-exec.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		unix.CloseOnExec(configFD)
		unix.CloseOnExec(statusFD)
	}
	report := func(m message) {
		// Nothing is left to tell a parent that cannot be told: the exit code says the rest.
		_ = sendMsg(statusFD, m)
	}
	failed := func(se *sandbox.SetupError) {
		report(&failedMsg{Step: se.Step, Error: se.Err.Error(), NoOverlay: errors.Is(se.Err, sandbox.ErrNoOverlay)})
	}

	// While this thread builds the part of the root that does not depend on the spec, a goroutine
	// reads and decodes the config (0.4 ms of JSON in a fresh process), which the thread needs first,
	// and then compiles the seccomp filter the spec asks for, which is needed only once the root is
	// built, on init's second processor beside this thread.
	type config struct {
		cfg *initConfig
		err error
	}
	type compiled struct {
		filter *seccomp.Filter
		err    error
	}
	configs := make(chan config, 1)
	filters := make(chan compiled, 1)
	go func() {
		cfg, err := readConfig(os.NewFile(configFD, "config"))
		starttrace.Mark("config read")
		configs <- config{cfg, err}
		if err != nil {
			return
		}
		var c compiled
		c.filter, c.err = seccomp.Compile(seccomp.Options{AllowNesting: cfg.Spec.AllowNesting})
		starttrace.Mark("filter compiled")
		filters <- c
	}()
	// The base of the root, and the gateway's sockets and rules when cordon said at launch (argv[1])
	// that it attaches the gateway.
	baseErr := loopbackUp()
	if baseErr != nil {
		baseErr = &sandbox.SetupError{Step: "bringing up loopback", Err: baseErr}
	}
	rulesInstalled := func() (func(), error) { return func() {}, nil }
	if baseErr == nil {
		rulesInstalled, baseErr = launchEgress()
	}
	if baseErr == nil {
		baseErr = buildBase()
	}
	starttrace.Mark("base of the root")
	read := <-configs
	starttrace.Mark("config joined")
	cfg := read.cfg
	if err := read.err; err != nil {
		failed(&sandbox.SetupError{Step: "reading the sandbox config", Err: err})
		return 125
	}
	releaseRules, err := rulesInstalled()
	if err != nil && baseErr == nil {
		baseErr = err
	}
	starttrace.Mark("rules installed")
	if baseErr != nil {
		var se *sandbox.SetupError
		if !errors.As(baseErr, &se) {
			se = &sandbox.SetupError{Step: "building the root", Err: baseErr}
		}
		failed(se)
		return 125
	}
	filter := func() (*seccomp.Filter, error) {
		c := <-filters
		return c.filter, c.err
	}
	pid, warnings, err := setup(cfg, filter, releaseRules)
	if err != nil {
		var se *sandbox.SetupError
		var ee *sandbox.ExecError
		switch {
		case errors.As(err, &ee):
			report(&execFailedMsg{Error: ee.Err.Error(), NotFound: ee.NotFound, Interpreter: ee.Interpreter, NoExecBit: ee.NoExecBit})
			if ee.NotFound {
				return 127
			}
			return 126
		case errors.As(err, &se):
			failed(se)
		default:
			failed(&sandbox.SetupError{Step: "setup", Err: err})
		}
		return 125
	}
	starttrace.Mark("command started")
	report(&startedMsg{Warnings: warnings})
	forward := func(s syscall.Signal) { unix.Kill(pid, s) }
	if cfg.Runtime != nil && !cfg.TTY {
		// runsc run forwards signals to the command only with a terminal; without one it would
		// die of them. They go through `runsc kill` instead.
		forward = func(s syscall.Signal) { killRuntime(cfg.Runtime, s) }
	}
	code := supervise(pid, sigs, forward)
	report(&exitedMsg{Code: code})
	return code
}

// readConfig reads the config message from the config pipe, which the parent closes after it.
func readConfig(f *os.File) (*initConfig, error) {
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	m, err := decodeMsg(b)
	if err != nil {
		return nil, err
	}
	cfg, ok := m.(*initConfig)
	if !ok {
		return nil, fmt.Errorf("a %s message instead of the config", m.kind())
	}
	return cfg, nil
}

// setup builds the boundary and starts the command inside it. Order matters: everything that needs
// privilege over the new namespaces happens first, then privileges are dropped for good, then the
// kernel's own guards (Landlock, seccomp) are stacked, and only then is the command executed.
//
// releaseRules closes the gateway rules' netlink socket (netns.InstallHere); setup calls it in the
// background as soon as no thread of init is left to drop its capabilities, natively right after
// dropPrivileges, before the runtime starts in the gVisor tier.
func setup(cfg *initConfig, filter func() (*seccomp.Filter, error), releaseRules func()) (int, []string, error) {
	released := false
	release := func() {
		if !released {
			released = true
			go releaseRules()
		}
	}
	defer release()
	spec := &cfg.Spec
	var warnings []string
	step := func(name string, err error) error {
		if err != nil {
			return &sandbox.SetupError{Step: name, Err: err}
		}
		return nil
	}
	if err := step("joining a new cgroup namespace", unix.Unshare(unix.CLONE_NEWCGROUP)); err != nil {
		return 0, nil, err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = "cordon"
	}
	if err := step("setting the host name", unix.Sethostname([]byte(hostname))); err != nil {
		return 0, nil, err
	}
	var srcs *hostSources
	if cfg.HostSources {
		var err error
		srcs, err = receiveHostSources(statusFD, spec)
		if err := step("receiving the workspace and policy paths", err); err != nil {
			return 0, nil, err
		}
	}
	var etcFiles []*os.File
	if cfg.EtcFiles > 0 {
		var err error
		etcFiles, err = receiveEtcFiles(statusFD, cfg.EtcFiles)
		if err := step("receiving /etc's generated files", err); err != nil {
			srcs.close()
			return 0, nil, err
		}
	}
	err := buildRoot(cfg, srcs, etcFiles)
	closeAll(etcFiles)
	starttrace.Mark("root built")
	srcs.close() // attached now, or never: init keeps nothing of the host's open
	if err != nil {
		return 0, nil, err
	}
	stdin, stdout, stderr := os.Stdin, os.Stdout, os.Stderr
	if cfg.TTY && cfg.Runtime == nil {
		master, slave, err := openPTY(cfg.TTYRows, cfg.TTYCols)
		if err := step("creating the pseudo-terminal", err); err != nil {
			return 0, nil, err
		}
		err = sendMsg(statusFD, &terminalMsg{}, master)
		master.Close()
		if err := step("handing over the pseudo-terminal", err); err != nil {
			return 0, nil, err
		}
		defer slave.Close()
		stdin, stdout, stderr = slave, slave, slave
	}
	if cfg.Runtime != nil {
		release()
		// The runtime is started on the root: it needs its privileges over init's namespaces, and
		// applies the limits, its own seccomp filters and the command's identity itself.
		err := inSandboxRoot(func() error {
			path, err := lookPath(spec.Args[0], spec.Dir, spec.Env)
			if err == nil {
				err = notExecutable(spec.Args[0], path, spec.Dir)
			}
			if err == nil {
				err = envInterpreter(spec.Args[0], path, spec.Dir, spec.Env)
			}
			return err
		})
		if err != nil {
			return 0, nil, err
		}
		pid, err := startRuntime(cfg.Runtime, cfg.TTY, stdin, stdout, stderr)
		return pid, warnings, err
	}
	if err := step("setting resource limits", setRlimits(cfg)); err != nil {
		return 0, nil, err
	}
	path, err := lookPath(spec.Args[0], spec.Dir, spec.Env)
	if err != nil {
		return 0, nil, err
	}
	if err := step("dropping privileges", dropPrivileges()); err != nil {
		return 0, nil, err
	}
	release()
	w, err := restrictLandlock(spec, cfg.User.Home, cfg.LandlockABI)
	starttrace.Mark("landlock")
	if err := step("applying Landlock", err); err != nil {
		return 0, nil, err
	}
	if w != "" {
		warnings = append(warnings, w)
	}
	f, err := filter()
	if err := step("compiling the seccomp filter", err); err != nil {
		return 0, nil, err
	}
	if err := step("installing the seccomp filter", f.Install()); err != nil {
		return 0, nil, err
	}
	starttrace.Mark("seccomp")

	if err := envInterpreter(spec.Args[0], path, spec.Dir, spec.Env); err != nil {
		return 0, nil, err
	}
	// syscall.ForkExec rather than os/exec: init needs none of its plumbing, and os/exec's first
	// start forks an extra probe process.
	pid, err := syscall.ForkExec(path, spec.Args, &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid:    true,
			Setctty:   cfg.TTY,
			Ctty:      0,
			Pdeathsig: syscall.SIGKILL,
		},
	})
	if err != nil {
		return 0, nil, execError(spec.Args[0], execPath(path, spec.Dir), err)
	}
	return pid, warnings, nil
}

// forwardedSignals are the signals init catches: those that the runtime's default would turn into
// init's death (hangup, interrupt, quit, abort, terminate), those a user or supervisor sends to poke
// a program (user signals, alarm, window change, continue), and SIGCHLD, which wakes init to reap.
// All but SIGCHLD are forwarded to the command. They are named rather than caught wholesale because
// the runtime enables each caught signal in a round trip between two threads: all 60-odd cost
// hundreds of context switches at start. Any other signal reaching init is ignored, as a pid
// namespace's init ignores what it has no handler for.
var forwardedSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGABRT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGWINCH, unix.SIGCONT, unix.SIGCHLD,
}

// supervise is pid 1's job once the command runs: forward signals to it, reap every orphan that the
// pid namespace hands us, and when the command exits, end the whole sandbox with its status. It
// returns only when no other process of the sandbox is left: all were killed and reaped, so none can
// still be writing into the workspace.
//
// It runs entirely on init's locked main thread. Landlock restricts that thread only
// (restrictLandlock), and the command inherited its domain: a signal sent from another thread of
// init would be refused by Landlock's signal scoping.
func supervise(pid int, sigs <-chan os.Signal, forward func(syscall.Signal)) int {
	for {
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || wpid <= 0 {
				break
			}
			if wpid == pid {
				code := 125
				switch {
				case ws.Exited():
					code = ws.ExitStatus()
				case ws.Signaled():
					code = 128 + int(ws.Signal())
				}
				// The command is gone: nothing else in the sandbox outlives it.
				unix.Kill(-1, unix.SIGKILL)
				reapAll()
				return code
			}
		}
		sig := <-sigs
		if s, ok := sig.(syscall.Signal); ok && s != unix.SIGCHLD && s != unix.SIGURG {
			forward(s)
		}
	}
}

// reapAll waits for every remaining child of init; in the sandbox's pid namespace every orphan is
// init's child, so when none is left, no process of the sandbox is.
func reapAll() {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // ECHILD: nothing left
		}
	}
}

// launchEgress sets up the egress gateway for the ports of the launch message (argv[1]), if any.
// Done from inside, where init holds CAP_NET_ADMIN over this namespace (cordon outside may not,
// rootless): the gateway's sockets and the rules that send all traffic to them exist before the
// command does. The sockets are made and handed over at once; the rules (netlink only, no file
// system) are installed in the background, and the returned wait says how that went: init calls it
// before anything of the command exists. wait also returns the release of the rules' socket
// (netns.InstallHere), which setup calls once init's threads hold no capability.
func launchEgress() (wait func() (release func(), err error), err error) {
	wait = func() (func(), error) { return func() {}, nil }
	if len(os.Args) != 2 {
		return wait, &sandbox.SetupError{Step: "reading the launch", Err: fmt.Errorf("%d arguments, want the launch message alone", len(os.Args)-1)}
	}
	m, err := decodeMsg([]byte(os.Args[1]))
	if err != nil {
		return wait, &sandbox.SetupError{Step: "reading the launch", Err: err}
	}
	launch, ok := m.(*launchMsg)
	if !ok {
		return wait, &sandbox.SetupError{Step: "reading the launch", Err: fmt.Errorf("a %s message instead of the launch", m.kind())}
	}
	if len(launch.Publish) > 0 {
		// From now on, for the whole run: a dial before the command listens is refused, as it
		// would be for any client.
		go servePublish(os.NewFile(publishFD, "publish"), launch.Publish)
	}
	if launch.Egress == nil {
		return wait, nil
	}
	ports := *launch.Egress
	const step = "setting up the egress gateway's sockets and rules"
	if err := egressSockets(ports); err != nil {
		return wait, &sandbox.SetupError{Step: step, Err: err}
	}
	starttrace.Mark("sockets sent")
	type installed struct {
		release func()
		err     error
	}
	done := make(chan installed, 1)
	go func() {
		release, err := netns.InstallHere(ports)
		done <- installed{release, err}
	}()
	return func() (func(), error) {
		in := <-done
		if in.err != nil {
			return in.release, &sandbox.SetupError{Step: step, Err: in.err}
		}
		return in.release, nil
	}, nil
}

// egressSockets creates the gateway's sockets in init's own network namespace and hands them to
// cordon over the status channel.
func egressSockets(ports sandbox.EgressPorts) error {
	// Init is the namespace's first process: every thread of it is in the sandbox's namespace
	// already, so the sockets are made here, with no thread sent in and brought back (Listeners).
	set, err := netns.ListenersHere(ports)
	if err != nil {
		return err
	}
	defer set.Close()
	files, roles, err := listenerFiles(set)
	if err != nil {
		return err
	}
	defer closeAll(files)
	return sendMsg(statusFD, &socketsMsg{Roles: roles}, files...)
}

// lookPath finds the command with the sandbox's own PATH, inside the new root. A name with a slash
// is taken as it is, relative to dir (the command's working directory, which it is started in) when
// it is not absolute: `cordon run -- ./build.sh` runs the workspace's script.
func lookPath(name, dir string, env []string) (string, error) {
	if name == "" {
		return "", &sandbox.ExecError{Path: name, NotFound: true, Err: os.ErrNotExist}
	}
	if strings.Contains(name, "/") {
		at := name
		if !filepath.IsAbs(name) && dir != "" {
			at = filepath.Join(dir, name)
		}
		if _, err := os.Stat(at); err != nil {
			return "", execError(name, at, err)
		}
		return name, nil
	}
	path := "/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &sandbox.ExecError{Path: name, NotFound: true, Err: exec.ErrNotFound}
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func setRlimits(cfg *initConfig) error {
	l := cfg.Spec.Limits
	set := func(res int, v uint64) error {
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("rlimit %d: %w", res, err)
		}
		return nil
	}
	if l.OpenFiles > 0 {
		var cur unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &cur); err == nil && l.OpenFiles > cur.Max {
			return fmt.Errorf("limits.openFiles: %d is above the hard limit cordon itself runs with (%d); lower it or raise cordon's (ulimit -Hn)", l.OpenFiles, cur.Max)
		}
		if err := set(unix.RLIMIT_NOFILE, l.OpenFiles); err != nil {
			return err
		}
	}
	if cfg.SetRlimitNproc && l.Pids > 0 {
		if err := set(unix.RLIMIT_NPROC, uint64(l.Pids)); err != nil {
			return err
		}
	}
	if cfg.RlimitData > 0 {
		if err := set(unix.RLIMIT_DATA, cfg.RlimitData); err != nil {
			return err
		}
	}
	// No core dumps: a crashing agent must not leave its memory (and whatever secrets it held) on disk.
	return set(unix.RLIMIT_CORE, 0)
}
