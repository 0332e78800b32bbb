//go:build linux

package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Filter is a compiled filter, ready to install. Compiling takes a few hundred microseconds in a
// fresh process; init compiles the one its spec asks for on a goroutine while its locked thread
// builds the root, off the path that starts the command.
type Filter struct {
	prog []unix.SockFilter
}

// Compile assembles the filter for opts.
func Compile(opts Options) (*Filter, error) {
	prog, err := Program(opts)
	if err != nil {
		return nil, err
	}
	if len(prog) == 0 || len(prog) > maxInstructions {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, want 1 to %d", len(prog), maxInstructions)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	return &Filter{prog: filter}, nil
}

// Install compiles the filter for opts and installs it; see Filter.Install.
func Install(opts Options) error {
	f, err := Compile(opts)
	if err != nil {
		return err
	}
	return f.Install()
}

// Install loads the filter for every thread of the calling process (SECCOMP_FILTER_FLAG_TSYNC via the
// seccomp(2) syscall), so no goroutine's thread is left unfiltered. The caller has already set
// no_new_privs; Install sets it again on the thread it uses, which costs nothing and lets TSYNC carry it
// to every thread whichever thread the caller set it on. The kernel applies a TSYNC filter to all
// threads or to none, so on error nothing has been installed.
func (f *Filter) Install() error {
	filter := f.prog
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter (%d instructions): %w", len(filter), errno)
	}
	if tid != 0 {
		return fmt.Errorf("seccomp: install filter: thread %d cannot be synchronized (it has a filter of its own); nothing was installed", tid)
	}
	return nil
}
