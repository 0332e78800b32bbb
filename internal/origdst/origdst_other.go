//go:build !linux

package origdst

import (
	"errors"
	"net"
	"net/netip"
)

// Of has no connection tracking to ask on this platform: the transparent path is Linux's (its
// nftables redirect), and a backend elsewhere sends the sandbox's traffic through the explicit proxy.
func Of(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("origdst: the original destination of a redirected connection is known on Linux only")
}
