package workspace

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// The few calls whose form differs between kernels live here and in sys_other.go, so that the
// workspace (diff, apply, export) builds wherever cordon does; the overlay itself is Linux's.

// statTimes returns a stat's modification and status-change times in nanoseconds, and its device.
func statTimes(st *syscall.Stat_t) (mtime, ctime int64, dev uint64) {
	return st.Mtim.Nano(), st.Ctim.Nano(), st.Dev
}

// cloneFile makes dst share src's extents (FICLONE), where the file system can.
func cloneFile(dst, src int) error { return unix.IoctlFileClone(dst, src) }

// mknodLike makes a device node at dst of the same type and number as st.
func mknodLike(dst string, st *unix.Stat_t) error {
	return unix.Mknod(dst, st.Mode&unix.S_IFMT|0o600, int(st.Rdev))
}

// syncFS flushes the file system that holds fd.
func syncFS(fd int) error { return unix.Syncfs(fd) }

// allocate reserves size bytes for fd, so that a disk image cannot run out of blocks later.
func allocate(fd int, size int64) error { return unix.Fallocate(fd, 0, 0, size) }
