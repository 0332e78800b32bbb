//go:build linux

package gvisor

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// The OCI runtime spec, as far as cordon fills it in (the field names are the specification's).
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname,omitempty"`
		Mounts   []ociMount `json:"mounts"`
		Linux    ociLinux   `json:"linux"`
	}
	ociProcess struct {
		Terminal        bool      `json:"terminal,omitempty"`
		User            ociUser   `json:"user"`
		Args            []string  `json:"args"`
		Env             []string  `json:"env"`
		Cwd             string    `json:"cwd"`
		Capabilities    ociCaps   `json:"capabilities"`
		Rlimits         []ociRlim `json:"rlimits,omitempty"`
		NoNewPrivileges bool      `json:"noNewPrivileges"`
	}
	ociUser struct {
		UID            int   `json:"uid"`
		GID            int   `json:"gid"`
		AdditionalGids []int `json:"additionalGids"`
	}
	ociCaps struct {
		Bounding    []string `json:"bounding"`
		Effective   []string `json:"effective"`
		Inheritable []string `json:"inheritable"`
		Permitted   []string `json:"permitted"`
		Ambient     []string `json:"ambient"`
	}
	ociRlim struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces []ociNamespace `json:"namespaces"`
	}
	ociNamespace struct {
		Type string `json:"type"`
	}
)

// Config is the linux.Runtime's Config: the OCI spec that hands the root init built to runsc. The
// root is given whole (its mounts are the native box's: runsc's gofer serves them as one tree and
// the host kernel enforces their flags on what it reads and writes), and each policy mount, mask and
// read-only path is also a mount of gVisor's own (binds), so that gVisor's kernel enforces them as
// mount points too: the host kernel refuses a rename onto or of a mount point only to a caller in
// the mount's namespace, which gVisor's Sentry is not. /proc, /sys, /dev and /dev/pts are gVisor's
// own, /dev/shm a tmpfs of its own as in the native box. The command runs as the sandbox user with
// no capabilities and no_new_privs, with the environment, directory and host name of the spec. No
// network namespace is named: runsc, with --network=host, stays in init's, which is the gateway's.
func Config(rs *linux.RuntimeSpec) ([]byte, error) {
	spec := rs.Spec
	if len(rs.Args) == 0 {
		return nil, errors.New("no command")
	}
	none := []string{}
	s := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			Terminal:        rs.TTY,
			User:            ociUser{UID: rs.User.UID, GID: rs.User.GID, AdditionalGids: []int{}},
			Args:            rs.Args,
			Env:             spec.Env,
			Cwd:             spec.Dir,
			Capabilities:    ociCaps{Bounding: none, Effective: none, Inheritable: none, Permitted: none, Ambient: none},
			NoNewPrivileges: true,
			// No core dumps, as in the native box: a crashing agent leaves no memory on disk.
			Rlimits: []ociRlim{{Type: "RLIMIT_CORE"}},
		},
		Root:     ociRoot{Path: rs.Root},
		Hostname: spec.Hostname,
		Mounts: []ociMount{
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "mode=1777"}},
		},
		Linux: ociLinux{Namespaces: []ociNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}}},
	}
	s.Mounts = append(s.Mounts, binds(rs)...)
	if s.Process.Cwd == "" {
		s.Process.Cwd = "/"
	}
	if s.Hostname == "" {
		s.Hostname = "cordon"
	}
	lim := func(typ string, v uint64) {
		if v > 0 {
			s.Process.Rlimits = append(s.Process.Rlimits, ociRlim{Type: typ, Hard: v, Soft: v})
		}
	}
	lim("RLIMIT_NOFILE", spec.Limits.OpenFiles)
	lim("RLIMIT_NPROC", rs.Nproc)
	lim("RLIMIT_DATA", rs.Data)
	return json.Marshal(&s)
}

// binds are the policy's mounts, masks and read-only paths as gVisor binds of the same paths of the
// built root, parents first (as init mounts them). Init drops a bind whose source the built root
// lacks, as its own masks skip a path that does not exist.
func binds(rs *linux.RuntimeSpec) []ociMount {
	spec := rs.Spec
	type bind struct {
		path string
		rw   bool
	}
	var bs []bind
	for _, m := range spec.Mounts {
		// A cache is an overlay init built with a layer of the run's own: writable, while its
		// lower layer, the host's cache, is never written.
		bs = append(bs, bind{m.Path(), m.Writable || m.Overlay != nil})
	}
	sort.SliceStable(bs, func(i, j int) bool {
		return strings.Count(bs[i].path, "/") < strings.Count(bs[j].path, "/")
	})
	for _, p := range spec.Masks {
		bs = append(bs, bind{p, false})
	}
	for _, p := range spec.ReadOnly {
		bs = append(bs, bind{p, false})
	}
	out := make([]ociMount, 0, len(bs))
	for _, b := range bs {
		mode := "ro"
		if b.rw {
			mode = "rw"
		}
		out = append(out, ociMount{Destination: b.path, Type: "bind", Source: filepath.Join(rs.Root, b.path), Options: []string{"rbind", mode, "nosuid", "nodev"}})
	}
	return out
}
