//go:build linux

package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// listenBacklog is the accept queue asked for. The gateway must absorb bursts of thousands of new
// connections (an agent's test suite, a package manager's parallel fetches): a full accept queue
// drops the SYN, and the client waits a second or more to retry. The kernel caps the backlog at
// net.core.somaxconn of the namespace the socket lives in, which a new namespace starts at the
// kernel default (4096), so Listeners raises it there first (raiseSomaxconn).
const listenBacklog = 65535

// somaxconnPath shows net.core.somaxconn of the namespace of the thread that opens it.
const somaxconnPath = "/proc/sys/net/core/somaxconn"

// raiseSomaxconn lifts net.core.somaxconn of the calling thread's network namespace to
// listenBacklog if it is lower. It changes that namespace only (the sandbox's, never the host's), and
// failing is not fatal: the listeners then get the namespace's cap, which delays bursts but refuses
// nothing.
func raiseSomaxconn() {
	b, err := os.ReadFile(somaxconnPath)
	if err != nil {
		return
	}
	if cur, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && cur >= listenBacklog {
		return
	}
	_ = os.WriteFile(somaxconnPath, []byte(strconv.Itoa(listenBacklog)), 0)
}

// socketRole is what a socket Listeners creates is for.
type socketRole int

const (
	roleTransparent socketRole = iota
	roleProxy
	roleDNSTCP
	roleDNSUDP
)

// socketSpec is one socket Listeners creates.
type socketSpec struct {
	role socketRole
	port uint16
}

// madeSocket is a socket made, not yet handed to the runtime.
type madeSocket struct {
	spec socketSpec
	fd   int
	addr netip.Addr
}

// Listeners creates, inside the network namespace at nsPath (/proc/<pid>/ns/net of the sandbox's
// init, say), the gateway's sockets: TCP listeners for the transparent path and the explicit proxy,
// and TCP and UDP sockets for DNS, on 127.0.0.1 and, if the namespace has IPv6 loopback, on ::1. Only
// the socket calls run inside the namespace, on a locked OS thread that enters it with setns and is
// verified to have returned (or is discarded). Loopback must be up in the namespace.
//
// The sockets do not set SO_REUSEADDR or SO_REUSEPORT, so nothing in the sandbox can bind the same
// address and port beside them.
func Listeners(nsPath string, ports sandbox.EgressPorts) (*sandbox.Listeners, error) {
	if err := ports.Validate(); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	nsFD, err := openNetNS(nsPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(nsFD) }()

	var fds []madeSocket
	err = inNetNS(nsFD, func() error {
		var err error
		fds, err = makeSockets(ports)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns: listeners in %s: %w", nsPath, err)
	}
	return wrapSockets(fds)
}

// ListenersHere is Listeners in the calling process's own network namespace, for a process that
// runs in the namespace it serves (a Kubernetes pod's sidecar, which may not setns; the sandbox's
// init, the namespace's first process): the same sockets, made the same way.
func ListenersHere(ports sandbox.EgressPorts) (*sandbox.Listeners, error) {
	if err := ports.Validate(); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	fds, err := makeSockets(ports)
	if err != nil {
		return nil, fmt.Errorf("netns: listeners in this namespace: %w", err)
	}
	return wrapSockets(fds)
}

// makeSockets makes the gateway's sockets in the calling thread's network namespace; on an error it
// closes what it made.
func makeSockets(ports sandbox.EgressPorts) ([]madeSocket, error) {
	specs := []socketSpec{
		{roleTransparent, ports.Transparent},
		{roleProxy, ports.Proxy},
		{roleDNSTCP, ports.DNS},
		{roleDNSUDP, ports.DNS},
	}
	raiseSomaxconn()
	var fds []madeSocket
	for _, addr := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
		var family []madeSocket
		for _, spec := range specs {
			fd, err := loopbackSocket(addr, spec.port, spec.role == roleDNSUDP)
			if addr.Is6() && len(family) == 0 && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL)) {
				// No IPv6 in this namespace, or no ::1 on lo: the sandbox cannot reach ::1 either.
				break
			}
			if err != nil {
				for _, m := range append(fds, family...) {
					_ = unix.Close(m.fd)
				}
				return nil, err
			}
			family = append(family, madeSocket{spec, fd, addr})
		}
		fds = append(fds, family...)
	}
	return fds, nil
}

// wrapSockets hands the raw sockets to the runtime (outside the namespace, for Listeners):
// net.FileListener duplicates the descriptor and gives it to the runtime's poller; the namespace
// travels with the socket. It consumes fds, also on an error.
func wrapSockets(fds []madeSocket) (*sandbox.Listeners, error) {
	set := &sandbox.Listeners{}
	for i, m := range fds {
		f := os.NewFile(uintptr(m.fd), fmt.Sprintf("cordon-gateway-%s", netip.AddrPortFrom(m.addr, m.spec.port)))
		var err error
		if m.spec.role == roleDNSUDP {
			var c net.PacketConn
			if c, err = net.FilePacketConn(f); err == nil {
				set.DNSUDP = append(set.DNSUDP, c)
			}
		} else {
			var l net.Listener
			if l, err = net.FileListener(f); err == nil {
				switch m.spec.role {
				case roleTransparent:
					set.Transparent = append(set.Transparent, l)
				case roleProxy:
					set.Proxy = append(set.Proxy, l)
				default:
					set.DNSTCP = append(set.DNSTCP, l)
				}
			}
		}
		_ = f.Close()
		if err != nil {
			for _, rest := range fds[i+1:] {
				_ = unix.Close(rest.fd)
			}
			_ = set.Close()
			return nil, fmt.Errorf("netns: wrap socket %s: %w", netip.AddrPortFrom(m.addr, m.spec.port), err)
		}
	}
	return set, nil
}

// loopbackSocket creates a socket bound to addr:port (listening, for TCP) in the calling thread's
// network namespace, using raw system calls so that nothing can move the work to another thread.
func loopbackSocket(addr netip.Addr, port uint16, udp bool) (int, error) {
	family, typ := unix.AF_INET, unix.SOCK_STREAM
	if addr.Is6() {
		family = unix.AF_INET6
	}
	if udp {
		typ = unix.SOCK_DGRAM
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("socket for %s: %w", netip.AddrPortFrom(addr, port), err)
	}
	var sa unix.Sockaddr
	if addr.Is6() {
		// Never dual-stack: the IPv4 socket is separate, and the gateway picks the option that reads
		// the original destination by the socket's family.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("IPV6_V6ONLY on %s: %w", netip.AddrPortFrom(addr, port), err)
		}
		sa = &unix.SockaddrInet6{Port: int(port), Addr: addr.As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(port), Addr: addr.As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("bind %s (is loopback up?): %w", netip.AddrPortFrom(addr, port), err)
	}
	if !udp {
		if err := unix.Listen(fd, listenBacklog); err != nil {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("listen on %s: %w", netip.AddrPortFrom(addr, port), err)
		}
	}
	return fd, nil
}
