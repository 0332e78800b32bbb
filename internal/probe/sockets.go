//go:build linux

package probe

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// socketProbes try the socket families and netlink protocols a coding agent never needs. Each is a
// way around the network boundary or kernel attack surface: vsock is not network-namespaced, so it
// reaches the hypervisor (CID 2) and other VMs around any netns and proxy; packet, XDP and the rest
// leave the IP path a gateway sees; netfilter and xfrm netlink administer the network stack. The
// probes only create sockets: a socket that opens is the finding, and nothing is sent anywhere.
func socketProbes() []Probe {
	return []Probe{
		{"net.vsock", Network, "open AF_VSOCK sockets (not network-namespaced: they reach the hypervisor around the gateway)", netVsock},
		{"proc.socket-families", Processes, "open sockets of families a sandbox never needs (packet, XDP, ALG, key, bluetooth, CAN, TIPC, RDS, ...)", procSocketFamilies},
		{"proc.netlink", Processes, "open netlink sockets beyond route and sock_diag (netfilter, xfrm, generic, audit, uevent, crypto)", procNetlink},
	}
}

// socketTry is one socket(2) call a probe makes.
type socketTry struct {
	name                  string
	family, typ, protocol int
}

// vsockTries are the vsock socket types; any one that opens could connect out of the sandbox.
var vsockTries = []socketTry{
	{"AF_VSOCK stream", unix.AF_VSOCK, unix.SOCK_STREAM, 0},
	{"AF_VSOCK seqpacket", unix.AF_VSOCK, unix.SOCK_SEQPACKET, 0},
	{"AF_VSOCK dgram", unix.AF_VSOCK, unix.SOCK_DGRAM, 0},
}

// familyTries are the other families. Where a kernel lacks a family it says EAFNOSUPPORT, which passes
// too: the sandbox cannot use what the kernel does not have.
var familyTries = []socketTry{
	{"AF_PACKET", unix.AF_PACKET, unix.SOCK_DGRAM, 0},
	{"AF_XDP", unix.AF_XDP, unix.SOCK_RAW, 0},
	{"AF_ALG", unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
	{"AF_KEY", unix.AF_KEY, unix.SOCK_RAW, 2 /* PF_KEY_V2 */},
	{"AF_BLUETOOTH", unix.AF_BLUETOOTH, unix.SOCK_RAW, 1 /* BTPROTO_HCI */},
	{"AF_CAN", unix.AF_CAN, unix.SOCK_RAW, 1 /* CAN_RAW */},
	{"AF_TIPC", unix.AF_TIPC, unix.SOCK_RDM, 0},
	{"AF_RDS", unix.AF_RDS, unix.SOCK_SEQPACKET, 0},
	{"AF_LLC", unix.AF_LLC, unix.SOCK_DGRAM, 0},
	{"AF_KCM", unix.AF_KCM, unix.SOCK_DGRAM, 0},
	{"AF_SMC", unix.AF_SMC, unix.SOCK_STREAM, 0},
	{"AF_QIPCRTR", unix.AF_QIPCRTR, unix.SOCK_DGRAM, 0},
	{"AF_MCTP", unix.AF_MCTP, unix.SOCK_DGRAM, 0},
	{"AF_INET IPPROTO_SMC", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SMC},
}

// netlinkTries are the netlink protocols beyond route (getaddrinfo, getifaddrs, ip) and sock_diag (ss).
var netlinkTries = []socketTry{
	{"NETLINK_NETFILTER", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER},
	{"NETLINK_XFRM", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM},
	{"NETLINK_GENERIC", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC},
	{"NETLINK_AUDIT", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT},
	{"NETLINK_KOBJECT_UEVENT", unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT},
	{"NETLINK_CRYPTO", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_CRYPTO},
}

func netVsock(_ context.Context, _ *Env) Verdict {
	return trySockets(vsockTries, "vsock is not network-namespaced: a connect would reach the hypervisor (CID 2) or other VMs, past the gateway")
}

func procSocketFamilies(_ context.Context, _ *Env) Verdict {
	return trySockets(familyTries, "these families bypass the IP path the gateway sees or open kernel code a sandbox never needs")
}

func procNetlink(_ context.Context, _ *Env) Verdict {
	return trySockets(netlinkTries, "these netlink protocols administer the network stack or expose kernel interfaces a sandbox never needs")
}

// trySockets creates (and at once closes) each socket; it fails naming every one that opened.
func trySockets(tries []socketTry, why string) Verdict {
	var opened, refused []string
	for _, s := range tries {
		fd, err := unix.Socket(s.family, s.typ|unix.SOCK_CLOEXEC, s.protocol)
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %s", s.name, errName(err)))
			continue
		}
		unix.Close(fd)
		opened = append(opened, s.name)
	}
	if len(opened) > 0 {
		return fail("opened %s sockets; %s", strings.Join(opened, ", "), why)
	}
	return pass("refused: %s", strings.Join(refused, "; "))
}

// errName names an error by its errno (EAFNOSUPPORT, EPERM), which says who refused.
func errName(err error) string {
	if e, ok := err.(unix.Errno); ok && unix.ErrnoName(e) != "" {
		return unix.ErrnoName(e)
	}
	return err.Error()
}
