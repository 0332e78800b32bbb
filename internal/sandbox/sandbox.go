// Package sandbox defines what cordon asks of an isolation backend, independent of how a platform
// provides it. The Spec is declarative (what to isolate and what to let through), in the manner of an
// OCI runtime config, so that the run, the policy and the tests never depend on namespaces, mounts or
// seccomp directly, and another kind of box (gVisor, a Kubernetes pod, another OS) can be added behind
// the same interface.
//
// A box starts in two steps, so that its own start-up overlaps with the caller's preparation of the
// run: Backend.Launch with a LaunchSpec (who runs, the streams, whether the gateway's sockets are
// wanted), then Launched.Start with the Spec (everything else). Each field is given, and checked, in
// exactly one of the two.
//
// Where this differs from the interface first sketched for issue 12, the code demanded it:
//   - RunName is in Spec, not LaunchSpec: it names the run's cgroup, which is made at Start, and the
//     run's id is only known after the launch has begun overlapping with the preparation.
//   - Sandbox.EgressListeners may be called once; it hands over ownership of the sockets. A box that
//     was launched without Egress returns zero Listeners and no error.
//   - ErrUnsupported (no backend on this platform) is the contract's; the error that kernel features a
//     host lacks wrap is ErrHostLacks.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/cordon-sandbox/cordon/internal/warn"
)

// LaunchSpec is what a backend needs before the run is assembled: who runs, the streams, and whether
// the egress gateway's sockets are wanted. None of it is repeated in Spec.
type LaunchSpec struct {
	// User is who the command runs as inside. It must not be root.
	User User
	// Stdin, Stdout and Stderr are handed to the command as they are, unless TTY is set (a nil one is
	// /dev/null). They must not be a terminal of the caller's: a process holding it could inject
	// keystrokes into the session.
	Stdin, Stdout, Stderr *os.File
	// TTY asks for a pseudo-terminal created inside the sandbox as the command's streams and
	// controlling terminal; Sandbox.Terminal returns its master side for the caller to relay.
	TTY bool
	// TTYRows and TTYCols are the terminal's initial size.
	TTYRows, TTYCols uint16
	// Egress, when set, asks for the egress gateway's sockets and traffic rules inside the sandbox's
	// network namespace, installed before the command runs; Sandbox.EgressListeners returns the
	// sockets for the gateway outside to serve. Nil means no network at all: loopback only.
	Egress *EgressPorts
	// Publish are ports on the sandbox's loopback that the caller may connect to from outside
	// (Publisher.DialPublished), for a server the command runs; nothing else inside is reachable.
	Publish []uint16
	// Warn receives one-line notes about layers this host cannot provide; the run returns them to
	// its caller as values. Nil drops them.
	Warn warn.Func
}

// Backend is one kind of box (the native Linux sandbox today; gVisor and Kubernetes later).
type Backend interface {
	// Launch starts the box's own process (namespaces, and the egress sockets when asked) so that its
	// start overlaps with the caller's preparation; nothing of the command runs until Start. The
	// caller must call Start or Abort on the result. ctx bounds the launch itself only.
	Launch(ctx context.Context, spec *LaunchSpec) (Launched, error)
}

// Launched is a box waiting for its command.
type Launched interface {
	// Start gives the box the rest of the spec and starts the command, returning once it runs inside
	// the finished boundary; a step that cannot be set up returns a *SetupError and nothing runs. If
	// ctx ends first, the box is torn down and the error wraps ctx.Err(). Start consumes the box:
	// after it, successful or not, only Retry is left.
	//
	// An overlay the host cannot mount is a SetupError wrapping ErrNoOverlay: the caller may retry
	// once with a copied workspace through Retry.
	Start(ctx context.Context, spec *Spec) (Sandbox, error)
	// Retry starts a fresh box with the same LaunchSpec and the given spec, after a Start that failed
	// (with ErrNoOverlay, typically).
	Retry(ctx context.Context, spec *Spec) (Sandbox, error)
	// Abort ends a box whose command will never start. It is harmless after Start.
	Abort()
}

// Sandbox is a running box.
type Sandbox interface {
	// Wait waits for the command to exit; by then every process of the sandbox is gone, its init at
	// least past its last instruction (the kernel may still be tearing its namespaces down). If ctx
	// ends first, the box is killed and Wait returns how it ended with ctx.Err().
	Wait(ctx context.Context) (ExitStatus, error)
	// Signal forwards a signal to the command.
	Signal(sig os.Signal) error
	// Kill ends every process of the sandbox at once.
	Kill() error
	// EgressListeners hands over the gateway's sockets created inside the sandbox when the launch
	// asked for them, for the gateway to serve; the caller owns them. It may be called once.
	EgressListeners() (Listeners, error)
	// Terminal is the master side of the sandbox's pseudo-terminal when the launch asked for one.
	Terminal() *os.File
	// Pid is the host pid of the box's own process (the native sandbox's init).
	Pid() int
}

// Publisher is a Sandbox whose launch published ports (LaunchSpec.Publish): DialPublished connects
// to one of them on the sandbox's loopback, from outside, for the caller to relay a host's
// connection to. Any other port is refused.
type Publisher interface {
	DialPublished(port uint16) (net.Conn, error)
}

// Start launches a box and starts spec in it at once, for callers with nothing to prepare in between.
func Start(ctx context.Context, b Backend, ls *LaunchSpec, spec *Spec) (Sandbox, error) {
	l, err := b.Launch(ctx, ls)
	if err != nil {
		return nil, err
	}
	return l.Start(ctx, spec)
}

// ErrNoOverlay says that the host cannot mount overlayfs here (wrapped by *SetupError): the caller
// may fall back to a copied workspace.
var ErrNoOverlay = errors.New("sandbox: overlayfs cannot be mounted here")

// ErrUnsupported says that this platform has no sandbox backend (Unsupported returns it).
var ErrUnsupported = errors.New("sandbox: no sandbox backend for this platform")

// NoOverlay marks cause as an overlay the host cannot mount: the result reads as cause, and both
// errors.Is(err, ErrNoOverlay) and errors.Is(err, cause) hold.
func NoOverlay(cause error) error { return &noOverlay{cause} }

type noOverlay struct{ cause error }

func (e *noOverlay) Error() string   { return e.cause.Error() }
func (e *noOverlay) Unwrap() []error { return []error{ErrNoOverlay, e.cause} }

// Unsupported is the backend of a platform cordon cannot sandbox on: Launch always fails with
// ErrUnsupported, so a program built there says so instead of running anything unconfined.
type Unsupported struct{}

// Launch implements Backend.
func (Unsupported) Launch(context.Context, *LaunchSpec) (Launched, error) { return nil, ErrUnsupported }

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
	// RunName names what the host keeps for the run while it lasts, such as its cgroup
	// ("cordon-<run id>"); empty picks a unique name.
	RunName string

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
	// ResolvConf is the content of /etc/resolv.conf inside; empty means no name server.
	ResolvConf string
	// Hosts are extra lines for /etc/hosts inside.
	Hosts []string
	// SSHKnownHosts, if set, is /etc/ssh/ssh_known_hosts inside (the host's /etc/ssh is never
	// shown: it holds the host's private keys): the caller's lines for the hosts the sandbox may
	// reach, so that ssh checks their keys strictly.
	SSHKnownHosts []byte
	// TrustCA is PEM certificates the sandbox trusts besides the host's CA bundle (the gateway's
	// per-run CA, when it terminates TLS, and network.tls.caFile). They appear at TrustedCAPath, the
	// host's bundle plus them at CABundlePath and in the system bundle's place where the host has
	// one, and the host's Java roots plus them at JavaTrustStorePath.
	TrustCA []byte

	// Limits are resource limits; zero means no limit.
	Limits Limits
	// AllowNesting permits the command to create user namespaces (for tools that sandbox themselves).
	AllowNesting bool
}

// Where the sandbox finds the certificates of Spec.TrustCA: alone, and with the host's bundle.
const (
	TrustedCAPath = "/etc/cordon/ca.crt"
	CABundlePath  = "/etc/cordon/ca-bundle.crt"
	// JavaTrustStorePath is a JKS trust store (password javatrust.Password) of the host's Java
	// roots plus Spec.TrustCA, for Java, which reads neither the bundle nor the variables.
	JavaTrustStorePath = "/etc/cordon/java-cacerts.jks"
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

// EgressPorts are the gateway's ports on the sandbox's loopback. They are fixed per run, because the
// traffic rules name them and the sandbox's environment (HTTP_PROXY, resolv.conf) points at them.
type EgressPorts struct {
	// Transparent receives every TCP connection the sandbox makes, redirected by the box's rules; the
	// gateway asks the kernel where each was going. 15001, say.
	Transparent uint16
	// Proxy is the explicit HTTP/HTTPS proxy, for tools that honour HTTP_PROXY. 3128, say.
	Proxy uint16
	// DNS receives every DNS query (UDP and TCP to port 53 anywhere). 53, so that resolv.conf can name it.
	DNS uint16
}

// Validate refuses ports the rules could not express or that would collide: one TCP listener per
// port, and port 0 would mean "redirect to wherever the kernel chose", which the rules cannot know.
func (p EgressPorts) Validate() error {
	if p.Transparent == 0 || p.Proxy == 0 || p.DNS == 0 {
		return fmt.Errorf("egress ports: all must be set (got %+v)", p)
	}
	if p.Transparent == p.Proxy || p.Transparent == p.DNS || p.Proxy == p.DNS {
		return fmt.Errorf("egress ports: must be distinct (got %+v)", p)
	}
	return nil
}

// Listeners are the gateway's sockets inside one sandbox, as the box made them. Each slice has the
// 127.0.0.1 socket first and the ::1 one second when the sandbox has IPv6 loopback. They are ordinary
// net.Listener and net.PacketConn values: the box's network is a property of the socket, so they
// work from any goroutine outside.
type Listeners struct {
	// Transparent receives the TCP connections the box's rules redirect.
	Transparent []net.Listener
	// Proxy is the explicit HTTP/HTTPS proxy.
	Proxy []net.Listener
	// DNSTCP and DNSUDP receive DNS queries over TCP and UDP.
	DNSTCP []net.Listener
	DNSUDP []net.PacketConn
}

// Close closes every socket, so that nothing of the gateway is left listening inside the sandbox.
func (l *Listeners) Close() error {
	var errs []error
	for _, group := range [][]net.Listener{l.Transparent, l.Proxy, l.DNSTCP} {
		for _, ln := range group {
			errs = append(errs, ln.Close())
		}
	}
	for _, c := range l.DNSUDP {
		errs = append(errs, c.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing the gateway's sockets: %w", err)
	}
	return nil
}

// Mount is a host path made visible inside.
type Mount struct {
	Source string
	// Target is where it appears inside; empty means Source. (A path under the caller's home is
	// also shown under the sandbox user's home when the two differ, as for a root caller.)
	Target   string
	Writable bool
	// Overlay, when set, shows Source read-only under a writable layer of the run's own (a
	// dependency cache: the command reads what the host has and writes only into Overlay.Upper, never
	// into Source). Writable does not apply.
	Overlay *Overlay
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
