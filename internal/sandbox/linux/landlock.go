//go:build linux

package linux

import (
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

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

// restrictLandlock restricts init's thread, and so everything it starts, to the same file
// hierarchies the mounts expose, with the same read-only/read-write split. It is a second,
// independent layer: a mistake in the mount code (or a kernel bug in it) does not by itself open the
// host.
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
	// Only init's thread is restricted, and the command, forked from it, inherits its domain. On a
	// kernel without LANDLOCK_RESTRICT_SELF_TSYNC (ABI < 8) Restrict would restrict every thread of
	// init, through two stop-the-world rounds that signal each of the runtime's threads (psx): 0.4 of
	// the step's 0.5 ms. Init's other threads run nothing of the command's. InitMain locked this
	// thread and never unlocks it, as a thread-scoped ruleset requires.
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return "", err
	}
	if fd < 0 {
		return "", nil // nothing that this kernel can restrict (BestEffort)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return "", fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return "", nil
}
