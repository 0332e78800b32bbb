package services

import (
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/mountinfo"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// insideID is the id a server has inside its user namespace: "nobody", which has an account on
// every Debian-like system, so that initdb (which looks its user up) works for an id that has none on
// the host.
const insideID = 65534

// sysProcAttr puts a server or client in a user namespace of its own, in which the servers' host id
// (ids, or the caller's own) is insideID and nothing else is mapped: no capability it holds there
// reaches anything of the host. Its own network namespace holds nothing but a loopback that is down,
// so it can open no TCP port any host process could find (a unix socket bound to a path still works:
// that is the file system's); its own IPC namespace keeps one run's shared memory from another's. The
// kernel kills it when cordon dies (Pdeathsig: cordon's threads never exit while it runs).
func sysProcAttr(ids IDs, server bool) (*syscall.SysProcAttr, error) {
	uid, gid := os.Getuid(), os.Getgid()
	if ids.Switch {
		uid, gid = ids.UID, ids.GID
	}
	attr := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: insideID, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: insideID, HostID: gid, Size: 1}},
		Credential:  &syscall.Credential{Uid: insideID, Gid: insideID, NoSetGroups: true},
		Pdeathsig:   syscall.SIGKILL,
	}
	if server {
		attr.Setpgid = true // a Ctrl-C at the terminal is cordon's to handle, not the server's
	}
	return attr, nil
}

// mountOverlay mounts lower (a template, read-only to the run) under upper's changes at target: a
// run's copy of a template that costs nothing to make. Only root can; callers fall back to a copy.
func mountOverlay(lower, upper, work, target string) error {
	for _, p := range []string{lower, upper, work} {
		if strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("overlay: %q has a character overlay options cannot hold", p)
		}
	}
	return unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV,
		"lowerdir="+lower+",upperdir="+upper+",workdir="+work)
}

// unmountBelow detaches every mount at or below dir (a run's overlays, which a killed cordon left),
// the deepest first.
func unmountBelow(dir string) {
	points, err := mountinfo.Under(dir)
	if err != nil {
		return
	}
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}
