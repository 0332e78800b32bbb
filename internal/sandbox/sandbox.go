// Package sandbox defines what cordon asks of an isolation backend, independent of how a platform
// provides it. The Spec is declarative (what to isolate and what to let through), in the manner of an
// OCI runtime config, so that the CLI, the policy and the tests never depend on namespaces, mounts or
// seccomp directly, and a second backend (another OS) can be added behind the same interface.
package sandbox

import (
	"context"
	"os"
	"time"
)

// Spec describes one sandboxed command. Every field is an allowlist: what is not named is not there.
type Spec struct {
	// Args is the command and its arguments. Args[0] is looked up in the PATH of Env, inside the sandbox.
	Args []string
	// Env is the complete environment of the command (KEY=VALUE); nothing is inherited.
	Env []string
	// Dir is the working directory inside the sandbox.
	Dir string
	// Hostname is the host name the sandbox sees.
	Hostname string

	// Workspace is the project, mounted read-write at Workspace.Path.
	Workspace Workspace
	// Mounts are additional host paths made visible inside (at the same path unless a Target is given).
	Mounts []Mount
	// Masks are absolute paths (inside the workspace or a mount) hidden behind an empty file or
	// directory.
	Masks []string
	// ReadOnly are absolute paths inside the workspace that the command may read but not change (for
	// example .git/hooks and .git/config, which would run code on the host later).
	ReadOnly []string
	// Egress, when set, asks for the egress gateway's sockets and traffic rules inside the sandbox's
	// network namespace, installed before the command runs; Sandbox.EgressSockets returns the sockets
	// for the gateway outside to serve.
	Egress *EgressPorts
	// ResolvConf is the content of /etc/resolv.conf inside; empty means no name server.
	ResolvConf string
	// Hosts are extra lines for /etc/hosts inside.
	Hosts []string
	// TrustCA is PEM certificates the sandbox trusts besides the host's CA bundle (the gateway's
	// per-run CA, when it terminates TLS). They appear at TrustedCAPath, the host's bundle plus them at
	// CABundlePath, and in the system bundle's place where the host has one.
	TrustCA []byte

	// User is who the command runs as inside.
	User User
	// Limits are resource limits; zero means no limit.
	Limits Limits
	// AllowNesting permits the command to create user namespaces (for tools that sandbox themselves).
	AllowNesting bool

	// Stdin, Stdout and Stderr are handed to the command as they are, unless TTY is set. They must not
	// be a terminal of the caller's: a process holding it could inject keystrokes into the session.
	Stdin, Stdout, Stderr *os.File `json:"-"`
	// TTY asks for a pseudo-terminal created inside the sandbox as the command's streams and
	// controlling terminal; Sandbox.Terminal returns its master side for the caller to relay.
	TTY bool
	// TTYRows and TTYCols are the terminal's initial size.
	TTYRows, TTYCols uint16
}

// Where the sandbox finds the certificates of Spec.TrustCA: alone, and with the host's bundle.
const (
	TrustedCAPath = "/etc/cordon/ca.crt"
	CABundlePath  = "/etc/cordon/ca-bundle.crt"
)

// Workspace is the project directory as the sandbox sees it.
type Workspace struct {
	// Path is the absolute path at which the workspace appears inside (the same as on the host).
	Path string
	// Source is the host directory bound at Path when Overlay is nil.
	Source string
	// Overlay, when set, makes the workspace a copy-on-write view: Source is the read-only lower layer
	// and writes land in Overlay.Upper.
	Overlay *Overlay
}

// Overlay names the writable layers of a copy-on-write workspace. Both must be on the same host file
// system and outside anything the sandbox can see.
type Overlay struct {
	Upper string
	Work  string
}

// EgressPorts are the loopback ports inside the sandbox where the gateway listens.
type EgressPorts struct {
	Transparent, Proxy, DNS uint16
}

// Mount is a host path made visible inside.
type Mount struct {
	Source string
	// Target is where it appears inside; empty means Source. (A path under the caller's home is
	// also shown under the sandbox user's home when the two differ, as for a root caller.)
	Target   string
	Writable bool
}

// Path is where the mount appears inside the sandbox.
func (m Mount) Path() string {
	if m.Target != "" {
		return m.Target
	}
	return m.Source
}

// User is the identity inside the sandbox. It is never privileged: the command has no capabilities.
type User struct {
	UID, GID int
	Name     string
	Home     string
}

// Limits bound what the sandbox may consume. Zero means "no limit".
type Limits struct {
	MemoryBytes int64
	Pids        int64
	// CPU is the number of CPUs' worth of time the sandbox may use (1.5 = one and a half cores).
	CPU       float64
	OpenFiles uint64
	Timeout   time.Duration
}

// ExitStatus is how the command ended.
type ExitStatus struct {
	// Code is the command's exit code, or 128+signal when it was killed by a signal.
	Code int
	// Signal is the signal that ended the command, if any.
	Signal os.Signal
	// TimedOut says that the wall-clock limit ended the run.
	TimedOut bool
}

// Backend creates sandboxes.
type Backend interface {
	// Start builds the sandbox and starts Args in it. It returns only once the command has been
	// executed inside the finished boundary; if any step of the boundary cannot be set up, it returns a
	// *SetupError and nothing runs.
	Start(ctx context.Context, spec *Spec) (Sandbox, error)
}

// Sandbox is a running sandbox.
type Sandbox interface {
	// Wait waits for the command to exit; by then every process of the sandbox is gone, its init at
	// least past its last instruction (the kernel may still be tearing its namespaces down).
	Wait() (ExitStatus, error)
	// Signal forwards a signal to the command.
	Signal(sig os.Signal) error
	// Kill ends every process of the sandbox at once.
	Kill() error
	// Pid is the host pid of the sandbox's init process.
	Pid() int
	// Terminal is the master side of the sandbox's pseudo-terminal when the Spec asked for one.
	Terminal() *os.File
	// EgressSockets are the gateway's sockets created inside the sandbox when the Spec asked for them,
	// with their roles; the caller owns them.
	EgressSockets() (files []*os.File, roles []string)
}
