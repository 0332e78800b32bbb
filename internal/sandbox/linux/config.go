//go:build linux

package linux

import (
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// InitArg0 is argv[0] of the re-executed init; the cordon binary's main dispatches on it.
const InitArg0 = "cordon-init"

// File descriptors the parent hands to init (ExtraFiles start at 3).
const (
	configFD = 3 // read end: the config message, then EOF
	statusFD = 4 // init's end of the status socket: messages both ways, closed on exec of the command
	// publishFD is init's end of the socket over which cordon asks for connections to the
	// published ports (LaunchSpec.Publish), when there are any; closed on exec of the command.
	publishFD = 5
)

// initConfig is the config message: what the parent tells init at Start. It is the Spec, the part
// of the LaunchSpec that init needs only now (the user, the terminal), and what the parent resolved
// on the host (so init never needs to look at the caller's environment).
type initConfig struct {
	Spec sandbox.Spec `json:"spec"`
	User sandbox.User `json:"user"`
	// TTY asks init for a pseudo-terminal of TTYRows by TTYCols as the command's streams.
	TTY     bool   `json:"tty,omitempty"`
	TTYRows uint16 `json:"ttyRows,omitempty"`
	TTYCols uint16 `json:"ttyCols,omitempty"`

	Etc            []etcEntry `json:"etc"`
	SetRlimitNproc bool       `json:"setRlimitNproc,omitempty"`
	// RlimitData stands in for a memory cgroup that could not be had: it bounds the memory a process
	// has mapped writable, unlike RLIMIT_AS, which also counts the address space runtimes such as Go's
	// and V8 reserve without using (under RLIMIT_AS of a few hundred MiB a Go program cannot start).
	RlimitData  uint64 `json:"rlimitData,omitempty"`
	LandlockABI int    `json:"landlockABI"`
	// HostSources is set when cordon runs as root: the workspace and policy paths then come as
	// descriptors of detached mounts that cordon made on the host (see idmap.go), in one message on
	// the status channel sent before this config, rather than as paths init looks up itself.
	HostSources bool `json:"hostSources,omitempty"`
	// EtcFiles is how many generated /etc files come as descriptors (etcFilesMsg, after the host
	// sources) instead of inline: each such entry names its descriptor in File.
	EtcFiles int `json:"etcFiles,omitempty"`
	// Runtime, when set, says that init starts an OCI runtime on the root it built instead of
	// executing the command itself (see Runtime).
	Runtime *runtimeConfig `json:"runtime,omitempty"`
}

// etcEntry is one allowed entry of the host's /etc, already resolved by the parent.
type etcEntry struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`              // "file", "dir", "symlink", "generated", "dir-empty", "cover", "mountpoint"
	Target  string `json:"target,omitempty"`  // a symlink's target; for "cover", the entry bound over Name; for "mountpoint", "dir" or "file"
	Content string `json:"content,omitempty"` // set for generated files
	Binary  []byte `json:"binary,omitempty"`  // a generated file's bytes that are not text (a key store)
	// File, for a generated file too large to travel in the config (the CA bundle, the Java trust
	// store), is its descriptor's place in the etcFilesMsg, from 1; Content and Binary are then empty.
	File int `json:"file,omitempty"`
	// HostPrefix, for a generated file, is a host file whose content comes before Content, with a
	// newline after it when it has none: the CA bundle is the host's (some 225 KB) plus the run's
	// CA, and init copies the host's part from the host itself, where cordon would read it on the
	// start's path and send it again.
	HostPrefix string `json:"hostPrefix,omitempty"`
}
