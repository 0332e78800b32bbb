//go:build linux

// Package nstest makes throwaway network namespaces for tests that must see real packets meet real
// rules: a "pod" and an "outside" joined by a veth pair, as a Kubernetes pod is joined to its node,
// with processes run inside as any uid. Nothing of the host's network is touched: every namespace
// is new, and every address is one of the private or documentation ranges. It needs root and is
// imported by tests only.
//
// A test binary that runs commands inside (NS.Command) must call Main first thing in its TestMain:
// the command is the test binary itself re-executed, which enters the namespace, takes the uid and
// executes the program on the same thread.
package nstest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Environment of the re-executed test binary (Main).
const (
	envExec = "CORDON_NSTEST_EXEC" // the namespace's path: enter it, then execute argv
	envUID  = "CORDON_NSTEST_UID"
	envGID  = "CORDON_NSTEST_GID"
)

// RequireRoot skips the test unless it runs as root, which making namespaces needs.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and programs them")
	}
}

// NS is a network namespace the test made; it lives as long as the test (its descriptor is held).
type NS struct {
	// Path names it for setns and for other processes (/proc/PID/fd/N of the test process).
	Path string
	fd   int
}

// FD is the namespace's descriptor, open until the test ends.
func (n *NS) FD() int { return n.fd }

// New makes a network namespace with loopback up, closed when the test ends.
func New(t testing.TB) *NS {
	t.Helper()
	RequireRoot(t)
	fd := -1
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var err error
		fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		t.Fatalf("nstest: new namespace: %v", err)
	}
	n := &NS{Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), fd: fd}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := n.linkUp("lo"); err != nil {
		t.Fatalf("nstest: lo up: %v", err)
	}
	return n
}

// onThread runs fn on a locked OS thread and puts the thread back into the network namespace it
// came from; a thread that cannot be put back is never unlocked, so the runtime ends it.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer func() { _ = unix.Close(orig) }()
		err = fn()
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			errc <- errors.Join(err, fmt.Errorf("return to the original namespace: %w", rerr))
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Do runs fn on a thread inside the namespace: sockets fn makes live there (and stay there after).
// fn must not hand work to other goroutines that needs the namespace.
func (n *NS) Do(fn func() error) error {
	return onThread(func() error {
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		return fn()
	})
}

// Link is one end of a veth pair: its name and addresses (with their prefixes) in its namespace.
type Link struct {
	Name  string
	Addrs []netip.Prefix
	// Gateways, if set, become default routes through this link (one per family).
	Gateways []netip.Addr
}

// Veth joins a and b with a veth pair, gives each end its addresses and routes, and brings both up.
// IPv6 addresses skip duplicate address detection, so they are usable at once.
func Veth(t testing.TB, a *NS, la Link, b *NS, lb Link) {
	t.Helper()
	peer := make([]byte, unix.SizeofIfInfomsg)
	pae := netlink.NewAttributeEncoder()
	pae.String(unix.IFLA_IFNAME, lb.Name)
	pae.Uint32(unix.IFLA_NET_NS_FD, uint32(b.fd))
	pattrs, err := pae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, la.Name)
	ae.Nested(unix.IFLA_LINKINFO, func(nae *netlink.AttributeEncoder) error {
		nae.String(unix.IFLA_INFO_KIND, "veth")
		nae.Nested(unix.IFLA_INFO_DATA, func(dae *netlink.AttributeEncoder) error {
			dae.Bytes(1 /* VETH_INFO_PEER */, append(peer, pattrs...))
			return nil
		})
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.route(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_NEWLINK, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl},
		Data:   append(make([]byte, unix.SizeofIfInfomsg), attrs...),
	}); err != nil {
		t.Fatalf("nstest: veth %s/%s: %v", la.Name, lb.Name, err)
	}
	for _, end := range []struct {
		ns *NS
		l  Link
	}{{a, la}, {b, lb}} {
		if err := end.ns.configure(end.l); err != nil {
			t.Fatalf("nstest: configure %s: %v", end.l.Name, err)
		}
	}
}

// configure gives l its addresses, brings it up and adds its default routes.
func (n *NS) configure(l Link) error {
	idx, err := n.index(l.Name)
	if err != nil {
		return err
	}
	for _, p := range l.Addrs {
		family := byte(unix.AF_INET)
		if p.Addr().Is6() {
			family = unix.AF_INET6
		}
		ifa := make([]byte, unix.SizeofIfAddrmsg)
		ifa[0], ifa[1], ifa[2], ifa[3] = family, byte(p.Bits()), unix.IFA_F_NODAD, unix.RT_SCOPE_UNIVERSE
		binary.NativeEndian.PutUint32(ifa[4:], uint32(idx))
		ae := netlink.NewAttributeEncoder()
		ae.Bytes(unix.IFA_LOCAL, p.Addr().AsSlice())
		ae.Bytes(unix.IFA_ADDRESS, p.Addr().AsSlice())
		ae.Uint32(unix.IFA_FLAGS, unix.IFA_F_NODAD)
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		if err := n.route(netlink.Message{
			Header: netlink.Header{Type: unix.RTM_NEWADDR, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace},
			Data:   append(ifa, attrs...),
		}); err != nil {
			return fmt.Errorf("address %s: %w", p, err)
		}
	}
	if err := n.linkUp(l.Name); err != nil {
		return err
	}
	for _, gw := range l.Gateways {
		family := byte(unix.AF_INET)
		if gw.Is6() {
			family = unix.AF_INET6
		}
		rt := make([]byte, unix.SizeofRtMsg)
		rt[0], rt[4], rt[5], rt[6], rt[7] = family, unix.RT_TABLE_MAIN, unix.RTPROT_STATIC, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST
		ae := netlink.NewAttributeEncoder()
		ae.Bytes(unix.RTA_GATEWAY, gw.AsSlice())
		ae.Uint32(unix.RTA_OIF, uint32(idx))
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		if err := n.route(netlink.Message{
			Header: netlink.Header{Type: unix.RTM_NEWROUTE, Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace},
			Data:   append(rt, attrs...),
		}); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

// index returns the interface index of name inside the namespace.
func (n *NS) index(name string) (int, error) {
	var idx int
	err := n.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err == nil {
			idx = ifi.Index
		}
		return err
	})
	return idx, err
}

// linkUp sets IFF_UP on name inside the namespace.
func (n *NS) linkUp(name string) error {
	idx, err := n.index(name)
	if err != nil {
		return err
	}
	link := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(link[4:], uint32(idx))
	binary.NativeEndian.PutUint32(link[8:], unix.IFF_UP)
	binary.NativeEndian.PutUint32(link[12:], unix.IFF_UP)
	return n.route(netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWLINK, Flags: netlink.Request | netlink.Acknowledge}, Data: link})
}

// route sends one rtnetlink request inside the namespace.
func (n *NS) route(m netlink.Message) error {
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: n.fd})
	if err != nil {
		return fmt.Errorf("rtnetlink: %w", err)
	}
	defer func() { _ = conn.Close() }()
	_, err = conn.Execute(m)
	return err
}

// Command returns a command that runs argv inside the namespace as uid and gid (no supplementary
// groups), through the test binary re-executed (Main). Root keeps its capabilities; any other uid
// has none, as setresuid leaves it.
func (n *NS) Command(ctx context.Context, uid, gid int, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], argv...)
	cmd.Env = append(os.Environ(), envExec+"="+n.Path, envUID+"="+strconv.Itoa(uid), envGID+"="+strconv.Itoa(gid),
		"GORACE=atexit_sleep_ms=0")
	return cmd
}

// Main is the re-executed test binary's side of Command: when the environment asks for it, it enters
// the namespace on this (locked) thread, takes the uid and gid and executes argv from the same
// thread, so that the program starts wholly inside. It returns only when not asked; on a failure it
// exits 126.
func Main() {
	path := os.Getenv(envExec)
	if path == "" {
		return
	}
	runtime.LockOSThread()
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "nstest: %s: %v\n", what, err)
		os.Exit(126)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fail("open namespace", err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		fail("setns", err)
	}
	_ = unix.Close(fd)
	uid, err1 := strconv.Atoi(os.Getenv(envUID))
	gid, err2 := strconv.Atoi(os.Getenv(envGID))
	if err := errors.Join(err1, err2); err != nil {
		fail("uid and gid", err)
	}
	// Go's setgroups, setresgid and setresuid act on every thread, as the kernel's do not.
	if err := syscall.Setgroups(nil); err != nil {
		fail("setgroups", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		fail("setresgid", err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		fail("setresuid", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envExec+"=") && !strings.HasPrefix(kv, envUID+"=") && !strings.HasPrefix(kv, envGID+"=") {
			env = append(env, kv)
		}
	}
	if len(os.Args) < 2 {
		fail("exec", errors.New("no program"))
	}
	prog, err := exec.LookPath(os.Args[1])
	if err != nil {
		fail("look up", err)
	}
	fail("execve", syscall.Exec(prog, os.Args[1:], env))
}

// Executable copies the test binary where any uid may execute it (the go tool builds it in a
// directory only root may enter) and returns the copy's path, removed when the test ends. Commands
// that run the test binary as another uid name it.
func Executable(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nstest-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
