//go:build linux

package linux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// execError says why the command name, found at path, could not be executed, in the words that
// point at the fix: an ENOENT from execve on a file that exists is its #! interpreter that is
// missing, and an EACCES is told apart into a file without execute permission, a directory, and an
// executable file that the sandbox's mounts or rules do not let run.
func execError(name, path string, err error) error {
	ee := &sandbox.ExecError{Path: name, Err: err}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		ee.NotFound = true
		if _, statErr := os.Stat(path); path != "" && statErr == nil {
			if interp, _ := shebang(path); interp != "" {
				ee.Interpreter = interp
				ee.Err = fmt.Errorf("its interpreter %s: %w", interp, err)
			}
		}
		return ee
	}
	if errors.Is(err, syscall.EACCES) && path != "" {
		if fi, statErr := os.Stat(path); statErr == nil {
			switch {
			case fi.IsDir():
				ee.Err = fmt.Errorf("it is a directory: %w", err)
			case fi.Mode()&0o111 == 0:
				ee.NoExecBit = true
				ee.Err = fmt.Errorf("it has no execute permission (%v): %w", fi.Mode(), err)
			default:
				ee.Err = fmt.Errorf("executing it is denied although its mode is %v (a noexec mount or the sandbox's rules): %w", fi.Mode(), err)
			}
		}
	}
	return ee
}

// notExecutable is the error execve will give inside a runtime, found before the runtime starts:
// EACCES for a directory or a file with no execute bit, ENOENT for a script whose #! interpreter is
// missing. Inside the runtime the guest shim can print only execve's errno, which would not say
// why the file cannot run or how to fix it, as the native box's error does.
func notExecutable(name, path, dir string) error {
	at := execPath(path, dir)
	fi, err := os.Stat(at)
	switch {
	case err != nil:
		return nil
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return execError(name, at, syscall.EACCES)
	}
	if interp, _ := shebang(at); interp != "" {
		if _, err := os.Stat(execPath(interp, dir)); errors.Is(err, os.ErrNotExist) {
			return execError(name, at, syscall.ENOENT)
		}
	}
	return nil
}

// envInterpreter finds, before the command runs, a script started through `#!/usr/bin/env NAME`
// whose NAME is not in the sandbox's PATH: execve would succeed and env fail with its own message,
// which names neither the script nor the sandbox. Only the plain form (one name, no options or
// assignments) is checked; anything else is left to env.
func envInterpreter(name, path, dir string, env []string) error {
	interp, args := shebang(execPath(path, dir))
	if filepath.Base(interp) != "env" || len(args) != 1 || strings.HasPrefix(args[0], "-") || strings.Contains(args[0], "=") {
		return nil
	}
	var ee *sandbox.ExecError
	if _, err := lookPath(args[0], dir, env); errors.As(err, &ee) && ee.NotFound {
		return &sandbox.ExecError{Path: name, NotFound: true, Interpreter: args[0],
			Err: fmt.Errorf("its interpreter %s (#!%s %s): %w", args[0], interp, args[0], exec.ErrNotFound)}
	}
	return nil
}

// shebang reads the #! line of the file at path: the interpreter and the words after it, or "" for
// a file that does not start with #! or cannot be read.
func shebang(path string) (interp string, args []string) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil
	}
	defer f.Close()
	buf := make([]byte, 256) // the kernel reads no more of the line either
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", nil
	}
	line, ok := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !ok {
		return "", nil
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return "", nil
	}
	return fields[0], fields[1:]
}

// execPath is the command's path as execve sees it: a relative one is taken from the working directory.
func execPath(path, dir string) string {
	if !filepath.IsAbs(path) && dir != "" {
		return filepath.Join(dir, path)
	}
	return path
}
