//go:build !linux

package inpod

import (
	"errors"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// errNotLinux is what the pod's pieces say on a system that runs no Kubernetes pod.
var errNotLinux = errors.New("the pod's setup and gateway run on Linux only")

func installPod(sandbox.EgressPorts, uint32) (string, error, error) { return "", nil, errNotLinux }

func listenHere(sandbox.EgressPorts) (*sandbox.Listeners, error) { return nil, errNotLinux }
