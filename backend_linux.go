package cordon

import (
	"errors"
	"fmt"

	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/gvisor"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// newBackend is the box for an Isolation that check has accepted. For gVisor it finds and checks
// runsc (at runsc when given, else on the caller's PATH): a missing one fails the run, with how to
// get it, before anything starts. A runsc that lies in, or is reached through, one of writable (the
// directories the sandbox can write) is refused before it is executed: cordon runs it as root, and
// init runs it with every privilege over the box and no filter of its own around it.
func newBackend(i Isolation, runsc string, env []string, writable []string) (sandbox.Backend, error) {
	if i != IsolationGVisor {
		return &linux.Backend{}, nil
	}
	if err := gvisor.CheckRoot(); err != nil {
		return nil, fmt.Errorf("isolation gvisor: %w", err)
	}
	r, err := gvisor.Find(runsc, getenv(env, "PATH"), getenv(env, "HOME"), func(p string) error {
		return runscOutside(p, writable)
	})
	if err != nil {
		return nil, fmt.Errorf("isolation gvisor: %w", err)
	}
	return &gvisor.Backend{Runsc: r}, nil
}

// FindRunsc is the runsc that IsolationGVisor would use for a run with Config.Runsc set to runsc
// (empty: the PATH of env, then $HOME/go/bin), and its version; an error says why there is none, and
// how to get one. cordon doctor reports it.
func FindRunsc(runsc string, env []string) (path, version string, err error) {
	r, err := gvisor.Find(runsc, getenv(env, "PATH"), getenv(env, "HOME"), nil)
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

// runscOutside refuses a runsc binary the sandbox could replace: one in, or reached through a
// symbolic link in, a directory of writable (policy.CheckOutside's test for the policy file).
func runscOutside(path string, writable []string) error {
	err := policy.CheckOutside(path, writable)
	if ie := (*policy.InsideError)(nil); errors.As(err, &ie) {
		return fmt.Errorf("runsc %s is inside %s, which the sandbox can write: install runsc outside the workspace and writable mounts", path, ie.Dir)
	}
	if err != nil {
		return fmt.Errorf("runsc %s: %w", path, err)
	}
	return nil
}
