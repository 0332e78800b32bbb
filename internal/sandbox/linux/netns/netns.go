//go:build linux

package netns

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// openNetNS opens nsPath and checks that it is a network namespace, so that a wrong path (a pid that
// was reused for a process in the host's namespace is still a network namespace, but /proc/N/ns/mnt or
// a regular file is not) errors instead of programming something else. The descriptor is never 0:
// google/nftables and mdlayher/netlink read NetNS 0 as "the current namespace", which would silently
// program the host.
func openNetNS(nsPath string) (int, error) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("netns: open %s: %w", nsPath, err)
	}
	if fd < 3 {
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		_ = unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("netns: dup %s: %w", nsPath, err)
		}
		fd = nfd
	}
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("netns: %s is not a namespace: %w", nsPath, err)
	}
	if typ != unix.CLONE_NEWNET {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("netns: %s is not a network namespace (type %#x)", nsPath, typ)
	}
	return fd, nil
}

// nsID identifies a namespace by the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

func fdNSID(fd int) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsID{}, fmt.Errorf("netns: fstat namespace: %w", err)
	}
	return nsID{st.Dev, st.Ino}, nil
}

func threadNSID() (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nsID{}, fmt.Errorf("netns: stat this thread's network namespace: %w", err)
	}
	return nsID{st.Dev, st.Ino}, nil
}

// setnsNet moves the calling thread into the network namespace fd refers to.
func setnsNet(fd int) error { return unix.Setns(fd, unix.CLONE_NEWNET) }

// inNetNS runs fn on an OS thread of its own that has entered the network namespace nsFD, so that any
// socket fn creates belongs to that namespace, and then returns the thread to the namespace it came
// from. fn must not start goroutines or block on the Go scheduler for work that needs the namespace:
// only this thread is in it.
func inNetNS(nsFD int, fn func() error) error {
	return inNetNSWith(nsFD, fn, setnsNet)
}

// inNetNSWith is inNetNS with the setns call given, so that a test can make the return fail. A thread
// whose return fails (or cannot be verified) stays locked and its goroutine exits, which makes the Go
// runtime terminate the thread instead of handing it, still in the sandbox's namespace, to other code.
func inNetNSWith(nsFD int, fn func() error, setns func(fd int) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// From here on the thread is unlocked only once it is verified to be back where it started.
		clean, err := enterRunReturn(nsFD, fn, setns)
		if clean {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// enterRunReturn does the work of inNetNSWith on the locked thread. It reports (first) whether the thread is
// verifiably back in its original namespace and may be reused.
func enterRunReturn(nsFD int, fn func() error, setns func(fd int) error) (clean bool, err error) {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("netns: open this thread's network namespace: %w", err)
	}
	defer func() { _ = unix.Close(orig) }()
	origID, err := fdNSID(orig)
	if err != nil {
		return true, err
	}
	wantID, err := fdNSID(nsFD)
	if err != nil {
		return true, err
	}

	if err := setns(nsFD); err != nil {
		// setns either moved the thread or did not; check rather than assume.
		if now, serr := threadNSID(); serr != nil || now != origID {
			return false, fmt.Errorf("netns: enter namespace: %w (and the thread's namespace changed)", err)
		}
		return true, fmt.Errorf("netns: enter namespace: %w", err)
	}
	var runErr error
	if now, serr := threadNSID(); serr != nil {
		runErr = serr
	} else if now != wantID {
		runErr = errors.New("netns: setns succeeded but the thread is not in the requested namespace")
	} else {
		runErr = fn()
	}

	if rerr := setns(orig); rerr != nil {
		return false, errors.Join(runErr, fmt.Errorf("netns: return to the original namespace: %w", rerr))
	}
	if now, serr := threadNSID(); serr != nil {
		return false, errors.Join(runErr, serr)
	} else if now != origID {
		return false, errors.Join(runErr, errors.New("netns: the thread did not return to its original namespace"))
	}
	return true, runErr
}
