package services

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// MountArg0 is the argv[0] under which a program that starts services (cordon, its tests, the
// benchmark) runs as the overlay helper: the first process in a server's own user and mount
// namespace, which mounts the run's data directory as an overlay on the template and then execs the
// server. Such programs call MountMain when os.Args[0] is this (cordon.Init does).
//
// It exists for callers that are not root: only a process inside a user namespace it owns may
// mount there, and a Go program cannot run code between clone and exec, so the binary re-executes
// itself as this helper instead of copying the template.
const MountArg0 = "cordon-service-mount"

// mountRefused is the helper's exit status when the kernel refuses the mount: the caller falls back
// to a copy. mountRefusedPrefix starts the line it writes to the server's log saying why.
const (
	mountRefused       = 87
	mountRefusedPrefix = "cordon-service-mount: "
)

// MountMain is the helper: os.Args are MountArg0, the template (lower), upper, work, the data
// directory (the mount's target), then the server's argv. It mounts, drops every capability it was
// given for that, and execs the server; it returns only on failure, with the exit status.
func MountMain() int {
	// Capabilities are a thread's: the one that drops them is the one that execs.
	runtime.LockOSThread()
	a := os.Args[1:]
	if len(a) < 5 {
		fmt.Fprintln(os.Stderr, mountRefusedPrefix+"usage: LOWER UPPER WORK TARGET PROGRAM [ARG...]")
		return 2
	}
	if err := mountInNamespace(a[0], a[1], a[2], a[3]); err != nil {
		fmt.Fprintf(os.Stderr, "%s%v\n", mountRefusedPrefix, err)
		return mountRefused
	}
	if err := dropCapabilities(); err != nil {
		fmt.Fprintf(os.Stderr, "%sdropping capabilities: %v\n", mountRefusedPrefix, err)
		return 2
	}
	err := unix.Exec(a[4], a[4:], os.Environ())
	fmt.Fprintf(os.Stderr, "%sexec %s: %v\n", mountRefusedPrefix, a[4], err)
	return 2
}

// mountInNamespace makes the helper's mount namespace private (nothing it mounts reaches the
// parent's, which an unprivileged namespace's copy would not allow anyway) and mounts the overlay,
// with "userxattr": overlay's own attributes in the user.* namespace, the only one an unprivileged
// mount may write.
func mountInNamespace(lower, upper, work, target string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	for _, p := range []string{lower, upper, work} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("overlay: %q has a character overlay options cannot hold", p)
		}
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV,
		"lowerdir="+lower+",upperdir="+upper+",workdir="+work+",userxattr"); err != nil {
		return fmt.Errorf("mounting an overlay on %s in the server's user namespace: %w", lower, err)
	}
	return nil
}

// dropCapabilities clears the ambient set the helper was started with and every capability of this
// thread, so the server runs with none, even in its own user namespace.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capset(&hdr, &data[0])
}

// helperAttr adds to a server's namespaces the mount namespace its helper mounts in, and the
// capabilities it needs there, which MountMain drops before the server runs: CAP_SYS_ADMIN to mount,
// CAP_DAC_OVERRIDE for overlay's work directory (which it makes mode 0000). Both are the new user
// namespace's, where only the server's own id is mapped: they reach no file that id could not.
func helperAttr(attr *syscall.SysProcAttr) {
	attr.Cloneflags |= syscall.CLONE_NEWNS
	attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE}
}
