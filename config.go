package cordon

import (
	"fmt"
	"net/netip"
	"os"
)

// Config is one run: what to run, on which project, under which policy, with which streams.
type Config struct {
	// Policy is what the run may do; nil means the built-in default (the workspace read-write,
	// nothing else of the host, no network). Start does not change it.
	Policy *Policy
	// Workspace is the project directory the command works on. It must be a directory that is not
	// a system directory and does not contain the caller's home. Empty means the current directory.
	Workspace string
	// Name is a name for the run, shown beside its id by cordon runs: up to 64 letters, digits,
	// '.', '_' and '-', starting with a letter or digit. Empty means none.
	Name string
	// Command is the command and its arguments, looked up in the PATH of the sandbox's environment.
	Command []string
	// Env is the caller's environment (KEY=VALUE) from which the policy's env.pass takes variables
	// and credentials read from.env; the command never inherits it as a whole. Nil means
	// os.Environ(). HOME, USER and the XDG directories in it also decide the default state
	// directory and the sandbox user's name.
	Env []string
	// Streams are the command's standard streams; nil ones are the null device.
	Streams Streams
	// Isolation chooses the kind of box; the zero value is the policy's sandbox.isolation, else
	// IsolationNative. It may make the policy's tier stronger, never weaker.
	Isolation Isolation
	// Runsc is the runsc binary for IsolationGVisor; empty means the policy's sandbox.runsc, else
	// the first runsc on the PATH of Env, else $HOME/go/bin/runsc.
	Runsc string
	// StateDir is where runs are kept; empty means cordon's default for the caller
	// ($XDG_STATE_HOME/cordon, else ~/.local/state/cordon; /var/lib/cordon for root).
	StateDir string
	// KeepServices keeps the run's fixture servers (policy services) running after the command
	// ended, for a look from the host (Run.Services names how to connect), until Run.StopServices.
	KeepServices bool
	// Publish forwards connections to host addresses into servers the command runs on the sandbox's
	// loopback (cordon run --publish), each one an event of the audit log. Nothing is published
	// unless listed; the policy needs a network section, whose audit log records them.
	Publish []Publish
	// Keep keeps a run that changed nothing, which is otherwise removed as it ends: there is nothing
	// to apply (see Exit.Kept for the runs kept all the same).
	Keep bool
	// OnWarning, when set, receives each warning as it happens, from any goroutine; it must not
	// block. Run.Warnings returns them too.
	OnWarning func(Warning)
	// OnEvent, when set, receives each event of the run's audit log as the log writes it: in order,
	// folded repeats once with their count when the fold is written, none after Wait has returned.
	// It is called on the log's own goroutine. The gateway's decisions never wait for it, but the
	// log does: it must not block for long, or the log drops events (as it does for a slow disk,
	// counted in the network summary). Run.Events and FinishedRun.Events read the same events.
	OnEvent func(Event)
}

// Publish is one published port: connections to Host on the host go to Port on the sandbox's
// loopback (docker's -p HOST:PORT).
type Publish struct {
	Host netip.AddrPort
	Port uint16
}

// CheckName refuses a run name (Config.Name) that would not read as one word in a listing; Start
// checks it too.
func CheckName(name string) error {
	if name == "" {
		return nil
	}
	ok := len(name) <= 64 && isNameChar(name[0]) && name[0] != '.' && name[0] != '_' && name[0] != '-'
	for i := 0; ok && i < len(name); i++ {
		ok = isNameChar(name[i])
	}
	if !ok {
		return fmt.Errorf("run name %q: expected up to 64 letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Streams are a run's standard streams. A terminal on Stdin gets the command its own
// pseudo-terminal, which the run relays; any stream that is not an anonymous pipe reaches the
// sandbox through a relay pipe, so that the command never holds a descriptor of the caller's (see
// SECURITY-MODEL.md).
type Streams struct {
	Stdin, Stdout, Stderr *os.File
}

// Isolation is the kind of box the run's command is put in. Every kind gets the same policy,
// gateway, credentials and workspace; they differ in what stands between the command and the host
// kernel.
type Isolation string

// The kinds of box, weakest first. Others come behind the same backend interface.
const (
	// IsolationNative is cordon's own Linux sandbox: namespaces, a pivoted root, Landlock, seccomp
	// and cgroups, on the host kernel.
	IsolationNative Isolation = "native"
	// IsolationGVisor is the same box with the command on gVisor's user-space kernel (runsc): its
	// system calls reach gVisor's Sentry, not the host's kernel. It needs runsc, and cordon running
	// as root.
	IsolationGVisor Isolation = "gvisor"
)

// check reports an Isolation this build does not know.
func (i Isolation) check() error {
	switch i {
	case "", IsolationNative, IsolationGVisor:
		return nil
	}
	return fmt.Errorf("isolation %q is not known (this cordon has: %s, %s)", string(i), IsolationNative, IsolationGVisor)
}

// resolve is the tier of a run: the caller's, or the policy's when the caller names none; a caller
// asking for a weaker tier than the policy's is refused, since nothing outside the policy weakens it.
func (i Isolation) resolve(pol string) (Isolation, error) {
	p := Isolation(pol)
	switch {
	case i == "" && p == "":
		return IsolationNative, nil
	case i == "":
		return p, nil
	case i == IsolationNative && p == IsolationGVisor:
		return "", fmt.Errorf("isolation %s: the policy's sandbox.isolation is %s, which a run may not weaken", i, p)
	}
	return i, nil
}

// Warning is something the user should know about a run that does not stop it.
type Warning struct {
	Kind WarningKind
	// Message is one line, without a "cordon:" prefix.
	Message string
}

// WarningKind says what a Warning is about, so that a program can tell a weakened boundary from
// information.
type WarningKind string

// The kinds of warning.
const (
	// WarningDegraded: the run has less than it asked for or exposes more than it may seem (a limit
	// fell back to an rlimit, a path was not mounted, a secret-shaped value enters as it is, a
	// credential could not be revoked). The cordon command prints these as "cordon: warning: ...".
	WarningDegraded WarningKind = "degraded"
	// WarningNotice: information about what the run did on the caller's behalf (secret-shaped
	// files masked or left as git keeps them). Printed as "cordon: ...".
	WarningNotice WarningKind = "notice"
	// WarningBlocked: the gateway refused a host the command tried to reach, once per host, as it
	// happens, with how to allow it. Printed as "cordon: ...".
	WarningBlocked WarningKind = "blocked"
	// WarningUpstream: the gateway could not reach a host the policy allows, or could not verify
	// its certificate (the fix then is network.tls.caFile), once per host, as it happens. The
	// sandbox sees only resets and 502s, which agents retry quietly. Printed as "cordon: ...".
	WarningUpstream WarningKind = "upstream"
)

func (w Warning) String() string {
	if w.Kind == WarningDegraded {
		return "warning: " + w.Message
	}
	return w.Message
}
