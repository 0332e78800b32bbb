//go:build linux

package inpod

import (
	"errors"
	"fmt"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/netns"
)

// installPod installs the pod's rules in this process's network namespace (see installPodWith).
func installPod(ports sandbox.EgressPorts, gatewayUID uint32) (how string, why, err error) {
	return installPodWith(ports, gatewayUID, netns.InstallPod, netns.InstallPodXT)
}

// installPodWith installs the rules with nft, and only where that fails because the network stack
// has no nf_tables at all (netns.ErrNoNFTables: gVisor's netstack) with xt, the same rules in
// xtables. It says which ("nftables" or "xtables") and, for xtables, why (nft's error). Any other
// failure of nft is the failure: a namespace with nf_tables that cannot take the rules is not one to
// try something else in.
func installPodWith(ports sandbox.EgressPorts, gatewayUID uint32, nft, xt func(sandbox.EgressPorts, uint32) error) (how string, why, err error) {
	nerr := nft(ports, gatewayUID)
	switch {
	case nerr == nil:
		return "nftables", nil, nil
	case !errors.Is(nerr, netns.ErrNoNFTables):
		return "", nil, nerr
	}
	if xerr := xt(ports, gatewayUID); xerr != nil {
		return "", nil, fmt.Errorf("%w; and in xtables instead: %w", nerr, xerr)
	}
	return "xtables", nerr, nil
}

// listenHere makes the gateway's sockets on this namespace's loopback.
func listenHere(ports sandbox.EgressPorts) (*sandbox.Listeners, error) {
	return netns.ListenersHere(ports)
}
