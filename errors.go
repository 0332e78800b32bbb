package cordon

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// ExecError says that the box was built but the command could not be executed in it: not found in
// the sandbox's PATH, or found and not executable. Nothing of it ran. Beside the reason it carries
// what the fix depends on: whether the host has what is missing, and whether the sandbox shows it.
type ExecError struct {
	// Path is the command as given.
	Path string
	// NotFound: not found (a shell's 127), rather than found but not executable (126).
	NotFound bool
	// SearchPath is the PATH it was looked up in, inside the sandbox.
	SearchPath string
	// Interpreter, when set, is the script's #! interpreter that is not found inside (NotFound is
	// about it): the script itself is there.
	Interpreter string
	// NoExecBit: Path is a file without execute permission.
	NoExecBit bool
	// Host is where the host has what was not found (Path, or Interpreter when set): a path as
	// given, or the first match in the caller's own PATH; "" when the host has it nowhere either.
	Host string
	// Hidden are the host directories that Host needs and the sandbox does not show: its own and,
	// for a symbolic link, its target's. Empty with Host set: Host is inside at the same path, and
	// only the sandbox's PATH lacks its directory.
	Hidden []string
	// Preset names the network preset that shows the toolchain Host belongs to (go's GOROOT, nvm's
	// node, pyenv's python) when the policy does not use it; "" otherwise.
	Preset string
	Err    error
}

func (e *ExecError) Error() string {
	switch {
	case e.Interpreter != "":
		return fmt.Sprintf("%s: its interpreter %s is not found inside the sandbox (PATH=%s)", e.Path, e.Interpreter, e.SearchPath)
	case e.NotFound:
		return fmt.Sprintf("%s: command not found inside the sandbox (PATH=%s)", e.Path, e.SearchPath)
	}
	return fmt.Sprintf("%s: cannot be executed inside the sandbox: %v", e.Path, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// PathDir is the directory to add to the sandbox's PATH for the missing command or interpreter to
// be found once it is visible: Host's, when a bare name was looked up and the PATH lacks it; "" else.
func (e *ExecError) PathDir() string {
	missing := e.Path
	if e.Interpreter != "" {
		missing = e.Interpreter
	}
	if e.Host == "" || strings.Contains(missing, "/") {
		return ""
	}
	dir := filepath.Dir(e.Host)
	if slices.Contains(filepath.SplitList(e.SearchPath), dir) {
		return ""
	}
	return dir
}

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

// boxError sorts an error from the backend into ExecError or SetupError. caller is the caller's
// environment, whose PATH says where the host has a command the sandbox lacks.
func boxError(err error, spec *sandbox.Spec, caller []string, used []string) error {
	var ee *sandbox.ExecError
	if errors.As(err, &ee) {
		e := &ExecError{Path: ee.Path, NotFound: ee.NotFound, SearchPath: envValue(spec.Env, "PATH"),
			Interpreter: ee.Interpreter, NoExecBit: ee.NoExecBit, Err: ee.Err}
		if e.NotFound {
			e.locate(spec, getenv(caller, "PATH"))
			e.suggestPreset(caller, used)
		}
		return e
	}
	return &SetupError{Err: err}
}
