//go:build linux

package linux

import (
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// LandlockABI returns the Landlock ABI version the running kernel offers, 0 when it has none.
func LandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// restrictLandlock restricts init and everything it starts to the same file hierarchies the mounts
// expose, with the same read-only/read-write split. It is a second, independent layer: a mistake in
// the mount code (or a kernel bug in it) does not by itself open the host.
//
// Network rights are left to the egress layer (Landlock checks the port a program asks for, before
// nftables redirects it). It returns a warning line when the kernel has no Landlock at all.
func restrictLandlock(spec *sandbox.Spec, home string, abi int) (string, error) {
	if abi < 1 {
		return "cordon: warning: this kernel has no Landlock; the sandbox relies on its mount namespace and seccomp alone", nil
	}
	cfg := landlock.Config{
		HandledAccessFS: landlock.V11.HandledAccessFS,
		Scoped:          landlock.V11.Scoped,
	}.BestEffort()

	rules := []landlock.Rule{
		landlock.PathAccess(llsys.AccessFSReadDir, "/"),
		landlock.RODirs("/usr", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin").IgnoreIfMissing(),
		landlock.PathAccess(llsys.AccessFSReadFile|llsys.AccessFSReadDir|llsys.AccessFSWriteFile|llsys.AccessFSTruncate, "/proc"),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"),
		landlock.RWFiles("/dev/tty").WithIoctlDev(),
		landlock.RWDirs("/dev/pts").WithIoctlDev(),
		landlock.RWDirs("/dev/shm", "/tmp").WithRefer(),
		landlock.RWDirs(spec.Workspace.Path).WithRefer(),
	}
	if home != "" {
		rules = append(rules, landlock.RWDirs(home).WithRefer())
	}
	for _, m := range spec.Mounts {
		p := m.Path() // after the pivot, where the mount is
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		switch {
		case fi.IsDir() && (m.Writable || m.Overlay != nil):
			// A cache's writes land in its layer of the run's own.
			rules = append(rules, landlock.RWDirs(p).WithRefer())
		case fi.IsDir():
			rules = append(rules, landlock.RODirs(p))
		case m.Writable:
			rules = append(rules, landlock.RWFiles(p))
		default:
			rules = append(rules, landlock.ROFiles(p))
		}
	}
	if err := cfg.Restrict(rules...); err != nil {
		return "", err
	}
	return "", nil
}
