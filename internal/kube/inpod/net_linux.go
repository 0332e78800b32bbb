//go:build linux

package inpod

import (
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/netns"
)

// installPod installs the pod's rules in this process's network namespace.
func installPod(ports sandbox.EgressPorts, gatewayUID uint32) error {
	return netns.InstallPod(ports, gatewayUID)
}

// listenHere makes the gateway's sockets on this namespace's loopback.
func listenHere(ports sandbox.EgressPorts) (*sandbox.Listeners, error) {
	return netns.ListenersHere(ports)
}
