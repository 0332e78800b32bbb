//go:build linux

package probe

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// streamProbes look at what the sandbox was handed as stdin, stdout and stderr. A sandbox that passes
// the caller's own descriptors in gives away host objects: a log file the agent can fchmod, truncate
// or overwrite from the start, a socket to whatever is at its other end, the caller's terminal. Only an
// anonymous pipe or a pseudo-terminal of the sandbox's own devpts is safe to hold.
func streamProbes() []Probe {
	return []Probe{
		{"fs.inherited-streams", FileSystem, "find one of the caller's files, sockets or devices on stdin, stdout or stderr", fsInheritedStreams},
	}
}

func fsInheritedStreams(_ context.Context, _ *Env) Verdict {
	var found, seen []string
	for fd := 0; fd <= 2; fd++ {
		ok, what := classifyStream(fd)
		if !ok {
			found = append(found, fmt.Sprintf("fd %d is %s", fd, what))
		}
		seen = append(seen, fmt.Sprintf("fd %d: %s", fd, what))
	}
	if len(found) > 0 {
		return fail("%s: a descriptor of the caller's, which the sandbox can change on the host (fchmod, ftruncate, lseek and overwrite, reopen via /proc/self/fd)", strings.Join(found, "; "))
	}
	return pass("%s", strings.Join(seen, "; "))
}

// classifyStream says what descriptor fd is and whether a sandbox may hold it: an anonymous pipe
// (pipefs; a named FIFO is an inode on a real file system), a pseudo-terminal of the devpts instance
// mounted at /dev/pts here (a sandbox's own: one from the caller's devpts is the caller's terminal),
// or nothing at all.
func classifyStream(fd int) (bool, string) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return true, "not open"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		var fs unix.Statfs_t
		err := unix.Fstatfs(fd, &fs)
		if err == nil && fs.Type == unix.PIPEFS_MAGIC {
			return true, "a pipe"
		}
		// gVisor's kernel shows a descriptor it imported from the host as host:[N] and answers no
		// statfs for it, so whether the host's object is a pipe is not visible from inside: there
		// it is what cordon handed the box, which is only ever an anonymous pipe (console.Attach
		// relays anything else) in either tier.
		if link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == unix.ENOSYS && strings.HasPrefix(link, "host:[") {
			return true, "a FIFO gVisor imported from the host (" + link + "; gVisor does not show whether it is named; cordon hands a box only anonymous pipes)"
		}
		return false, fmt.Sprintf("a named FIFO (inode %d, mode %#o, owner uid %d)", st.Ino, st.Mode&0o7777, st.Uid)
	case unix.S_IFREG:
		return false, fmt.Sprintf("a regular file (inode %d, %d bytes, mode %#o, owner uid %d)", st.Ino, st.Size, st.Mode&0o7777, st.Uid)
	case unix.S_IFSOCK:
		return false, "a socket"
	case unix.S_IFDIR:
		return false, fmt.Sprintf("a directory (inode %d)", st.Ino)
	case unix.S_IFCHR:
		var pts unix.Stat_t
		if unix.Major(st.Rdev) >= 136 && unix.Major(st.Rdev) <= 143 && unix.Stat("/dev/pts/ptmx", &pts) == nil && pts.Dev == st.Dev {
			return true, "a pseudo-terminal of this devpts"
		}
		return false, fmt.Sprintf("a character device %d:%d not of this sandbox's devpts", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFBLK:
		return false, fmt.Sprintf("a block device %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	return false, fmt.Sprintf("a file of type %#o", st.Mode&unix.S_IFMT)
}
