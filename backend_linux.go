package cordon

import (
	"fmt"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/gvisor"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// newBackend is the box for an Isolation that check has accepted. For gVisor it finds and checks
// runsc (at runsc when given, else on the caller's PATH): a missing one fails the run, with how to
// get it, before anything starts.
func newBackend(i Isolation, runsc string, env []string) (sandbox.Backend, error) {
	if i != IsolationGVisor {
		return &linux.Backend{}, nil
	}
	if err := gvisor.CheckRoot(); err != nil {
		return nil, fmt.Errorf("isolation gvisor: %w", err)
	}
	r, err := gvisor.Find(runsc, getenv(env, "PATH"), getenv(env, "HOME"))
	if err != nil {
		return nil, fmt.Errorf("isolation gvisor: %w", err)
	}
	return &gvisor.Backend{Runsc: r}, nil
}

// FindRunsc is the runsc that IsolationGVisor would use for a run with Config.Runsc set to runsc
// (empty: the PATH of env, then $HOME/go/bin), and its version; an error says why there is none, and
// how to get one. cordon doctor reports it.
func FindRunsc(runsc string, env []string) (path, version string, err error) {
	r, err := gvisor.Find(runsc, getenv(env, "PATH"), getenv(env, "HOME"))
	if err != nil {
		return "", "", err
	}
	return r.Path, r.Version, nil
}

// serviceHostIDs are the host ids fixture servers run as when cordon runs as root: the id
// serviceRangeID of the reserved range the sandbox maps into (so that no account owns it), never the
// agent's own.
func serviceHostIDs() (uid, gid int, err error) {
	return linux.RootSandboxIDs(sandbox.User{UID: serviceRangeID, GID: serviceRangeID})
}
