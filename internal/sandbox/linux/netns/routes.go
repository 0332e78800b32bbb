//go:build linux

package netns

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// loopbackIndex is the interface index of lo, the same in every network namespace (LOOPBACK_IFINDEX in
// the kernel since Linux 3.13).
const loopbackIndex = 1

// routeThroughLoopback brings lo up and makes lo the default route for IPv4 and IPv6 in the namespace.
// A namespace with loopback only has no route to 198.18.0.5, so connect() would fail with ENETUNREACH
// before the packet reached nftables; with these routes every packet leaves its socket, passes the
// output hook (where the rules redirect or drop it), and can only ever arrive back on lo. The routes
// lead nowhere by themselves: a packet that were not redirected is dropped by the filter chain, and
// even without it, lo only delivers to this namespace.
//
// It runs after the rules are verified, so that an install that fails leaves the namespace without
// routes (every outside connect fails at once). A namespace without IPv6 (disabled, or no ::1) gets no
// IPv6 route; IPv6 connects then fail with ENETUNREACH, which is closed too.
func routeThroughLoopback(nsFD int) error {
	cfg := &netlink.Config{}
	if nsFD >= 0 {
		cfg.NetNS = nsFD
	}
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		return fmt.Errorf("rtnetlink: %w", err)
	}
	defer func() { _ = conn.Close() }()

	// ifinfomsg: family, pad, type, index, flags, change.
	link := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(link[4:], loopbackIndex)
	binary.NativeEndian.PutUint32(link[8:], unix.IFF_UP)
	binary.NativeEndian.PutUint32(link[12:], unix.IFF_UP)
	if _, err := conn.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_NEWLINK, Flags: netlink.Request | netlink.Acknowledge},
		Data:   link,
	}); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}

	// A non-loopback address of each family, so that resolvers asked with AI_ADDRCONFIG (getent
	// ahostsv4, many daemons and CLIs) see the family as configured and ask the gateway's DNS at all.
	// Both are documentation addresses: nothing real is reachable through them, and a connection to
	// them is redirected to the gateway like any other and refused as an address it never handed out.
	if err := addLoopbackAddress(conn, unix.AF_INET, []byte{192, 0, 2, 1}, 32); err != nil {
		return fmt.Errorf("IPv4 address on lo: %w", err)
	}
	if err := addLoopbackAddress(conn, unix.AF_INET6, []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}, 128); err != nil &&
		!errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EAFNOSUPPORT) && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("IPv6 address on lo: %w", err)
	}

	// IPv4's route names its source, so that the kernel does not choose: the documentation address
	// above, not 127.0.0.1. With a loopback source, RFC 6724's rule 2 (matching scope) makes glibc's
	// and Go's resolvers sort a name's IPv6 address first, and IPv6 through the redirect costs each
	// connection more (bench/RESULTS.md, "Connection rate and the IPv4 source"). No rule matches a
	// source address (they match destinations, protocols, interfaces, states), and the redirect
	// rewrites only the destination: the gateway sees 192.0.2.1 as the peer and decides nothing by it.
	if err := defaultRoute(conn, unix.AF_INET, unix.RT_SCOPE_LINK, []byte{192, 0, 2, 1}); err != nil {
		return fmt.Errorf("IPv4 default route via lo: %w", err)
	}
	if err := defaultRoute(conn, unix.AF_INET6, unix.RT_SCOPE_UNIVERSE, nil); err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL) {
			return nil // IPv6 is off in this namespace
		}
		return fmt.Errorf("IPv6 default route via lo: %w", err)
	}
	return nil
}

// addLoopbackAddress adds (or replaces) addr/prefixlen on lo.
func addLoopbackAddress(conn *netlink.Conn, family byte, addr []byte, prefixlen byte) error {
	// ifaddrmsg: family, prefixlen, flags, scope, index.
	ifa := make([]byte, unix.SizeofIfAddrmsg)
	ifa[0], ifa[1], ifa[2], ifa[3] = family, prefixlen, unix.IFA_F_NODAD, unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(ifa[4:], loopbackIndex)
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(unix.IFA_LOCAL, addr)
	ae.Bytes(unix.IFA_ADDRESS, addr)
	attrs, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("encode address: %w", err)
	}
	_, err = conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  unix.RTM_NEWADDR,
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace,
		},
		Data: append(ifa, attrs...),
	})
	return err
}

// defaultRoute adds (or replaces) "default dev lo [src prefsrc]" for one family in the main table.
func defaultRoute(conn *netlink.Conn, family byte, scope byte, prefsrc []byte) error {
	// rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
	rt := make([]byte, unix.SizeofRtMsg)
	rt[0] = family
	rt[4] = unix.RT_TABLE_MAIN
	rt[5] = unix.RTPROT_STATIC
	rt[6] = scope
	rt[7] = unix.RTN_UNICAST
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(unix.RTA_OIF, loopbackIndex)
	if prefsrc != nil {
		ae.Bytes(unix.RTA_PREFSRC, prefsrc)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("encode route: %w", err)
	}
	_, err = conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  unix.RTM_NEWROUTE,
			Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Replace,
		},
		Data: append(rt, attrs...),
	})
	return err
}
