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

// socketSpec is one socket Listeners creates.
type socketSpec struct {
	udp  bool
	port uint16
	role *[]net.Listener // nil for the UDP socket
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

	set := &sandbox.Listeners{}
	specs := []socketSpec{
		{port: ports.Transparent, role: &set.Transparent},
		{port: ports.Proxy, role: &set.Proxy},
		{port: ports.DNS, role: &set.DNSTCP},
		{port: ports.DNS, udp: true},
	}
	type made struct {
		spec socketSpec
		fd   int
		addr netip.Addr
	}
	var fds []made
	closeFDs := func() {
		for _, m := range fds {
			_ = unix.Close(m.fd)
		}
	}
	err = inNetNS(nsFD, func() error {
		raiseSomaxconn()
		for _, addr := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
			var family []made
			for _, spec := range specs {
				fd, err := loopbackSocket(addr, spec.port, spec.udp)
				if addr.Is6() && len(family) == 0 && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL)) {
					// No IPv6 in this namespace, or no ::1 on lo: the sandbox cannot reach ::1 either.
					break
				}
				if err != nil {
					for _, m := range family {
						_ = unix.Close(m.fd)
					}
					return err
				}
				family = append(family, made{spec, fd, addr})
			}
			fds = append(fds, family...)
		}
		return nil
	})
	if err != nil {
		closeFDs()
		return nil, fmt.Errorf("netns: listeners in %s: %w", nsPath, err)
	}

	// Wrap the raw sockets outside the namespace: net.FileListener duplicates the descriptor and hands it
	// to the runtime's poller; the namespace travels with the socket.
	for i, m := range fds {
		f := os.NewFile(uintptr(m.fd), fmt.Sprintf("cordon-gateway-%s", netip.AddrPortFrom(m.addr, m.spec.port)))
		var err error
		if m.spec.udp {
			var c net.PacketConn
			if c, err = net.FilePacketConn(f); err == nil {
				set.DNSUDP = append(set.DNSUDP, c)
			}
		} else {
			var l net.Listener
			if l, err = net.FileListener(f); err == nil {
				*m.spec.role = append(*m.spec.role, l)
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
