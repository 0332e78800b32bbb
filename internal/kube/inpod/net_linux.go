//go:build linux

package inpod

import (
	"errors"
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/netns"
)

// installPod installs the pod's rules in this process's network namespace.
func installPod(ports sandbox.EgressPorts, gatewayUID uint32) error {
	return netns.InstallPod(ports, gatewayUID)
}

// listenHere makes the gateway's sockets on this namespace's loopback. A gateway that is not root
// binds the DNS port only where the pod lowers net.ipv4.ip_unprivileged_port_start to it; the error
// says so.
func listenHere(ports sandbox.EgressPorts) (*sandbox.Listeners, error) {
	ls, err := netns.ListenersHere(ports)
	if errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("%w (a gateway that is not root needs the pod's sysctl net.ipv4.ip_unprivileged_port_start at most %d)", err, min(ports.DNS, ports.Proxy, ports.Transparent))
	}
	return ls, err
}
