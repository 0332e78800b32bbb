package cordon

import (
	"errors"
	"fmt"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// ExecError says that the box was built but the command could not be executed in it: not found in
// the sandbox's PATH, or found and not executable. Nothing of it ran.
type ExecError struct {
	// Path is the command as given.
	Path string
	// NotFound: not found (a shell's 127), rather than found but not executable (126).
	NotFound bool
	// SearchPath is the PATH it was looked up in, inside the sandbox.
	SearchPath string
	Err        error
}

func (e *ExecError) Error() string {
	if e.NotFound {
		return fmt.Sprintf("%s: command not found inside the sandbox (PATH=%s)", e.Path, e.SearchPath)
	}
	return fmt.Sprintf("%s: cannot be executed inside the sandbox: %v", e.Path, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// SetupError says that the box could not be built: a step of the boundary (a namespace, a mount,
// the seccomp filter, the egress rules) failed, or the backend could not start at all. The command
// never ran.
type SetupError struct {
	Err error
}

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// ErrUnsupported: this platform has no sandbox backend.
var ErrUnsupported = sandbox.ErrUnsupported

// boxError sorts an error from the backend into ExecError or SetupError.
func boxError(err error, env []string) error {
	var ee *sandbox.ExecError
	if errors.As(err, &ee) {
		return &ExecError{Path: ee.Path, NotFound: ee.NotFound, SearchPath: envValue(env, "PATH"), Err: ee.Err}
	}
	return &SetupError{Err: err}
}
