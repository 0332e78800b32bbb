package origdst

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h, which
// golang.org/x/sys does not define.
const ip6tSOOriginalDst = 80

// Of returns where a connection accepted on the transparent listener was going before the
// sandbox's nftables rules redirected it: the kernel's connection tracking keeps the original
// destination, and the gateway needs it to know which name the sandbox meant (the address DNS handed
// out) and which port. It reads SO_ORIGINAL_DST for IPv4 and IP6T_SO_ORIGINAL_DST for IPv6, chosen by
// the socket's family (the listeners are never dual-stack). It asks a socket the gateway accepted,
// whichever backend made the listener.
//
// A connection made straight to the listener's own address was not redirected; its original
// destination is the listener itself (or, where connection tracking is not running, an error), which
// the gateway must treat like any other loopback target.
func Of(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("origdst: original destination: %T is not a *net.TCPConn", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: original destination: %w", err)
	}
	var dst netip.AddrPort
	var optErr error
	err = raw.Control(func(fd uintptr) {
		// The socket's own family decides, not the printed form of its address.
		switch domain, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN); {
		case err != nil:
			optErr = fmt.Errorf("getsockopt SO_DOMAIN: %w", err)
		case domain == unix.AF_INET:
			dst, optErr = origDst4(int(fd))
		case domain == unix.AF_INET6:
			dst, optErr = origDst6(int(fd))
		default:
			optErr = fmt.Errorf("socket family %d is neither IPv4 nor IPv6", domain)
		}
	})
	if err == nil {
		err = optErr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: original destination of %v: %w", tc.RemoteAddr(), err)
	}
	return dst, nil
}

func origDst4(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet4
	if err := getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", err)
	}
	if sa.Family != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST returned family %d", sa.Family)
	}
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), netPort(sa.Port)), nil
}

func origDst6(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	if err := getsockopt(fd, unix.SOL_IPV6, ip6tSOOriginalDst, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt IP6T_SO_ORIGINAL_DST: %w", err)
	}
	if sa.Family != unix.AF_INET6 {
		return netip.AddrPort{}, fmt.Errorf("IP6T_SO_ORIGINAL_DST returned family %d", sa.Family)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), netPort(sa.Port)), nil
}

// netPort converts a sockaddr's port, stored in network byte order, to a number.
func netPort(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

// getsockopt reads a socket option of arbitrary size, which unix.Getsockopt* do not offer for the
// sockaddr that SO_ORIGINAL_DST fills.
func getsockopt(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
