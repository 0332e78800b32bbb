//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dropPrivileges leaves init (and so the command it forks) with no capability at all, in any set,
// and with no_new_privs, so that nothing executed later can gain one back: not a setuid binary, not
// a file capability, not an ambient capability inherited across exec.
//
// Capabilities are per thread. The command is forked from this (locked) thread, so dropping them
// here is what the command inherits. Init's other Go threads never start anything, but they run the
// rest of init (the publish channel, the runtime's own work) next to the command for the whole run,
// so they give up their capabilities too (dropOtherThreads): from the command's start on, no thread
// of the sandbox holds one.
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
	return dropOtherThreads()
}

// dropOtherThreads empties the permitted, effective and inheritable sets (and so the ambient set) of
// every thread of the runtime, with one capset on each (syscall.AllThreadsSyscall stops the world and
// runs it on all of them: pure Go only, as cordon is). Threads the runtime starts later are cloned
// from these and inherit the empty sets. Their bounding sets stay: a thread without permitted
// capabilities gains none but by exec, and only the locked thread, which dropped its bounding set,
// ever starts a program. It then checks every thread's sets (capget by thread id: reading each
// thread's /proc status instead cost 0.6 ms of the start here).
func dropOtherThreads() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset on every thread: %w", e)
	}
	return checkThreadsDropped("/proc/self/task", unix.Gettid())
}

// checkThreadsDropped asks capget(2) for the sets of each thread listed under dir (/proc/self/task)
// and fails on any thread that still holds a capability (the bounding set aside). self, a thread id
// the listing must hold and capget must find, keeps the check from passing on a listing it cannot
// read as this process's (a /proc of another pid namespace, whose ids capget would not find): 0
// checks a listing of another process.
func checkThreadsDropped(dir string, self int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing init's threads: %w", err)
	}
	seen := self == 0
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3, Pid: int32(tid)}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			if errors.Is(err, unix.ESRCH) && tid != self {
				continue // the thread has ended
			}
			return fmt.Errorf("thread %d's capabilities: %w", tid, err)
		}
		seen = seen || tid == self
		for _, d := range data {
			if d.Effective|d.Permitted|d.Inheritable != 0 {
				return fmt.Errorf("thread %d still holds capabilities after dropping them: %+v", tid, data)
			}
		}
	}
	if !seen {
		return fmt.Errorf("%s does not list this thread (%d): its threads cannot be checked", dir, self)
	}
	return nil
}
