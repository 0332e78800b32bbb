//go:build linux

package linux

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// stepChecking names the check of a spec before anything of it is built.
const stepChecking = "checking the sandbox spec"

// Backend is the native Linux backend.
type Backend struct {
	// Exe is the cordon binary to re-execute as init and reaper; /proc/self/exe when empty.
	Exe string
	// Runtime, when set, runs the command under an OCI runtime started by init (the gVisor tier).
	Runtime *Runtime
}

var _ sandbox.Backend = (*Backend)(nil)

// launched is an init that was cloned into fresh namespaces and is booting, waiting for its config.
// Launching first lets init's start-up overlap with the caller's own preparation (run state, the
// workspace, the spec); it does nothing inside the namespaces until Start sends the config.
type launched struct {
	b     *Backend
	exe   string
	ls    sandbox.LaunchSpec
	s     *running
	cfgW  *os.File
	statR *os.File
	// finished is set once the box was started or aborted; failed, when that start failed, which is
	// what Retry may follow.
	finished, failed bool
	// hostIDs are the host ids the sandbox user maps to when cordon runs as root; nil rootless.
	hostIDs *hostIDs
	// userns waits for the id-mapping user namespace (as root), made while the caller prepares the
	// run: its helper process costs a fork and an exec, off the start's path there.
	userns func() (*os.File, error)
}

// Launch implements sandbox.Backend: it clones init, which makes the gateway's sockets and rules
// at once when ls.Egress is set. The caller must call Start or Abort.
func (b *Backend) Launch(ctx context.Context, ls *sandbox.LaunchSpec) (sandbox.Launched, error) {
	if err := ctx.Err(); err != nil {
		return nil, &sandbox.SetupError{Step: "launching the sandbox", Err: err}
	}
	if ls.User.UID == 0 {
		return nil, &sandbox.SetupError{Step: stepChecking, Err: errors.New("the sandbox user must not be root")}
	}
	if b.Runtime != nil && os.Geteuid() != 0 {
		return nil, &sandbox.SetupError{Step: stepChecking, Err: errors.New("this tier needs cordon to run as root: the runtime must be root in the sandbox's user namespace while the agent's uid owns the workspace there, two ids that a user namespace made without root can not map")}
	}
	exe := cmp.Or(b.Exe, "/proc/self/exe")
	l := &launched{b: b, exe: exe, ls: *ls, s: newRunning(ls.Warn)}
	l.s.wantEgress = ls.Egress != nil
	if err := l.clone(); err != nil {
		return nil, err
	}
	if l.hostIDs != nil {
		l.userns = startIdmapUserns(exe, *l.hostIDs)
	}
	return l, nil
}

// Abort implements sandbox.Launched: it ends a launched init that will not be started.
func (l *launched) Abort() {
	if l.finished {
		return
	}
	l.finished = true
	l.cfgW.Close()
	l.statR.Close()
	l.s.Kill()
	<-l.s.done
	l.s.cleanup()
	l.closeUserns()
}

// closeUserns waits for the id-mapping user namespace, if one is being made, and closes it.
func (l *launched) closeUserns() {
	if l.userns == nil {
		return
	}
	if ns, err := l.userns(); err == nil {
		ns.Close()
	}
	l.userns = nil
}

// Start implements sandbox.Launched: it sends the config to the launched init, which builds the
// boundary and runs the command. A ctx that ends before the command runs kills init.
func (l *launched) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	if l.finished {
		return nil, errors.New("linux: Start after Start or Abort")
	}
	sb, err := l.start(ctx, spec)
	l.failed = err != nil
	return sb, err
}

// Retry implements sandbox.Launched: a fresh launch with the same LaunchSpec, started with spec.
func (l *launched) Retry(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	if !l.failed {
		return nil, errors.New("linux: Retry without a failed Start")
	}
	nl, err := l.b.Launch(ctx, &l.ls)
	if err != nil {
		return nil, err
	}
	return nl.Start(ctx, spec)
}

func (l *launched) start(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	fail := func(err error) (sandbox.Sandbox, error) {
		l.Abort()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return fail(canceled(err))
	}
	if err := validate(spec); err != nil {
		return fail(&sandbox.SetupError{Step: stepChecking, Err: err})
	}
	etc, err := etcEntries(spec, l.ls.User)
	if err != nil {
		return fail(&sandbox.SetupError{Step: "reading /etc", Err: err})
	}
	etc, etcFiles, err := etcOutOfBand(etc)
	if err != nil {
		return fail(&sandbox.SetupError{Step: "preparing /etc", Err: err})
	}
	defer closeAll(etcFiles) // init has its own once they are sent
	cfg := &initConfig{Spec: *spec, User: l.ls.User, TTY: l.ls.TTY, TTYRows: l.ls.TTYRows, TTYCols: l.ls.TTYCols,
		Etc: etc, EtcFiles: len(etcFiles), LandlockABI: LandlockABI()}
	l.s.timeout = spec.Limits.Timeout
	if err := l.limits(spec, cfg); err != nil {
		return fail(err)
	}
	if l.hostIDs != nil {
		// As root, cordon opens what the sandbox shows of the host itself (idmap.go) and hands it
		// to init before the config that says so.
		userns, err := l.userns()
		l.userns = nil
		var files []*os.File
		if err == nil {
			files, err = openHostSources(userns, spec, *l.hostIDs, l.ls.Warn)
			userns.Close()
		}
		if err == nil {
			err = l.sendStatus(&hostSourcesMsg{Count: len(files)}, files...)
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
	if len(etcFiles) > 0 {
		if err := l.sendStatus(&etcFilesMsg{Count: len(etcFiles)}, etcFiles...); err != nil {
			return fail(&sandbox.SetupError{Step: "sending /etc", Err: err})
		}
	}
	if l.b.Runtime != nil {
		rc, err := l.runtimeConfigFor(spec, cfg)
		if err != nil {
			return fail(&sandbox.SetupError{Step: "writing the runtime's config", Err: err})
		}
		cfg.Runtime = rc
	}
	l.finished = true
	// From here until init reports, a ctx that ends kills init, which ends the wait for its report.
	stop := context.AfterFunc(ctx, func() { l.s.Kill() })
	err = l.s.start(cfg, l.cfgW, l.statR)
	if !stop() {
		// The kill was sent, before init reported or just after: either way the box is going.
		if err == nil {
			<-l.s.done
		}
		err = canceled(ctx.Err())
	}
	if err != nil {
		l.statR.Close()
		l.s.cleanup()
		return nil, err
	}
	go l.s.awaitExit(l.statR)
	return l.s, nil
}

// canceled is the error of a start that its context ended.
func canceled(err error) error {
	return &sandbox.SetupError{Step: "starting the sandbox", Err: err}
}

// limits puts the run in a cgroup of its own when the policy sets memory, pids or CPU limits. What
// the host cannot enforce through a cgroup falls back to rlimits, with one warning line each; nothing
// is skipped silently.
func (l *launched) limits(spec *sandbox.Spec, cfg *initConfig) error {
	lim, s := spec.Limits, l.s
	if lim.MemoryBytes == 0 && lim.Pids == 0 && lim.CPU == 0 {
		return nil
	}
	name := spec.RunName
	if name == "" {
		name = fmt.Sprintf("cordon-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	pids := lim.Pids
	if l.b.Runtime != nil && pids > 0 {
		// The runtime's own tasks count on the host (see runtimeTasks); the command's processes are
		// bounded inside the runtime's kernel, by RLIMIT_NPROC.
		pids += runtimeTasks
	}
	g, unenforced, err := cgroup.New(name, cgroup.Limits{MemoryBytes: lim.MemoryBytes, Pids: pids, CPU: lim.CPU})
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
		case u == cgroup.Pids && lim.Pids > 0:
			cfg.SetRlimitNproc = true
			l.ls.Warn.Printf("limits.pids: no usable cgroup (%s); falling back to RLIMIT_NPROC", why(u))
		case u == cgroup.Memory && lim.MemoryBytes > 0 && l.b.Runtime != nil:
			// gVisor's kernel does not enforce RLIMIT_DATA: there is no fallback to warn about.
			if g != nil {
				g.Destroy()
			}
			return &sandbox.SetupError{Step: "limiting memory", Err: fmt.Errorf("limits.memory: no usable memory cgroup (%s), and the %s tier has no other way to hold the limit; run where cgroups are available, or remove limits.memory", why(u), "gVisor")}
		case u == cgroup.Memory && lim.MemoryBytes > 0:
			cfg.RlimitData = uint64(lim.MemoryBytes)
			l.ls.Warn.Printf("limits.memory: no usable cgroup (%s); falling back to RLIMIT_DATA, per process", why(u))
		case u == cgroup.CPU && lim.CPU > 0:
			l.ls.Warn.Printf("limits.cpu: no usable cgroup (%s); CPU is not limited", why(u))
		}
	}
	if g == nil {
		return nil
	}
	keepalive, err := cgroup.StartReaper(l.exe, []string{ReaperArg0}, g)
	if err != nil {
		g.Destroy()
		return &sandbox.SetupError{Step: "starting the cgroup reaper", Err: err}
	}
	s.cgroup, s.keepalive = g, keepalive
	return nil
}

// validate checks what Start is given; the launch's part was checked by Launch.
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
		if o := m.Overlay; o != nil {
			if !filepath.IsAbs(o.Upper) || !filepath.IsAbs(o.Work) || filepath.Dir(o.Upper) != filepath.Dir(o.Work) {
				return fmt.Errorf("mount %q: its overlay's upper %q and work %q must be absolute and in one directory", m.Source, o.Upper, o.Work)
			}
			if m.Writable {
				return fmt.Errorf("mount %q: an overlay mount is not also writable", m.Source)
			}
		}
	}
	return nil
}

// sendStatus sends m to init on the status socket, before the config.
func (l *launched) sendStatus(m message, files ...*os.File) error {
	e, err := pollEndpoint(l.statR)
	if err != nil {
		return err
	}
	return sendMsgOn(e, m, files...)
}

// clone starts init in fresh namespaces, with the launch message as its argv[1].
func (l *launched) clone() error {
	ls := &l.ls
	launch, err := encodeMsg(&launchMsg{Egress: ls.Egress, Publish: ls.Publish})
	if err != nil {
		return &sandbox.SetupError{Step: "encoding the launch", Err: err}
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return &sandbox.SetupError{Step: "creating the config pipe", Err: err}
	}
	defer cfgR.Close()
	// Status comes back as datagrams on a socket pair, so that init can also hand over the master
	// side of the pseudo-terminal it created inside the sandbox, and the gateway's sockets.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		cfgW.Close()
		return &sandbox.SetupError{Step: "creating the status channel", Err: err}
	}
	// Cordon's end is non-blocking, and so in the runtime's poller (endpoint); init's blocks.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		cfgW.Close()
		unix.Close(fds[0])
		unix.Close(fds[1])
		return &sandbox.SetupError{Step: "creating the status channel", Err: err}
	}
	statR, statW := os.NewFile(uintptr(fds[0]), "status"), os.NewFile(uintptr(fds[1]), "status")
	defer statW.Close()
	stdin, stdout, stderr := ls.Stdin, ls.Stdout, ls.Stderr
	if ls.TTY || stdin == nil || stdout == nil || stderr == nil {
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
		if ls.TTY {
			stdin, stdout, stderr = devnull, devnull, devnull
		}
		stdin, stdout, stderr = cmp.Or(stdin, devnull), cmp.Or(stdout, devnull), cmp.Or(stderr, devnull)
	}

	files := []uintptr{stdin.Fd(), stdout.Fd(), stderr.Fd(), cfgR.Fd(), statW.Fd()}
	if len(ls.Publish) > 0 {
		pfds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			cfgW.Close()
			statR.Close()
			return &sandbox.SetupError{Step: "creating the channel for published ports", Err: err}
		}
		pubR, pubW := os.NewFile(uintptr(pfds[0]), "publish"), os.NewFile(uintptr(pfds[1]), "publish")
		defer pubW.Close()
		l.s.publish = &publisher{f: pubR}
		files = append(files, pubW.Fd())
	}
	uidMap, gidMap, cred, err := l.idMappings(ls.User)
	if err != nil {
		cfgW.Close()
		statR.Close()
		return &sandbox.SetupError{Step: "choosing the sandbox's host ids", Err: err}
	}
	if l.b.Runtime != nil {
		if len(files) == publishFD {
			files = append(files, ^uintptr(0)) // publishFD stays closed: runtimeFD follows it
		}
		// Opened here, on the host: init cannot look it up (see Runtime.Path).
		rf, err := openRuntimeFile(l.b.Runtime)
		if err != nil {
			cfgW.Close()
			statR.Close()
			return &sandbox.SetupError{Step: "opening the runtime", Err: err}
		}
		defer rf.Close()
		files = append(files, rf.Fd())
	}
	pidfd := -1
	// The runtime is told how many processors to use: two, whatever the host has, since init's work
	// is one locked thread's sequence with at most two goroutines beside it (the config's decoding
	// and the seccomp filter's compiling; with the gateway, the installation of its rules), and more
	// processors would only spin up idle threads. With one, those goroutines ran only while the
	// thread waited in the kernel: two against one made the start 0.93-0.97x of the wall clock
	// without the gateway (CPU 0.96-1.01x, three calls of 100 paired runs), and with the gateway 0.93x
	// (80 paired runs). (It does not spare the runtime its look at the cgroup's CPU limit: Go 1.26
	// reads /proc/self/cgroup and mountinfo at every start whatever GOMAXPROCS says, some 0.25 ms of
	// each process here.)
	const procs = "GOMAXPROCS=2"
	attr := &syscall.ProcAttr{
		// Init's environment is its own: the command gets spec.Env.
		Env:   []string{procs},
		Files: files,
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
	pid, err := syscall.ForkExec(l.exe, []string{InitArg0, string(launch)}, attr)
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
func (l *launched) idMappings(u sandbox.User) (uidMap, gidMap []syscall.SysProcIDMap, cred *syscall.Credential, err error) {
	// The effective ids are what the kernel checks; a cordon whose real and effective ids differ
	// (installed setuid, or a wrapper that set only one) would map the one and act as the other.
	hostUID, hostGID := os.Geteuid(), os.Getegid()
	if hostUID != os.Getuid() || hostGID != os.Getgid() {
		return nil, nil, nil, fmt.Errorf("cordon's real and effective ids differ (uid %d/%d, gid %d/%d): run it as one user, not setuid or through a wrapper that sets only one", os.Getuid(), hostUID, os.Getgid(), hostGID)
	}
	if hostUID == 0 {
		ids, err := rootHostIDs(u, hostIDFiles())
		if err != nil {
			return nil, nil, nil, err
		}
		l.hostIDs = &ids
		if l.b.Runtime != nil {
			base, err := rootHostIDs(sandbox.User{}, hostIDFiles())
			if err != nil {
				return nil, nil, nil, err
			}
			l.hostIDs.Runtime = &base
			uidMap, gidMap, cred = runtimeIDMappings(u, ids, base)
			return uidMap, gidMap, cred, nil
		}
		hostUID, hostGID = ids.UID, ids.GID
		cred = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}}
	}
	uidMap = []syscall.SysProcIDMap{{ContainerID: u.UID, HostID: hostUID, Size: 1}}
	gidMap = []syscall.SysProcIDMap{{ContainerID: u.GID, HostID: hostGID, Size: 1}}
	return uidMap, gidMap, cred, nil
}
