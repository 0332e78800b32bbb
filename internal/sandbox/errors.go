package sandbox

import (
	"errors"
	"fmt"
)

// SetupError says which step of building the boundary failed. cordon prints it as one line and exits
// 125; the command never runs.
type SetupError struct {
	Step string
	Err  error
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("sandbox setup failed at %s: %v", e.Step, e.Err)
}
func (e *SetupError) Unwrap() error { return e.Err }

// ExecError says the command could not be executed inside the sandbox.
type ExecError struct {
	Path     string
	NotFound bool // command not found (exit 127) rather than found but not executable (126)
	// Interpreter, when set, is the script's interpreter (its #! line) that is not found inside:
	// the command itself is there, and NotFound is about the interpreter.
	Interpreter string
	// NoExecBit says the command is a file without execute permission (Err says EACCES either way,
	// and also for a mount or policy that forbids executing it).
	NoExecBit bool
	Err       error
}

func (e *ExecError) Error() string {
	if e.Interpreter != "" {
		return fmt.Sprintf("%s: its interpreter %s is not found inside the sandbox", e.Path, e.Interpreter)
	}
	if e.NotFound {
		return fmt.Sprintf("%s: command not found inside the sandbox", e.Path)
	}
	return fmt.Sprintf("%s: cannot execute inside the sandbox: %v", e.Path, e.Err)
}
func (e *ExecError) Unwrap() error { return e.Err }

// ErrHostLacks is wrapped by errors for kernel features the host lacks (a cgroup controller, say).
var ErrHostLacks = errors.New("not supported by this host")
