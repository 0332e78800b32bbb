// Package linux is cordon's native sandbox backend: user, mount, pid, network, ipc, uts and cgroup
// namespaces, a root file system built from nothing, Landlock, seccomp and cgroups, with cordon's own
// init as pid 1.
//
// It follows runc's two-stage shape: the parent (Backend.Start) clones a new process into fresh
// namespaces by re-executing the cordon binary as "cordon-init"; that init reads a declarative
// config from a pipe, builds the boundary from inside (where it holds capabilities only over the new
// namespaces), drops every privilege, and only then executes the command. Any failure before the
// command runs is reported over a status pipe and the command never starts.
package linux

import (
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// InitArg0 is argv[0] of the re-executed init; the cordon binary's main dispatches on it.
const InitArg0 = "cordon-init"

// File descriptors the parent hands to init (ExtraFiles start at 3).
const (
	configFD = 3 // read end: the JSON initConfig, then EOF
	statusFD = 4 // write end: status messages to the parent, closed on exec of the command
)

// initConfig is what the parent tells init. It is the Spec without the stdio files, plus what the
// parent resolved on the host (so init never needs to look at the caller's environment).
type initConfig struct {
	Spec           sandbox.Spec `json:"spec"`
	Etc            []etcEntry   `json:"etc"`
	SetRlimitNproc bool         `json:"setRlimitNproc,omitempty"`
	// RlimitData stands in for a memory cgroup that could not be had: it bounds the memory a process
	// has mapped writable, unlike RLIMIT_AS, which also counts the address space runtimes such as Go's
	// and V8 reserve without using (under RLIMIT_AS of a few hundred MiB a Go program cannot start).
	RlimitData  uint64 `json:"rlimitData,omitempty"`
	LandlockABI int    `json:"landlockABI"`
	// HostSources is set when cordon runs as root: the workspace and policy paths then come as
	// descriptors of detached mounts that cordon made on the host (see idmap.go), in one message on
	// the status channel sent before this config, rather than as paths init looks up itself.
	HostSources bool `json:"hostSources,omitempty"`
}

// etcEntry is one allowed entry of the host's /etc, already resolved by the parent.
type etcEntry struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`              // "file", "dir", "symlink", "generated", "dir-empty", "cover", "mountpoint"
	Target  string `json:"target,omitempty"`  // a symlink's target; for "cover", the entry bound over Name; for "mountpoint", "dir" or "file"
	Content string `json:"content,omitempty"` // set for generated files
}

// status is one message from init to the parent.
type status struct {
	// Step and Error are set when setting up the boundary failed.
	Step  string `json:"step,omitempty"`
	Error string `json:"error,omitempty"`
	// Exec is set when the command itself could not be executed.
	Exec     string `json:"exec,omitempty"`
	NotFound bool   `json:"notFound,omitempty"`
	// PTY marks the message that carries the master side of the sandbox's pseudo-terminal.
	PTY bool `json:"pty,omitempty"`
	// Sockets marks the message that carries the egress gateway's sockets, naming their roles in order.
	Sockets []string `json:"sockets,omitempty"`
	// Started is set once the command runs inside the finished boundary.
	Started bool `json:"started,omitempty"`
	// Exited is init's last message: the command ended with Code and every other process of the
	// sandbox is gone (killed and reaped); init exits next. cordon can report the status at once,
	// while the kernel still tears the namespaces down.
	Exited bool `json:"exited,omitempty"`
	Code   int  `json:"code,omitempty"`
	// Warnings are one-line notices (a defense-in-depth layer the kernel lacks).
	Warnings []string `json:"warnings,omitempty"`
}
