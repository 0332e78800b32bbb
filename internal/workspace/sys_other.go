//go:build !linux

package workspace

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// statTimes returns a stat's modification and status-change times in nanoseconds, and its device.
func statTimes(st *syscall.Stat_t) (mtime, ctime int64, dev uint64) {
	return st.Mtimespec.Nano(), st.Ctimespec.Nano(), uint64(st.Dev)
}

// cloneFile is not offered here: copies are made byte by byte.
func cloneFile(dst, src int) error { return errors.ErrUnsupported }

// mknodLike makes a device node at dst of the same type and number as st.
func mknodLike(dst string, st *unix.Stat_t) error {
	return unix.Mknod(dst, uint32(st.Mode&unix.S_IFMT|0o600), int(st.Rdev))
}

// syncFS flushes the file system that holds fd; without syncfs(2), fsync of fd and sync(2).
func syncFS(fd int) error {
	if err := unix.Fsync(fd); err != nil {
		return err
	}
	unix.Sync()
	return nil
}

// allocate sets the file's size; blocks are not reserved ahead.
func allocate(fd int, size int64) error { return unix.Ftruncate(fd, size) }
