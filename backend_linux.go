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
	r, err := gvisor.Find(runsc, getenv(env, "PATH"), getenv(env, "HOME"))
	if err != nil {
		return nil, fmt.Errorf("isolation gvisor: %w", err)
	}
	return &gvisor.Backend{Runsc: r}, nil
}
