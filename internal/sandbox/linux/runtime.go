//go:build linux

package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Runtime, set on a Backend, puts the command under an OCI runtime (gVisor's runsc) instead of
// executing it directly: init builds the same namespaces, gateway sockets and rules, and the same
// root (workspace overlay, masks, read-only paths, the generated /etc), and then, instead of
// pivoting into that root and dropping its privileges, starts the runtime on it. The runtime runs
// in init's namespaces (its network namespace is the gateway's), in the run's cgroup, and dies with
// init, so everything the native box promises about its outside holds for it unchanged.
type Runtime struct {
	// Path is the runtime's binary on the host. Cordon opens it at Launch, as a detached mount of
	// that one file, and hands init the descriptor: init sees nothing of the host by path once its
	// root is built, and shows the file at the same path in its scratch root.
	Path string
	// Flags are the runtime's global flags; init adds --root and the run subcommand.
	Flags []string
	// Config builds the runtime's config.json for one box.
	Config func(*RuntimeSpec) ([]byte, error)
}

// RuntimeSpec is what Runtime.Config is given: the box's spec, and what init resolved for it.
type RuntimeSpec struct {
	Spec *sandbox.Spec
	// Args is the command line the runtime starts: Spec.Args itself. The runtime installs the
	// native box's seccomp filter for it from its Config (no shim of cordon's runs inside).
	Args []string
	User sandbox.User
	// Root is the root init built, as the runtime sees it (inside init's mount namespace).
	Root string
	// TTY says that the command's streams are a pseudo-terminal.
	TTY bool
	// Nproc is limits.pids, which the runtime applies inside as RLIMIT_NPROC; Data the rlimit that
	// stands in for a memory cgroup the host could not give (zero: none).
	Nproc, Data uint64
}

// runtimeTasks is what a box under a Runtime adds to limits.pids in the run's cgroup: the runtime's
// own host tasks (gVisor's Sentry and gofer threads, a systrap stub task per thread of the command)
// run in that cgroup beside the command's, which the runtime's kernel bounds to limits.pids itself.
const runtimeTasks = 512

// RuntimeRoot is where the built root lies when a Runtime starts it.
const RuntimeRoot = newRoot

// Paths in init's scratch root that only a Runtime uses: a tmpfs holding the runtime's state and
// the bundle (config.json, the runtime's log, its pid file).
const (
	runtimeDir     = "/runtime"
	runtimeState   = runtimeDir + "/state"
	runtimeLog     = runtimeDir + "/log"
	runtimePIDFile = runtimeDir + "/pid"
	// runtimeID names the one container; the state directory is the run's own.
	runtimeID = "cordon"
)

// runtimeFD is the descriptor of the runtime's binary in init (after the config pipe, the status
// socket and publishFD): a detached mount of the file, made by cordon on the host (open_tree).
const runtimeFD = publishFD + 1

// runtimeConfig is the part of the config message that a Runtime adds.
type runtimeConfig struct {
	// Path is where init shows the runtime's binary (its host path: runsc checks the file it
	// was executed from by the path the kernel gives for it).
	Path   string          `json:"path"`
	Flags  []string        `json:"flags"`
	Config json.RawMessage `json:"config"`
}

// runtimeIDMappings are the id maps of a box under a Runtime. The runtime needs to be root in the
// box's user namespace (runsc starts its sandbox in the current user namespace when it has the host
// network), and the command's own uid inside the runtime must own the workspace as it does in the
// native box. So init is uid 0 there, mapped to the bottom of cordon's reserved range (never host
// root), and the sandbox user is mapped as the native box maps it. Rootless, a user namespace can
// map one id only, which cannot be both.
func runtimeIDMappings(u sandbox.User, ids, base hostIDs) (uidMap, gidMap []syscall.SysProcIDMap, cred *syscall.Credential) {
	uidMap = []syscall.SysProcIDMap{{ContainerID: 0, HostID: base.UID, Size: 1}, {ContainerID: u.UID, HostID: ids.UID, Size: 1}}
	gidMap = []syscall.SysProcIDMap{{ContainerID: 0, HostID: base.GID, Size: 1}, {ContainerID: u.GID, HostID: ids.GID, Size: 1}}
	return uidMap, gidMap, &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
}

// runtimeConfigFor builds the config message's runtime part on the host.
func (l *launched) runtimeConfigFor(spec *sandbox.Spec, cfg *initConfig) (*runtimeConfig, error) {
	rt := l.b.Runtime
	rs := &RuntimeSpec{Spec: spec, Args: spec.Args, User: l.ls.User, Root: RuntimeRoot, TTY: l.ls.TTY, Data: cfg.RlimitData}
	if spec.Limits.Pids > 0 {
		// Inside the runtime's kernel the command is the only process of its uid: RLIMIT_NPROC
		// there counts what the pids cgroup counts natively (gVisor enforces it per uid, threads
		// included).
		rs.Nproc = uint64(spec.Limits.Pids)
	}
	b, err := rt.Config(rs)
	if err != nil {
		return nil, err
	}
	return &runtimeConfig{Path: rt.Path, Flags: rt.Flags, Config: b}, nil
}

// prepareRuntime readies init's scratch root for the runtime once the sandbox's root is built:
// the devices it needs, a tmpfs for its state and the bundle, and the bundle's config. The host's
// root is detached: the runtime is executed from its descriptor and needs nothing else of it.
func prepareRuntime(rc *runtimeConfig) error {
	return runSteps([]rootStep{
		{"giving the runtime /dev", func() error {
			if err := os.Mkdir("/dev", 0o755); err != nil {
				return err
			}
			return unix.Mount(inRoot("/dev"), "/dev", "", unix.MS_BIND|unix.MS_REC, "")
		}},
		{"giving the runtime /sys", func() error {
			if err := os.Mkdir("/sys", 0o555); err != nil {
				return err
			}
			return unix.Mount("sysfs", "/sys", "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		}},
		{"giving the runtime /tmp", func() error {
			// runsc makes its sandbox's minimal chroot on a tmpfs under /tmp.
			if err := os.Mkdir("/tmp", 0o1777); err != nil {
				return err
			}
			return unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")
		}},
		{"writing the runtime's bundle", func() error {
			if err := os.Mkdir(runtimeDir, 0o700); err != nil {
				return err
			}
			if err := unix.Mount("tmpfs", runtimeDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
				return err
			}
			if err := os.Mkdir(runtimeState, 0o700); err != nil {
				return err
			}
			config, err := existingBinds(rc.Config)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(runtimeDir, "config.json"), config, 0o600)
		}},
		{"showing the runtime's binary", func() error {
			if !filepath.IsAbs(rc.Path) {
				return fmt.Errorf("%q is not an absolute path", rc.Path)
			}
			if err := ensureTarget(rc.Path, false); err != nil {
				return err
			}
			if err := unix.MoveMount(runtimeFD, "", unix.AT_FDCWD, rc.Path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return err
			}
			return unix.MountSetattr(-1, rc.Path, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV})
		}},
		{"detaching the host's root", func() error { return unix.Unmount(oldRoot, unix.MNT_DETACH) }},
	})
}

// inSandboxRoot runs fn with the built root as the file system's root, so that the command is looked
// up (lookPath, envInterpreter) exactly as the native box looks it up after its pivot; it returns to
// the scratch root afterwards, which init (holding CAP_SYS_CHROOT in its namespace) may do.
func inSandboxRoot(fn func() error) error {
	back, err := os.Open("/")
	if err != nil {
		return &sandbox.SetupError{Step: "looking up the command", Err: err}
	}
	defer back.Close()
	if err := unix.Chroot(newRoot); err != nil {
		return &sandbox.SetupError{Step: "looking up the command", Err: err}
	}
	ferr := fn()
	err = unix.Fchdir(int(back.Fd()))
	if err == nil {
		err = unix.Chroot(".")
	}
	if err != nil {
		return &sandbox.SetupError{Step: "returning from the sandbox's root", Err: err}
	}
	return ferr
}

// startRuntime starts the runtime on the built root with the command's streams and returns its pid
// once the runtime said that its sandbox exists (it writes its pid file then): `RUNTIME FLAGS --root
// STATE --log LOG run --bundle DIR --pid-file FILE cordon`. Its exit status is the command's
// (128+signal when a signal ended it). A runtime that ends before is a SetupError naming its last
// logged error, and nothing of the command ran. With tty, the runtime makes the command's
// pseudo-terminal (in the devpts init gave it) and hands its master over a console socket; init
// passes it on to cordon, as it does its own in the native box.
func startRuntime(rc *runtimeConfig, tty bool, stdin, stdout, stderr *os.File) (int, error) {
	const step = "starting the gVisor sandbox (runsc)"
	fail := func(err error) (int, error) { return 0, &sandbox.SetupError{Step: step, Err: err} }
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fail(fmt.Errorf("inotify: %w", err))
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, runtimeDir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		return fail(fmt.Errorf("inotify: %w", err))
	}
	args := rc.args(runtimeLog, "run", "--bundle="+runtimeDir, "--pid-file="+runtimePIDFile)
	console := -1
	if tty {
		if console, err = consoleSocket(); err != nil {
			return fail(err)
		}
		defer unix.Close(console)
		args = append(args, "--console-socket="+runtimeConsole)
	}
	args = append(args, runtimeID)
	files, err := runtimeFiles(stdin, stdout, stderr)
	if err != nil {
		return fail(err)
	}
	pidfd := -1
	pid, err := syscall.ForkExec(rc.Path, args, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{"PATH=/usr/bin:/bin"},
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
	})
	unix.Close(int(files[len(files)-1]))
	if err != nil {
		return fail(err)
	}
	defer unix.Close(pidfd)
	buf := make([]byte, 4096)
	created, terminal := false, !tty
	for !created || !terminal {
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}, {Fd: int32(console), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fail(fmt.Errorf("poll: %w", err))
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			n, err := unix.Read(in, buf)
			if err != nil && err != unix.EINTR && err != unix.EAGAIN {
				return fail(fmt.Errorf("inotify: %w", err))
			}
			created = created || n > 0 && namesFile(buf[:n], filepath.Base(runtimePIDFile))
		}
		if fds[2].Revents&unix.POLLIN != 0 {
			if err := passTerminal(console); err != nil {
				unix.Kill(pid, unix.SIGKILL)
				return fail(fmt.Errorf("the runtime's terminal: %w", err))
			}
			terminal = true
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			var ws unix.WaitStatus
			for {
				if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
					break
				}
			}
			return 0, runtimeFailure(ws)
		}
	}
	return pid, nil
}

// runtimeTableFD is the highest descriptor runsc is started with, which sizes the descriptor tables
// of its sandbox and gofer processes. runsc's Sentry moves the command's streams to descriptors
// 253-255 once it runs many threads; a process that grows its descriptor table while it has more
// than one thread waits for an RCU grace period in the kernel (10-30 ms: that was the largest
// single item of the tier's start, "Remapped stdio FDs ... in 27ms" in runsc's debug log). A
// child's table is sized by the highest descriptor open in its parent when it forks, so a runsc
// started with 255 open hands its children tables of 256 entries, as gVisor's own prewarmer sidecar
// does for its Sentry. runsc marks every descriptor it inherited close-on-exec before it starts a
// child (sandbox.SetCloExeOnAllFDs), so the descriptor itself, /dev/null opened read-only, reaches
// neither the Sentry nor the gofer.
const runtimeTableFD = 255

// runtimeFiles are runsc's descriptors: the command's streams as 0-2 and /dev/null, read-only, as
// runtimeTableFD (the rest closed). The forked child grows its table while it is the only user of
// it (it shares no descriptor table with init's threads), so growing it costs no grace period. The
// last entry is the /dev/null descriptor, which the caller closes after the fork.
func runtimeFiles(stdin, stdout, stderr *os.File) ([]uintptr, error) {
	null, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/null: %w", err)
	}
	files := make([]uintptr, runtimeTableFD+1)
	for i := range files {
		files[i] = ^uintptr(0) // closed in the child
	}
	files[0], files[1], files[2] = stdin.Fd(), stdout.Fd(), stderr.Fd()
	files[runtimeTableFD] = uintptr(null)
	return files, nil
}

// runtimeConsole is the socket the runtime hands the command's terminal over.
const runtimeConsole = runtimeDir + "/console.sock"

// consoleSocket listens on runtimeConsole.
func consoleSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("console socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: runtimeConsole}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("console socket: %w", err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("console socket: %w", err)
	}
	return fd, nil
}

// passTerminal accepts the runtime's connection on the console socket, receives the terminal's
// master side and sends it to cordon in a terminalMsg.
func passTerminal(listener int) error {
	conn, _, err := unix.Accept4(listener, unix.SOCK_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(conn)
	name := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(conn, name, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("no descriptor (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("expected one descriptor (%v)", err)
	}
	master := os.NewFile(uintptr(fds[0]), "pty master")
	defer master.Close()
	return sendMsg(statusFD, &terminalMsg{}, master)
}

// namesFile says whether a buffer of inotify events names the file name.
func namesFile(buf []byte, name string) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			return false
		}
		if strings.TrimRight(string(buf[unix.SizeofInotifyEvent:end]), "\x00") == name {
			return true
		}
		buf = buf[end:]
	}
	return false
}

// runtimeFailure says why the runtime ended before its sandbox existed: its log's last error, or
// how it ended.
func runtimeFailure(ws unix.WaitStatus) error {
	why := describe(ws)
	if b, err := os.ReadFile(runtimeLog); err == nil {
		if last := firstError(string(b)); last != "" {
			why = last
		}
	}
	return &sandbox.SetupError{Step: "starting the gVisor sandbox (runsc)", Err: errors.New(why)}
}

// firstError is the first error a runtime's log reports, which names the cause (the lines after it
// say what failed because of it). runsc's --log is JSON lines with "level" and "msg".
func firstError(log string) string {
	for _, l := range strings.Split(log, "\n") {
		var e struct{ Msg, Level string }
		if json.Unmarshal([]byte(l), &e) == nil && (e.Level == "error" || e.Level == "fatal") && e.Msg != "" {
			return e.Msg
		}
	}
	return ""
}

// openRuntimeFile opens, on the host, what init shows of the host under a Runtime: the runtime's
// binary, as a detached mount of the one file.
func openRuntimeFile(rt *Runtime) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, rt.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open_tree %s: %w", rt.Path, err)
	}
	return os.NewFile(uintptr(fd), rt.Path), nil
}

// existingBinds drops from an OCI config the bind mounts whose source, a path of the built root,
// does not exist there (a mask or read-only path the workspace lacks), as init's own masking skips
// them; a source outside the built root is refused.
func existingBinds(config []byte) ([]byte, error) {
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(config, &spec); err != nil {
		return nil, fmt.Errorf("the runtime's config: %w", err)
	}
	var mounts []map[string]any
	if m, ok := spec["mounts"]; ok {
		if err := json.Unmarshal(m, &mounts); err != nil {
			return nil, fmt.Errorf("the runtime's config: mounts: %w", err)
		}
	}
	kept := mounts[:0]
	for _, m := range mounts {
		src, _ := m["source"].(string)
		if m["type"] != "bind" {
			kept = append(kept, m)
			continue
		}
		if !strings.HasPrefix(src, newRoot+"/") || filepath.Clean(src) != src {
			return nil, fmt.Errorf("the runtime's config: bind source %q is outside the built root", src)
		}
		if _, err := os.Lstat(src); err == nil {
			kept = append(kept, m)
		}
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	spec["mounts"] = b
	return json.Marshal(spec)
}

// killRuntime sends sig to the command through `runsc kill`; the process it starts is reaped by
// supervise with every other child of init.
func killRuntime(rc *runtimeConfig, sig syscall.Signal) {
	args := rc.args(runtimeDir+"/kill.log", "kill", runtimeID, fmt.Sprint(int(sig)))
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer devnull.Close()
	syscall.ForkExec(rc.Path, args, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{"PATH=/usr/bin:/bin"},
		Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd()},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
}

// args is a runtime command line: its flags, the run's state directory, a log, then the subcommand.
func (rc *runtimeConfig) args(log string, sub ...string) []string {
	args := append([]string{"runsc"}, rc.Flags...)
	args = append(args, "--root="+runtimeState, "--log="+log)
	return append(args, sub...)
}
