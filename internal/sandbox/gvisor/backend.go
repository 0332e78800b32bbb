//go:build linux

package gvisor

import (
	"context"
	"errors"
	"os"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// Flags are runsc's global flags for every box, each for a reason:
//   - systrap: the platform that works without hardware virtualisation (kvm hangs where /dev/kvm
//     is emulated) and without ptrace;
//   - network=host: the Sentry uses the network namespace it runs in, which is the box's, with the
//     gateway's listeners and the redirect rules (gVisor's own netstack has its own loopback, which
//     the gateway's sockets are not on);
//   - overlay2=none: writes reach the host's mounts (the workspace overlay's upper layer that diff
//     and apply read), not a memory layer of gVisor's;
//   - host-uds=open: unix sockets the policy mounts can be connected to, as in the native box;
//   - ignore-cgroups: the run's cgroup is made and kept on the host side, with init in it.
var Flags = []string{"--platform=systrap", "--network=host", "--overlay2=none", "--host-uds=open", "--ignore-cgroups"}

// ErrNeedsRoot says that the tier cannot run for this caller: runsc must be root in the box's user
// namespace while the agent's uid owns the workspace there, two ids that a user namespace made
// without root cannot map (an unprivileged process may map its own id only).
var ErrNeedsRoot = errors.New("this tier needs cordon to run as root: runsc must be root in the sandbox's user namespace while the agent's uid owns the workspace there, and a user namespace made without root maps one id")

// CheckRoot refuses a caller that is not root (ErrNeedsRoot).
func CheckRoot() error {
	if os.Geteuid() != 0 {
		return ErrNeedsRoot
	}
	return nil
}

// Backend is the gVisor tier: the native backend with runsc as its runtime.
type Backend struct {
	// Exe is the cordon binary to re-execute as init and reaper; /proc/self/exe when empty.
	Exe string
	// Runsc is the runsc to use, as Find returned it.
	Runsc *Runsc
}

var _ sandbox.Backend = (*Backend)(nil)

// Launch implements sandbox.Backend.
func (b *Backend) Launch(ctx context.Context, ls *sandbox.LaunchSpec) (sandbox.Launched, error) {
	lb := &linux.Backend{Exe: b.Exe, Runtime: &linux.Runtime{Path: b.Runsc.Path, Flags: Flags, Config: Config}}
	return lb.Launch(ctx, ls)
}
