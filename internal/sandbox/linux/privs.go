//go:build linux

package linux

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// dropPrivileges leaves init (and so the command it forks) with no capability at all, in any set,
// and with no_new_privs, so that nothing executed later can gain one back: not a setuid binary, not
// a file capability, not an ambient capability inherited across exec.
//
// Capabilities are per thread. The command is forked from this (locked) thread, so dropping them
// here is what the command inherits; init's other Go threads are never used to start anything.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Init must not be inspectable by what it runs: no ptrace attach, no /proc/1/mem.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("bounding set, capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	// Verify rather than trust: a kernel that silently kept a capability must not run the command.
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("capabilities remain after dropping them: %+v", data)
		}
	}
	return nil
}
