//go:build linux

package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func processProbes() []Probe {
	return []Probe{
		{"proc.host-visible", Processes, "find a host process by its command line in /proc", procHostVisible},
		{"proc.signal", Processes, "signal a host process", procSignal},
		{"proc.ptrace", Processes, "ptrace a sibling process (and the host's, if visible)", procPtrace},
		{"proc.init-inspect", Processes, "read pid 1's memory, environment, maps and descriptors (/proc/1/*, process_vm_readv, pidfd_getfd, ptrace)", procInitInspect},
		{"proc.tiocsti", Processes, "inject input into a terminal (TIOCSTI, also with high bits set)", procTIOCSTI},
		{"proc.abstract-unix", Processes, "connect to a host abstract unix socket", procAbstract},
		{"proc.daemon-sockets", Processes, "connect to docker, containerd, podman and dbus sockets", procDaemonSockets},
		{"proc.setuid", Processes, "gain privileges through a setuid binary", procSetuid},
		{"proc.userns", Processes, "create a nested user namespace", procUserns},
		{"proc.io_uring", Processes, "create an io_uring (a path around seccomp)", procIOURing},
		{"proc.raw-socket", Processes, "open raw IP and packet sockets", procRawSocket},
	}
}

// findMarker returns the pids with an argument whose sha256 is marker.
func findMarker(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if hasMarker(pid, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func hasMarker(pid int, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range bytes.Split(b, []byte{0}) {
		if Sum(arg) == marker {
			return true
		}
	}
	return false
}

func procHostVisible(_ context.Context, env *Env) Verdict {
	p := env.Canaries.Process
	if p == nil {
		return skip("no process canary given (cordon verify starts one)")
	}
	if pids := findMarker(p.MarkerSHA256); len(pids) > 0 {
		return fail("the host's canary process is visible as pid %v", pids)
	}
	return pass("no process with the canary's command line in /proc")
}

// canaryPIDs are the pids under which the host canary process may be reached: those found by its
// command line, and its host pid if that pid shows the marker here.
func canaryPIDs(p *Process) []int {
	pids := findMarker(p.MarkerSHA256)
	if !slices.Contains(pids, p.PID) && hasMarker(p.PID, p.MarkerSHA256) {
		pids = append(pids, p.PID)
	}
	return pids
}

func procSignal(_ context.Context, env *Env) Verdict {
	p := env.Canaries.Process
	if p == nil {
		return skip("no process canary given (cordon verify starts one)")
	}
	for _, pid := range canaryPIDs(p) {
		if err := unix.Kill(pid, 0); err == nil {
			return fail("signal 0 to the host canary process (pid %d) was delivered", pid)
		}
	}
	return pass("the host canary process cannot be signalled (not visible)")
}

func procPtrace(ctx context.Context, env *Env) Verdict {
	if p := env.Canaries.Process; p != nil {
		for _, pid := range canaryPIDs(p) {
			if err := ptraceAttach(pid); err == nil {
				return fail("attached to the host canary process (pid %d) with ptrace", pid)
			}
		}
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return skip("no sleep binary to start a sibling to attach to")
	}
	cmd := exec.CommandContext(ctx, sleep, "10")
	if err := cmd.Start(); err != nil {
		return skip("cannot start a sibling: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := ptraceAttach(cmd.Process.Pid); err != nil {
		return pass("ptrace refused: %v", err)
	}
	return fail("attached to a sibling process (pid %d) with ptrace", cmd.Process.Pid)
}

// ptraceAttach attaches to pid and detaches again at once. ptrace binds to the calling thread.
func ptraceAttach(pid int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	var ws unix.WaitStatus
	unix.Wait4(pid, &ws, unix.WALL, nil)
	unix.PtraceDetach(pid)
	return nil
}

func procTIOCSTI(_ context.Context, _ *Env) Verdict {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return skip("no pseudo-terminal to test on: %v", err)
	}
	defer m.Close()
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return skip("cannot unlock a pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		return skip("cannot name the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return skip("cannot open the pseudo-terminal's other side: %v", err)
	}
	defer s.Close()
	c := byte('x')
	var errs []string
	for _, req := range []uint64{unix.TIOCSTI, 1<<32 | unix.TIOCSTI} {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, s.Fd(), uintptr(req), uintptr(unsafe.Pointer(&c)))
		if e == 0 {
			return fail("TIOCSTI (request %#x) injected a character into a terminal", req)
		}
		errs = append(errs, fmt.Sprintf("%#x: %v", req, e))
	}
	return pass("refused: %s", strings.Join(errs, "; "))
}

func procAbstract(_ context.Context, env *Env) Verdict {
	a := env.Canaries.Abstract
	if a == nil {
		return skip("no abstract socket canary given (cordon verify listens on one)")
	}
	c, err := net.DialTimeout("unix", "@"+a.Name, attemptTimeout)
	if err != nil {
		return pass("refused: %v", shortErr(err))
	}
	defer c.Close()
	if ok, _ := readGreeting(c, a.SHA256); ok {
		return fail("connected to the host's abstract socket @%s and got its greeting", a.Name)
	}
	return pass("connected to @%s, but not to the host's socket", a.Name)
}

// daemonSockets are the sockets of daemons that run code on the host for whoever connects.
var daemonSockets = []string{
	"/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock", "/run/podman/podman.sock",
	"/run/user/*/podman/podman.sock", "/run/user/*/docker.sock", "/run/dbus/system_bus_socket",
	"/var/run/dbus/system_bus_socket", "/run/user/*/bus", "/run/systemd/private",
}

func procDaemonSockets(_ context.Context, _ *Env) Verdict {
	n := 0
	for _, g := range daemonSockets {
		m, _ := filepath.Glob(g)
		for _, s := range m {
			n++
			if c, err := net.DialTimeout("unix", s, attemptTimeout); err == nil {
				c.Close()
				return fail("connected to %s", s)
			}
		}
	}
	return pass("%d daemon socket(s) visible, none connectable", n)
}

func procSetuid(_ context.Context, _ *Env) Verdict {
	st, err := os.ReadFile("/proc/self/status")
	if err == nil && bytes.Contains(st, []byte("\nNoNewPrivs:\t1")) {
		return pass("no_new_privs is set: setuid and file capabilities are inert")
	}
	var found []string
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"} {
		var sfs unix.Statfs_t
		if unix.Statfs(d, &sfs) == nil && sfs.Flags&unix.ST_NOSUID != 0 {
			continue
		}
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			fi, err := e.Info()
			if err == nil && fi.Mode()&os.ModeSetuid != 0 && fi.Mode()&0o111 != 0 {
				if sys, ok := fi.Sys().(*syscall.Stat_t); ok && sys.Uid == 0 {
					found = append(found, filepath.Join(d, e.Name()))
				}
			}
		}
		if len(found) > 4 {
			break
		}
	}
	if len(found) > 0 {
		return fail("no_new_privs is off and setuid-root binaries can run: %s", strings.Join(found, ", "))
	}
	return pass("no setuid-root binary on a mount that honours setuid")
}

func procUserns(ctx context.Context, env *Env) Verdict {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return skip("no true binary to start in a new namespace")
	}
	cmd := exec.CommandContext(ctx, truePath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			return pass("refused: %v", err)
		}
	}
	if env.Canaries.AllowNesting {
		return skip("created a user namespace, which the policy allows (sandbox.allowNesting)")
	}
	return fail("started a process in a new user namespace (it holds every capability there)")
}

func procIOURing(_ context.Context, _ *Env) Verdict {
	params := make([]byte, 120)
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if e != 0 {
		return pass("io_uring_setup refused: %v", e)
	}
	unix.Close(int(fd))
	return fail("created an io_uring (fd %d): its operations bypass seccomp's view of syscalls", fd)
}

func procRawSocket(_ context.Context, _ *Env) Verdict {
	var errs []string
	for _, s := range []struct {
		name        string
		domain, typ int
		proto       int
	}{
		{"raw IPv4", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW},
		{"packet", unix.AF_PACKET, unix.SOCK_RAW, 0x0300},
	} {
		fd, err := unix.Socket(s.domain, s.typ, s.proto)
		if err == nil {
			unix.Close(fd)
			return fail("opened a %s socket: it can forge traffic past any proxy", s.name)
		}
		errs = append(errs, s.name+": "+err.Error())
	}
	return pass("refused: %s", strings.Join(errs, "; "))
}

// initFiles are the files of /proc/1 that show init's memory, environment and auxiliary vector. The
// kernel lets only a process that could ptrace init open them: init is not dumpable
// (PR_SET_DUMPABLE 0), so the command, though of init's uid, cannot.
var initFiles = []string{"environ", "maps", "mem", "auxv"}

// initLinks are the links of /proc/1 the same check guards: its binary, directories and descriptors.
var initLinks = []string{"exe", "cwd", "root"}

// initRemote is the address process_vm_readv reads in pid 1 when its maps are not readable: where a
// statically linked binary (cordon's init is one) is mapped.
const initRemote = 0x400000

// initTargets are /proc/1 and each of its threads' directories. The kernel checks each thread's own
// credentials and security domain: one thread may be reachable where the leader is not (natively, the
// thread that started the command shares its Landlock domain), and only dumpability, one flag for the
// whole process, guards them all.
func initTargets() (dirs []string, tids []int) {
	dirs = []string{"/proc/1"}
	ents, _ := os.ReadDir("/proc/1/task")
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			dirs = append(dirs, "/proc/1/task/"+e.Name())
			tids = append(tids, tid)
		}
	}
	return dirs, tids
}

func procInitInspect(_ context.Context, _ *Env) Verdict {
	if os.Getpid() == 1 {
		return skip("this process is pid 1: the command runs as pid 1 here (gVisor's tier, whose init is outside, on the host), so there is no init inside to inspect")
	}
	if _, err := os.Stat("/proc/1"); err != nil {
		return skip("no pid 1 visible in /proc: %v", err)
	}
	var got []string
	refusedBy := map[string]int{}
	refuse := func(err error) { refusedBy[errName(unwrapPath(err))]++ }
	remote := uintptr(initRemote)
	dirs, tids := initTargets()
	for _, dir := range dirs {
		for _, name := range initFiles {
			f, err := os.Open(dir + "/" + name)
			if err != nil {
				refuse(err)
				continue
			}
			// The kernel checks at the open: an open file is the finding, whatever a read gives.
			b := make([]byte, 256)
			n, _ := f.Read(b)
			f.Close()
			got = append(got, fmt.Sprintf("opened %s/%s (read %d bytes)", dir, name, n))
			if name == "maps" {
				if start, _, ok := strings.Cut(string(b[:n]), "-"); ok {
					if a, err := strconv.ParseUint(start, 16, 64); err == nil {
						remote = uintptr(a)
					}
				}
			}
		}
		for _, name := range initLinks {
			if t, err := os.Readlink(dir + "/" + name); err == nil {
				got = append(got, fmt.Sprintf("%s/%s is %s", dir, name, t))
			} else {
				refuse(err)
			}
		}
		if ents, err := os.ReadDir(dir + "/fd"); err == nil {
			var links []string
			for _, e := range ents {
				if t, err := os.Readlink(dir + "/fd/" + e.Name()); err == nil {
					links = append(links, e.Name()+" -> "+t)
				}
			}
			got = append(got, fmt.Sprintf("listed %d of init's descriptors in %s/fd (%s)", len(ents), dir, strings.Join(links, ", ")))
		} else {
			refuse(err)
		}
	}
	refused := []string{fmt.Sprintf("%s and its %d threads' %s, %s, fd", dirs[0], len(tids), strings.Join(initFiles, ", "), strings.Join(initLinks, ", "))}
	buf := make([]byte, 64)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	for _, pid := range append([]int{1}, tids...) {
		if n, err := unix.ProcessVMReadv(pid, local, []unix.RemoteIovec{{Base: remote, Len: len(buf)}}, 0); err == nil && n > 0 {
			got = append(got, fmt.Sprintf("process_vm_readv read %d bytes of init's memory (as thread %d)", n, pid))
		} else {
			refuse(err)
		}
	}
	refused = append(refused, "process_vm_readv")
	if pidfd, err := unix.PidfdOpen(1, 0); err == nil {
		if fd, err := unix.PidfdGetfd(pidfd, 0, 0); err == nil {
			unix.Close(fd)
			got = append(got, "pidfd_getfd copied init's descriptor 0")
		} else {
			refuse(err)
		}
		unix.Close(pidfd)
	} else {
		refuse(err)
	}
	refused = append(refused, "pidfd_getfd")
	if len(got) > 0 {
		// What was read first; a listing of descriptor numbers says least.
		sort.SliceStable(got, func(i, j int) bool {
			return !strings.HasPrefix(got[i], "listed") && strings.HasPrefix(got[j], "listed")
		})
		return fail("pid 1 is inspectable: %s; init holds the sandbox's control channels and its environment", joinSome(got, 8))
	}
	// Only when nothing else reached init: a seized process stops at its next signal until its tracer
	// lets go, which must not happen to a host's init when the probe runs unsandboxed as root.
	for _, pid := range append([]int{1}, tids...) {
		err := ptraceSeize(pid)
		if err == nil {
			return fail("seized pid 1 (thread %d) with ptrace", pid)
		}
		refuse(err)
	}
	refused = append(refused, "ptrace seize")
	// Reaching init is refused; what init's threads could do if it were not is the second line: none
	// of them may hold a capability while the command runs (status is readable by anyone).
	if held := initCapabilities(dirs); len(held) > 0 {
		return fail("init's threads hold capabilities while the command runs: %s", joinSome(held, 8))
	}
	var errs []string
	for e, n := range refusedBy {
		errs = append(errs, fmt.Sprintf("%d %s", n, e))
	}
	sort.Strings(errs)
	return pass("refused: %s (%s); none of its threads holds a capability", strings.Join(refused, "; "), strings.Join(errs, ", "))
}

// initCapabilities lists the threads of pid 1 (dirs from initTargets: /proc/1 is its main thread)
// whose permitted or effective capability set is not empty, with the sets.
func initCapabilities(dirs []string) []string {
	var held []string
	for _, dir := range dirs[1:] {
		b, err := os.ReadFile(dir + "/status")
		if err != nil {
			continue // the thread ended, or status is hidden: nothing to judge
		}
		var sets []string
		for line := range strings.Lines(string(b)) {
			for _, name := range []string{"CapPrm:", "CapEff:"} {
				if v, ok := strings.CutPrefix(line, name); ok && strings.Trim(strings.TrimSpace(v), "0") != "" {
					sets = append(sets, name+" "+strings.TrimSpace(v))
				}
			}
		}
		if len(sets) > 0 {
			held = append(held, fmt.Sprintf("%s (%s)", dir, strings.Join(sets, ", ")))
		}
	}
	return held
}

// ptraceSeize seizes pid on a thread of its own that then exits, which detaches it at once: unlike
// PTRACE_ATTACH, a seize does not stop the process.
func ptraceSeize(pid int) error {
	done := make(chan error, 1)
	go func() {
		// The thread stays locked: the goroutine's end ends the thread, and with it the trace.
		runtime.LockOSThread()
		done <- unix.PtraceSeize(pid)
	}()
	return <-done
}

// unwrapPath returns the errno inside a *os.PathError or *os.LinkError, which errName can name.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
