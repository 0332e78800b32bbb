package cordon

import (
	"os"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// Policy is a loaded, validated policy: what a run may see, reach and hold. Its fields are the
// policy file's sections (see README.md); a program may adjust them between LoadPolicy and
// Start.
type Policy = policy.Policy

// LoadPolicy reads and validates the policy file at path, with ~ expanded against $HOME. Start
// refuses a policy file that the run's command could write (inside the workspace or a read-write
// path).
func LoadPolicy(path string) (*Policy, error) {
	return policy.Load(path, policy.Options{Home: os.Getenv("HOME")})
}

// DefaultPolicy is the built-in policy: the workspace read-write, nothing else of the host, no
// network.
func DefaultPolicy() *Policy { return policy.Default() }
