//go:build linux

package linux

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/seccomp"
)

// GuestExecArg0 is where a box under a Runtime shows the cordon binary, read-only, and the argv[0]
// it is started with there: the runtime starts it as the command's first process, inside the
// runtime's kernel, and it installs the native box's own seccomp filter before executing the
// command. A system call the native box refuses is then refused under the runtime too, by the
// runtime's kernel (gVisor's Sentry implements seccomp), rather than only being answered by it.
const GuestExecArg0 = "/etc/cordon/guest-exec"

// guestNesting is GuestExecMain's argv[1] when the spec allows nesting; guestDefault otherwise.
const (
	guestNesting = "nesting"
	guestDefault = "default"
)

// guestArgs is the command line the runtime starts: the shim, its option, then the command.
func guestArgs(args []string, nesting bool) []string {
	opt := guestDefault
	if nesting {
		opt = guestNesting
	}
	return append([]string{GuestExecArg0, opt, "--"}, args...)
}

// IsGuestExec reports whether this process was started as the guest shim.
func IsGuestExec() bool { return len(os.Args) > 0 && os.Args[0] == GuestExecArg0 }

// GuestExecMain is the shim's body: no_new_privs, the seccomp filter, then exec of the command in
// its own environment and directory. It returns only on failure, with 126 or 127 as a shell would.
func GuestExecMain() int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "cordon: "+format+"\n", a...)
		return code
	}
	if len(os.Args) < 4 || os.Args[2] != "--" || (os.Args[1] != guestDefault && os.Args[1] != guestNesting) {
		return fail(125, "guest-exec: usage: %s default|nesting -- COMMAND...", GuestExecArg0)
	}
	args := os.Args[3:]
	path, err := lookPath(args[0], "", os.Environ())
	if err != nil {
		return fail(127, "%s: %v", args[0], err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(125, "no_new_privs: %v", err)
	}
	if err := seccomp.Install(seccomp.Options{AllowNesting: os.Args[1] == guestNesting}); err != nil {
		return fail(125, "installing the seccomp filter: %v", err)
	}
	err = syscall.Exec(path, args, os.Environ())
	code := 126
	if strings.Contains(err.Error(), "no such file") {
		code = 127
	}
	return fail(code, "%s: %v", args[0], err)
}
