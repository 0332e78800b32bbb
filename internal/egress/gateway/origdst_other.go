//go:build !linux

package gateway

import (
	"errors"
	"net"
	"net/netip"
)

// origDst has no connection tracking to ask on this platform: the transparent path is Linux's (its
// nftables redirect), and a backend elsewhere sends the sandbox's traffic through the explicit proxy.
func origDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("gateway: the original destination of a redirected connection is known on Linux only")
}
