//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// differs, as an attempt's expectation without the filter, accepts anything but the filtered result:
// for attacks whose unfiltered outcome depends on the host (kernel config, sysctls) yet must show
// that the kernel, not the filter, answered.
const differs = "(anything but the filtered result)"

// attempt is one real system call made in the child. want is its result under the default filter,
// nested under the filter with AllowNesting (empty: same as want), without its result with no filter
// at all. For attacks, without must differ from want, so that the test can fail: a filter that did
// nothing would be caught. If the result without the filter is hostLacks, the host cannot make the
// call at all (a kernel feature is missing), the attempt proves nothing either way, and it is skipped.
type attempt struct {
	name                  string
	run                   func(e childEnv) string
	want, nested, without string
	hostLacks             string
}

// attempts lists the attacks and the ordinary work, in the order the child runs them.
func attempts() []attempt {
	list := []attempt{
		// Mounts. The child runs in a private mount namespace, so the unfiltered run changes nothing outside.
		{"mount tmpfs", func(e childEnv) string {
			return result(unix.Mount("cordon", filepath.Join(e.dir, "mnt"), "tmpfs", 0, ""))
		}, "EPERM", "", "ok", ""},
		{"umount2 (of that tmpfs)", func(e childEnv) string { return result(unix.Unmount(filepath.Join(e.dir, "mnt"), 0)) }, "EPERM", "", "ok", ""},
		{"chroot /", func(childEnv) string { return result(unix.Chroot("/")) }, "EPERM", "", "ok", ""},
		{"pivot_root", func(childEnv) string { return result(unix.PivotRoot("/nonexistent-cordon", "/nonexistent-cordon")) }, "EPERM", "", "ENOENT", ""},
		{"fsopen tmpfs", func(childEnv) string { return fdResult(unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)) }, "EPERM", "", "ok", ""},
		{"open_tree /", func(childEnv) string {
			return fdResult(unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLOEXEC))
		}, "EPERM", "", "ok", ""},

		// Namespaces. A Go process has many threads, so a raw unshare(CLONE_NEWUSER) fails with EINVAL
		// without the filter; the forked children below are single-threaded and succeed.
		{"setns", func(childEnv) string { return result(unix.Setns(-1, 0)) }, "EPERM", "", "EBADF", ""},
		{"unshare CLONE_NEWUSER", func(childEnv) string { return result(unix.Unshare(unix.CLONE_NEWUSER)) }, "EPERM", "EINVAL", "EINVAL", ""},
		{"unshare CLONE_NEWUSER in a child", func(childEnv) string {
			return runResult(&syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWUSER}, "/bin/true")
		}, "EPERM", "ok", "ok", ""},
		{"clone CLONE_NEWUSER", func(childEnv) string {
			return runResult(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}, "/bin/true")
		}, "EPERM", "ok", "ok", ""},
		{"clone3", func(childEnv) string { return errnoResult(sys(unix.SYS_CLONE3, 0, 0)) }, "ENOSYS", "EINVAL", "EINVAL", ""},

		// Other processes.
		{"ptrace PTRACE_ATTACH sibling", func(e childEnv) string { return result(unix.PtraceAttach(e.siblings[0])) }, "EPERM", "", "ok", ""},
		{"ptrace PTRACE_SEIZE sibling", func(e childEnv) string { return result(unix.PtraceSeize(e.siblings[1])) }, "EPERM", "", "ok", ""},
		{"process_vm_readv", func(childEnv) string {
			src, dst := []byte("secret"), make([]byte, 6)
			_, err := unix.ProcessVMReadv(os.Getpid(), []unix.Iovec{{Base: &dst[0], Len: 6}},
				[]unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 6}}, 0)
			runtime.KeepAlive(src)
			return result(err)
		}, "EPERM", "", "ok", ""},
		{"kcmp", func(childEnv) string {
			return errnoResult(sys(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), 0 /* KCMP_FILE */, 0, 0))
		}, "EPERM", "", differs, ""},
		{"pidfd_getfd", func(childEnv) string {
			pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
			if err != nil {
				return "pidfd_open: " + result(err)
			}
			defer unix.Close(pidfd)
			return fdResult(unix.PidfdGetfd(pidfd, 0, 0))
		}, "EPERM", "", "ok", ""},

		// Kernel interfaces.
		{"bpf BPF_MAP_CREATE", func(childEnv) string {
			attr := [4]uint32{unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1} // type, key size, value size, entries
			r, errno := sys(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
			return closeResult(r, errno)
		}, "EPERM", "", "ok", ""},
		{"perf_event_open", func(childEnv) string {
			attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
			attr.Size = uint32(unsafe.Sizeof(attr))
			return fdResult(unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC))
		}, "EPERM", "", differs, ""},
		{"userfaultfd", func(childEnv) string { return closeResult(sys(unix.SYS_USERFAULTFD, unix.O_CLOEXEC)) }, "EPERM", "", "ok", ""},
		{"io_uring_setup", func(childEnv) string {
			var params [120]byte // struct io_uring_params
			return closeResult(sys(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params))))
		}, "EPERM", "", differs, ""},
		{"keyctl", func(e childEnv) string { return attemptKeyctl(e) }, "EPERM", "", "ok", ""},
		{"keyctl on a thread started before Install", func(e childEnv) string {
			return e.onOldThread(func() string { return attemptKeyctl(e) })
		}, "EPERM", "", "ok", ""},
		{"add_key", func(childEnv) string {
			_, err := unix.AddKey("user", "cordon-seccomp-test", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
			return result(err)
		}, "EPERM", "", "ok", ""},
		{"delete_module", func(childEnv) string { return result(unix.DeleteModule("cordon_nonexistent", unix.O_NONBLOCK)) }, "EPERM", "", differs, ""},
		{"name_to_handle_at", func(childEnv) string {
			_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
			return result(err)
		}, "EPERM", "", differs, ""},
		{"fanotify_init", func(childEnv) string {
			return fdResult(unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC, unix.O_RDONLY))
		}, "EPERM", "", "ok", ""},
		{"syslog size", func(childEnv) string {
			_, err := unix.Klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, nil)
			return result(err)
		}, "EPERM", "", "ok", ""},
		{"adjtimex read", func(childEnv) string {
			_, err := unix.Adjtimex(&unix.Timex{})
			return result(err)
		}, "EPERM", "", "ok", ""},
		{"swapoff", func(childEnv) string {
			p, _ := unix.BytePtrFromString("/nonexistent-cordon")
			return errnoResult(sys(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(p))))
		}, "EPERM", "", "ENOENT", ""},
		{"personality ADDR_NO_RANDOMIZE", func(childEnv) string {
			r := errnoResult(sys(unix.SYS_PERSONALITY, 0x0040000))
			sys(unix.SYS_PERSONALITY, 0) // back to PER_LINUX, allowed either way
			return r
		}, "EPERM", "", "ok", ""},
		{"personality query", func(childEnv) string { return errnoResult(sys(unix.SYS_PERSONALITY, 0xffffffff)) }, "ok", "", "ok", ""},

		// The terminal. TIOCSTI is refused on every form of the command; TIOCLINUX only exists on consoles.
		{"ioctl TIOCSTI on a pty", func(childEnv) string { return onPty(unix.TIOCSTI) }, "EPERM", "", "ok", ""},
		{"ioctl 0x100005412 (TIOCSTI + high bit) on a pty", func(childEnv) string { return onPty(1<<32 | unix.TIOCSTI) }, "EPERM", "", "ok", ""},
		{"ioctl TIOCLINUX on a pty", func(childEnv) string { return onPty(unix.TIOCLINUX) }, "EPERM", "", differs, ""},
		{"ioctl TCGETS on a pty", func(childEnv) string { return onPty(unix.TCGETS) }, "ok", "", "ok", ""},

		// Sockets.
		{"socket AF_PACKET", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0x0300 /* htons(ETH_P_ALL) */))
		}, "EAFNOSUPPORT", "", "ok", ""},
		// Families the allowlist refuses: without the filter each works where the kernel has it
		// (vsock in a VM, XDP, AF_ALG with the crypto API), else the host cannot show anything.
		{"socket AF_VSOCK stream", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0))
		}, "EAFNOSUPPORT", "", "ok", "EAFNOSUPPORT"},
		{"socket AF_VSOCK seqpacket", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_VSOCK, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0))
		}, "EAFNOSUPPORT", "", "ok", "EAFNOSUPPORT"},
		{"socket AF_XDP", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0))
		}, "EAFNOSUPPORT", "", "ok", "EAFNOSUPPORT"},
		{"socket AF_ALG", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0))
		}, "EAFNOSUPPORT", "", "ok", "EAFNOSUPPORT"},
		{"socket AF_KEY", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_KEY, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 2 /* PF_KEY_V2 */))
		}, "EAFNOSUPPORT", "", "ok", "EAFNOSUPPORT"},
		{"socket NETLINK_NETFILTER", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER))
		}, "EPROTONOSUPPORT", "", "ok", "EPROTONOSUPPORT"},
		{"socket NETLINK_GENERIC", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC))
		}, "EPROTONOSUPPORT", "", "ok", "EPROTONOSUPPORT"},
		{"socket NETLINK_AUDIT", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT))
		}, "EPROTONOSUPPORT", "", "ok", "EPROTONOSUPPORT"},
		{"socket NETLINK_KOBJECT_UEVENT", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT))
		}, "EPROTONOSUPPORT", "", "ok", "EPROTONOSUPPORT"},
		{"socket AF_INET IPPROTO_SMC", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SMC))
		}, "EPERM", "", "ok", "EPROTONOSUPPORT"},
		{"socket AF_INET SOCK_RAW|SOCK_NONBLOCK", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, unix.IPPROTO_ICMP))
		}, "EPERM", "", "ok", ""},
		{"socket AF_INET SOCK_PACKET", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_INET, unix.SOCK_PACKET, 0x0300))
		}, "EPERM", "", "ok", ""},
		{"socket AF_INET MPTCP", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP))
		}, "EPERM", "", differs, ""},
		{"socket AF_INET6 MPTCP", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP))
		}, "EPERM", "", differs, ""},
		{"socketpair AF_INET SOCK_RAW", func(childEnv) string {
			_, err := unix.Socketpair(unix.AF_INET, unix.SOCK_RAW, 0)
			return result(err)
		}, "EPERM", "", differs, ""},

		// Ordinary work must go on under the filter.
		{"socket AF_NETLINK SOCK_RAW (getifaddrs)", func(childEnv) string {
			_, err := net.Interfaces()
			return result(err)
		}, "ok", "", "ok", ""},
		{"socket NETLINK_SOCK_DIAG (ss)", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG))
		}, "ok", "", "ok", ""},
		{"socket AF_INET6 UDP", func(childEnv) string {
			return fdResult(unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0))
		}, "ok", "", "ok", ""},
		{"socket AF_UNIX + socketpair", func(childEnv) string {
			if _, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
				return result(err)
			}
			_, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			return result(err)
		}, "ok", "", "ok", ""},
		{"TCP over loopback", func(childEnv) string { return result(tcpRoundTrip()) }, "ok", "", "ok", ""},
		{"pipe", func(childEnv) string { return result(pipeRoundTrip()) }, "ok", "", "ok", ""},
		{"exec /bin/true", func(childEnv) string { return runResult(nil, "/bin/true") }, "ok", "", "ok", ""},
		{"fork in sh", func(childEnv) string { return runResult(nil, "/bin/sh", "-c", "/bin/true & wait $!") }, "ok", "", "ok", ""},
		{"posix_spawn in awk (clone3 then clone)", func(childEnv) string {
			return runResult(nil, "awk", `BEGIN { exit system("/bin/true") }`)
		}, "ok", "", "ok", ""},
		{"ptrace PTRACE_TRACEME child", func(childEnv) string { return result(traceOwnChild()) }, "ok", "", "ok", ""},
	}
	return append(list, archAttempts()...)
}

// TestKernel runs every attempt in a child under the filter, under the nesting filter, and without a
// filter, and checks each result. It needs root: only then do the attacks succeed without the filter,
// which is what shows the filter, and not a missing privilege, stopped them.
func TestKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to show each attack works without the filter")
	}
	results := map[string]map[string]string{}
	for _, mode := range []string{"filter", "filter-nesting", "nofilter"} {
		results[mode] = runChild(t, mode)
	}
	for _, a := range attempts() {
		t.Run(a.name, func(t *testing.T) {
			filtered, nested, without := results["filter"][a.name], results["filter-nesting"][a.name], results["nofilter"][a.name]
			t.Logf("filter: %s, nesting: %s, no filter: %s", filtered, nested, without)
			if a.hostLacks != "" && without == a.hostLacks {
				t.Skipf("without the filter the call already fails with %s: this host cannot make it", without)
			}
			if filtered != a.want {
				t.Errorf("under the filter: got %s, want %s", filtered, a.want)
			}
			wantNested := a.nested
			if wantNested == "" {
				wantNested = a.want
			}
			if nested != wantNested {
				t.Errorf("under the nesting filter: got %s, want %s", nested, wantNested)
			}
			switch {
			case a.without == differs && without == a.want:
				t.Errorf("without the filter: got %s as well, so this attempt cannot show the filter works", without)
			case a.without != differs && without != a.without:
				t.Errorf("without the filter: got %s, want %s", without, a.without)
			}
		})
	}
}

// TestInstallAllOrNothing makes TSYNC fail (a thread with a filter of its own) and checks that Install
// reports it and that no thread got the filter.
func TestInstallAllOrNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to show keyctl works when the filter is not installed")
	}
	got := runChild(t, "tsync-conflict")
	if got["own filter on old thread"] != "ok" {
		t.Fatalf("setting up the conflicting thread: %s", got["own filter on old thread"])
	}
	if !strings.Contains(got["install"], "cannot be synchronized") {
		t.Errorf("Install: got %q, want an error naming the thread that cannot be synchronized", got["install"])
	}
	if got["keyctl"] != "ok" {
		t.Errorf("keyctl after the failed Install: got %s, want ok (nothing installed)", got["keyctl"])
	}
}

// TestInstallUnprivileged installs the filter in a child running as nobody, as the sandbox's init does
// when cordon runs rootless: without CAP_SYS_ADMIN the kernel accepts a filter only under
// no_new_privs, which Install sees to. keyctl on its own keyring works for nobody without a filter.
func TestInstallUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to switch the child to nobody")
	}
	got := runChildAs(t, "filter", &syscall.Credential{Uid: 65534, Gid: 65534})
	for name, want := range map[string]string{"keyctl": "EPERM", "ioctl TIOCSTI on a pty": "EPERM", "exec /bin/true": "ok"} {
		if got[name] != want {
			t.Errorf("%s as nobody under the filter: got %s, want %s", name, got[name], want)
		}
	}
}

// runChild re-executes the test binary in mode, in a private mount namespace, with two sibling
// processes to attack, and returns its results.
func runChild(t *testing.T, mode string) map[string]string {
	t.Helper()
	return runChildAs(t, mode, nil)
}

// runChildAs is runChild with the child running as cred; a nil cred keeps root and gives the child a
// private mount namespace, so the unfiltered mount attempts change nothing outside it.
func runChildAs(t *testing.T, mode string, cred *syscall.Credential) map[string]string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeTestBinaries(dir); err != nil {
		t.Fatal(err)
	}
	siblings := []string{startSibling(t), startSibling(t)}

	binary := os.Args[0]
	attr := &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if cred != nil {
		// The test binary lives in a private build directory; give the child a copy it can run.
		binary = filepath.Join(dir, "seccomp.test")
		if err := copyExecutable(os.Args[0], binary); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir makes both 0700
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		attr = &syscall.SysProcAttr{Credential: cred}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "-test.run=^$")
	cmd.Env = append(os.Environ(), envMode+"="+mode, envSiblings+"="+strings.Join(siblings, ","), envDir+"="+dir)
	cmd.SysProcAttr = attr
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child %s: %v\nstderr:\n%s", mode, err, stderr.String())
	}
	var results map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil {
		t.Fatalf("child %s: %v\nstdout:\n%s\nstderr:\n%s", mode, err, stdout.String(), stderr.String())
	}
	return results
}

func copyExecutable(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// startSibling starts a process the child did not start, for it to try to trace.
func startSibling(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return strconv.Itoa(cmd.Process.Pid)
}

// sys makes a raw system call.
func sys(nr uintptr, args ...uintptr) (uintptr, syscall.Errno) {
	var a [6]uintptr
	copy(a[:], args)
	r, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	return r, errno
}

// result renders an error as the child reports it: "ok", an errno name, or how a program ended.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + unix.SignalName(ws.Signal())
		}
		return fmt.Sprintf("exit %d", exit.ExitCode())
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errnoResult(0, errno)
	}
	return err.Error()
}

func errnoResult(_ uintptr, errno syscall.Errno) string {
	if errno == 0 {
		return "ok"
	}
	if name := unix.ErrnoName(errno); name != "" {
		return name
	}
	return fmt.Sprintf("errno %d", int(errno))
}

func closeResult(fd uintptr, errno syscall.Errno) string {
	if errno == 0 {
		unix.Close(int(fd))
	}
	return errnoResult(fd, errno)
}

func fdResult(fd int, err error) string {
	if err == nil {
		unix.Close(fd)
	}
	return result(err)
}

// runResult runs a program to completion with the given attributes.
func runResult(attr *syscall.SysProcAttr, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = attr
	return result(cmd.Run())
}

func attemptKeyctl(childEnv) string {
	_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_PROCESS_KEYRING, 1, 0, 0)
	return result(err)
}

// onPty opens a new pseudo-terminal pair and issues ioctl(slave, cmd, &'x').
func onPty(cmd uint64) string {
	master, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open /dev/ptmx: " + result(err)
	}
	defer unix.Close(master)
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		return "unlockpt: " + result(err)
	}
	n, err := unix.IoctlGetInt(master, unix.TIOCGPTN)
	if err != nil {
		return "ptsname: " + result(err)
	}
	slave, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open slave: " + result(err)
	}
	defer unix.Close(slave)
	var buf [64]byte // 'x' for TIOCSTI, room for the termios TCGETS writes
	buf[0] = 'x'
	return errnoResult(sys(unix.SYS_IOCTL, uintptr(slave), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0]))))
}

func tcpRoundTrip() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(c, c)
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != "ping" {
		return fmt.Errorf("echo: got %q", got)
	}
	return nil
}

func pipeRoundTrip() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := w.Write([]byte("data")); err != nil {
		return err
	}
	w.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if string(got) != "data" {
		return fmt.Errorf("pipe: got %q", got)
	}
	return nil
}

// traceOwnChild starts /bin/true under PTRACE_TRACEME (as debuggers do), lets it go and waits for it.
func traceOwnChild() error {
	runtime.LockOSThread() // the tracer is this thread
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil {
		return fmt.Errorf("wait for exec stop: %w", err)
	}
	if !ws.Stopped() {
		return fmt.Errorf("child not stopped after exec: %v", ws)
	}
	if err := unix.PtraceDetach(cmd.Process.Pid); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	return cmd.Wait()
}
