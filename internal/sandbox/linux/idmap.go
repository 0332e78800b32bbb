//go:build linux

package linux

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/warn"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// When cordon runs as root, the sandbox's user namespace must not map anything to host uid 0: an
// inherited descriptor, a bind mount or a kernel bug would otherwise let the agent act on the host
// as root. The agent's uid and gid inside are mapped instead to ids of a range reserved for cordon,
// which no account on the host owns, and nothing else is mapped (init runs as the same uid inside,
// with capabilities over its own namespaces only, so the namespace's root is not mapped at all).
//
// The range is the one /etc/subuid and /etc/subgid give the user "cordon" (the convention for
// subordinate ids: `cordon:BASE:COUNT`), else DefaultIDBase with DefaultIDCount ids. Inside id N maps
// to BASE+N, as with any subordinate range, so the agent (uid 1000 inside) is BASE+1000 on the host.
// Every run as root uses that same id: runs are separated from each other by their namespaces, not
// by distinct ids.
//
// The host paths the sandbox shows are opened by cordon outside, as detached copies of their mounts
// (open_tree), and handed to init, which could not even look up a path under a 0700 directory of
// root's. The workspace's are idmapped: files the caller (root) owns on disk appear as the agent's
// own, and what the agent writes into the upper layer is stored as root's, exactly as before, so
// that diff, apply and export see the same layer. A read-only policy path is idmapped the same way,
// for reading (a read-only mount changes nothing, whoever owns it). A writable policy path is not:
// it keeps its host owners, and the agent has on it the rights of a stranger uid, so a readwrite
// path must let BASE+1000 write. Nowhere outside the workspace, whose changes go through review, does
// the agent write with root's rights.

// DefaultIDBase and DefaultIDCount are the host id range cordon maps its sandbox to when it runs as
// root and /etc/subuid has no entry for "cordon": above every range useradd hands out for
// subordinate ids and systemd's container ranges, and below 2^31, which some tools mishandle.
const (
	DefaultIDBase  = 2000000000
	DefaultIDCount = 65536
)

// idRangeUser is the name looked up in /etc/subuid and /etc/subgid.
const idRangeUser = "cordon"

// hostIDs are the host uid and gid the agent's ids inside map to when cordon runs as root.
type hostIDs struct {
	UID, GID int
	// Runtime, when set, are the host ids of a Runtime's own processes (root in the box's user
	// namespace): the idmapped mounts also map them, to on-disk nobody, so that the runtime can
	// create a file there before it gives the file to the agent's uid (runsc's Sentry creates as
	// itself, then chowns).
	Runtime *hostIDs
}

// diskNobody is the on-disk id a Runtime's own ids map to in the idmapped mounts.
const diskNobody = 65534

// RootSandboxIDs are the host uid and gid that the sandbox user u maps to when cordon runs as
// root: what owns, on the host, the files the agent makes in a readwrite path, and what such a path
// must let write.
func RootSandboxIDs(u sandbox.User) (uid, gid int, err error) {
	ids, err := rootHostIDs(u, hostIDFiles())
	return ids.UID, ids.GID, err
}

// idFiles are the host files the range and its collisions are read from (other paths in tests).
type idFiles struct {
	SubUID, SubGID, Passwd, Group, NSSwitch string
}

// hostIDFiles are the host's own.
func hostIDFiles() idFiles {
	return idFiles{SubUID: "/etc/subuid", SubGID: "/etc/subgid", Passwd: "/etc/passwd", Group: "/etc/group", NSSwitch: "/etc/nsswitch.conf"}
}

// rootHostIDs picks the host ids for the sandbox user u from the reserved range, refusing ids that
// an account or group of the host owns, or that another user's subordinate range hands out (the
// agent would act with its rights, or that user's containers with the agent's). A file that exists
// but cannot be read is an error: it may name the owner.
func rootHostIDs(u sandbox.User, files idFiles) (hostIDs, error) {
	uid, err := fromRange(files.SubUID, u.UID)
	if err != nil {
		return hostIDs{}, err
	}
	gid, err := fromRange(files.SubGID, u.GID)
	if err != nil {
		return hostIDs{}, err
	}
	for _, c := range []struct {
		kind, db, sub, file, subFile string
		id                           int
	}{
		{"uid", "passwd", "user", files.Passwd, files.SubUID, uid},
		{"gid", "group", "group", files.Group, files.SubGID, gid},
	} {
		name, ok, err := idOwner(c.file, c.id)
		if err == nil && !ok {
			name, ok, err = nssOwner(files.NSSwitch, c.db, c.id)
		}
		if err != nil {
			return hostIDs{}, fmt.Errorf("checking that host %s %d, where the sandbox %s would map, belongs to no one: %w", c.kind, c.id, c.sub, err)
		}
		if ok {
			return hostIDs{}, fmt.Errorf("host %s %d, where the sandbox %s would map, belongs to %q; reserve a free range with a line \"%s:BASE:COUNT\" in %s", c.kind, c.id, c.sub, name, idRangeUser, c.subFile)
		}
		name, ok, err = subordinateOwner(c.subFile, c.id)
		if err != nil {
			return hostIDs{}, err
		}
		if ok {
			return hostIDs{}, fmt.Errorf("host %s %d, where the sandbox %s would map, is in the subordinate range of %q in %s; reserve a range no one else has with a line \"%s:BASE:COUNT\" there", c.kind, c.id, c.sub, name, c.subFile, idRangeUser)
		}
	}
	return hostIDs{UID: uid, GID: gid}, nil
}

// subordinateOwner reports another name than cordon's whose range in a subuid or subgid file holds
// id (a name may have several lines; each is a range).
func subordinateOwner(file string, id int) (string, bool, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Split(strings.TrimSpace(line), ":")
		if len(fields) != 3 || fields[0] == idRangeUser {
			continue
		}
		b, err1 := strconv.ParseUint(fields[1], 10, 32)
		c, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil {
			continue // not a range: the tools that use the file ignore it too
		}
		if uint64(id) >= b && uint64(id) < b+c {
			return fields[0], true, nil
		}
	}
	return "", false, nil
}

// nssOwner asks the name service, through getent, who owns id, when nsswitch.conf names a source
// for db beyond the local files that idOwner read (LDAP, SSSD, NIS): an account there is an account
// too. Without such a source nothing is run.
func nssOwner(nsswitch, db string, id int) (string, bool, error) {
	data, err := os.ReadFile(nsswitch)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !remoteSources(data, db) {
		return "", false, nil
	}
	// From the system's directories: cordon runs it as root, and the caller's PATH may name the
	// project's.
	getent, err := hosttool.System("getent")
	if err != nil {
		return "", false, fmt.Errorf("nsswitch.conf names other sources for %s; asking getent: %w", db, err)
	}
	out, err := exec.Command(getent, db, strconv.Itoa(id)).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return "", false, nil // getent's "not found"
	}
	if err != nil {
		return "", false, fmt.Errorf("nsswitch.conf names other sources for %s; asking getent: %w", db, err)
	}
	name, _, _ := strings.Cut(string(out), ":")
	return name, true, nil
}

// remoteSources reports whether the nsswitch.conf contents name, for db, a source other than the
// local files (files, compat without NIS entries is close enough to files to be read by idOwner)
// and systemd's dynamic users (which never take ids of cordon's range).
func remoteSources(data []byte, db string) bool {
	for _, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		key, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(key) != db {
			continue
		}
		for _, src := range strings.Fields(rest) {
			if strings.HasPrefix(src, "[") {
				continue // an action, [NOTFOUND=return]
			}
			switch src {
			case "files", "systemd", "compat":
			default:
				return true
			}
		}
	}
	return false
}

// fromRange is BASE+id for the range file gives "cordon", or for the default range.
func fromRange(file string, id int) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	base, count, found, err := parseSubordinate(data, idRangeUser)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	if !found {
		base, count = DefaultIDBase, DefaultIDCount
	}
	if id < 0 || id >= count {
		return 0, fmt.Errorf("%s: the range of %q has %d ids; the sandbox's id %d does not fit", file, idRangeUser, count, id)
	}
	return base + id, nil
}

// parseSubordinate reads name's first range from the contents of a subuid/subgid file
// (NAME:BASE:COUNT lines). A malformed line for name is an error, not a silent default; a range
// that starts at 0 (it would map the sandbox to root) or runs past the last id is malformed.
func parseSubordinate(data []byte, name string) (base, count int, found bool, err error) {
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Split(strings.TrimSpace(line), ":")
		if len(fields) != 3 || fields[0] != name {
			continue
		}
		b, err1 := strconv.ParseUint(fields[1], 10, 32)
		c, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil || c == 0 || b == 0 || b+c > 1<<32-1 {
			return 0, 0, false, fmt.Errorf("malformed range %q for %q", strings.TrimSpace(line), name)
		}
		return int(b), int(c), true, nil
	}
	return 0, 0, false, nil
}

// idOwner reports the name that owns id in a passwd or group file (NAME:x:ID:...); a file that is
// absent owns nothing, one that cannot be read is an error.
func idOwner(file string, id int) (string, bool, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	want := strconv.Itoa(id)
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Split(line, ":")
		if len(fields) >= 3 && fields[2] == want {
			return fields[0], true, nil
		}
	}
	return "", false, nil
}

// startIdmapUserns makes the id-mapping user namespace (idmapUserns) in the background, from the
// launch on, and returns the wait for it, which must be called once (the namespace is the caller's
// to close). The helper's fork and exec then overlap the caller's preparation of the run instead of
// lying between it and init's config.
func startIdmapUserns(exe string, ids hostIDs) func() (*os.File, error) {
	type result struct {
		ns  *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ns, err := idmapUserns(exe, ids)
		ch <- result{ns, err}
	}()
	return func() (*os.File, error) {
		r := <-ch
		return r.ns, r.err
	}
}

// idmapUserns creates the user namespace that idmaps the workspace's mounts: on-disk uid and gid
// 0 (root, the caller) appear as ids.UID and ids.GID. A user namespace lives as long as a process or
// a descriptor holds it; a child is cloned into a new one and stopped by ptrace at its exec (it runs
// none of its code), the namespace is opened, and the child killed. (A host whose Yama ptrace_scope
// is 3 forbids even a child's PTRACE_TRACEME: cordon as root then stops with this error.)
func idmapUserns(exe string, ids hostIDs) (*os.File, error) {
	// The child is traced by this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	uidMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: ids.UID, Size: 1}}
	gidMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: ids.GID, Size: 1}}
	if rt := ids.Runtime; rt != nil {
		uidMap = append(uidMap, syscall.SysProcIDMap{ContainerID: diskNobody, HostID: rt.UID, Size: 1})
		gidMap = append(gidMap, syscall.SysProcIDMap{ContainerID: diskNobody, HostID: rt.GID, Size: 1})
	}
	pid, err := syscall.ForkExec(exe, []string{"cordon-idmap"}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: uidMap,
			GidMappings: gidMap,
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the id-mapping user namespace: %w", err)
	}
	ns, openErr := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	unix.Kill(pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err == unix.EINTR {
			continue
		} else if err != nil || ws.Exited() || ws.Signaled() {
			break
		}
	}
	if openErr != nil {
		return nil, fmt.Errorf("opening the id-mapping user namespace: %w", openErr)
	}
	return ns, nil
}

// errNotAsChecked is why openResolved refuses a path: it is no longer what was checked.
var errNotAsChecked = errors.New("the path changed after it was checked")

// openResolved opens path, which the caller resolved with every symbolic link followed and then
// checked (not in the project when writable, not overlapping cordon's state), as an O_PATH descriptor
// that pins what was checked. As root, cordon opens these paths with root's rights, so a component
// that became a symbolic link in between (swapped by another run's agent through a writable policy
// path, say) must not be followed: openat2 with RESOLVE_NO_SYMLINKS refuses it, and the descriptor's
// own path must still be the one checked.
func openResolved(path string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s: a component of the path is a symbolic link now, after the path was resolved and checked; refusing to follow it with root's rights: %w", path, errNotAsChecked)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if got, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || got != path {
		f.Close()
		return nil, fmt.Errorf("%s: opened as %q, not the path that was checked; refusing it: %w", path, got, errNotAsChecked)
	}
	return f, nil
}

// detachedMount returns a detached copy of the mount tree at dir (recursively), an O_PATH descriptor
// from openResolved, made by cordon on the host so that init needs no access to the path itself.
// With userns, the copy is idmapped through it; readOnly makes it read-only as well.
func detachedMount(dir *os.File, userns *os.File, readOnly bool) (*os.File, error) {
	path := dir.Name()
	fd, err := unix.OpenTree(int(dir.Fd()), "", unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("open_tree %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	attr := &unix.MountAttr{}
	if userns != nil {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns.Fd())
	}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if attr.Attr_set != 0 {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			f.Close()
			if userns != nil {
				return nil, fmt.Errorf("idmapping %s: %w", path, err)
			}
			return nil, fmt.Errorf("mount_setattr %s: %w", path, err)
		}
	}
	return f, nil
}

// detachedMountAt is detachedMount of the path, opened with openResolved.
func detachedMountAt(path string, userns *os.File, readOnly bool) (*os.File, error) {
	dir, err := openResolved(path)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return detachedMount(dir, userns, readOnly)
}

// maxHostSources bounds the descriptors one message carries (the kernel's SCM_MAX_FD is 253).
const maxHostSources = 250

// openHostSources opens, on the host, every path the spec shows inside, in the order init takes
// them (hostSources): the workspace's source (the overlay's lower layer, read-only, or the copy),
// then the directory holding the overlay's upper and work directories, both idmapped so that the
// caller's files are the agent's; then each policy mount: idmapped too when it is read-only, with
// its host owners when it is writable, so that the agent never writes with root's rights outside
// the workspace (whose changes go through review).
//
// userns is the id-mapping user namespace (idmapUserns); the caller closes it.
func openHostSources(userns *os.File, spec *sandbox.Spec, ids hostIDs, w warn.Func) (files []*os.File, err error) {
	if n := 2 + len(spec.Mounts) + cacheCount(spec); n > maxHostSources {
		return nil, fmt.Errorf("%d policy paths: at most %d can be shown when cordon runs as root", len(spec.Mounts), maxHostSources-2)
	}
	defer func() {
		if err != nil {
			closeAll(files)
			files = nil
		}
	}()
	ws := spec.Workspace
	source := ws.Source
	if ws.Overlay == nil {
		// The copy is in cordon's own state directory, which no agent can write: its links are
		// resolved here. The project itself (the overlay's lower layer) was resolved when it was
		// chosen, and must still be what was resolved.
		if real, err := filepath.EvalSymlinks(source); err == nil {
			source = real
		}
	}
	src, err := detachedMountAt(source, userns, ws.Overlay != nil)
	if err != nil && ws.Overlay != nil && !errors.Is(err, errNotAsChecked) {
		// The project's file system cannot be idmapped (ramfs, some network and FUSE file
		// systems): the caller falls back to a copy in cordon's state directory, as it does when
		// overlayfs itself is unavailable, and that copy is idmapped instead.
		return nil, &sandbox.SetupError{Step: stepOverlay, Err: sandbox.NoOverlay(err)}
	}
	if err != nil {
		return nil, fmt.Errorf("as root, the workspace must be on a file system that can be idmapped: %w", err)
	}
	files = append(files, src)
	if ws.Overlay != nil {
		layers := filepath.Dir(ws.Overlay.Upper)
		if filepath.Dir(ws.Overlay.Work) != layers {
			return files, fmt.Errorf("the overlay's upper (%s) and work (%s) directories are not in one directory", ws.Overlay.Upper, ws.Overlay.Work)
		}
		// cordon's own directory, which no agent can write: its links (a state root under a
		// linked home, say) are resolved here.
		if real, err := filepath.EvalSymlinks(layers); err == nil {
			layers = real
		}
		f, err := detachedMountAt(layers, userns, false)
		if err != nil {
			return files, err
		}
		files = append(files, f)
	}
	for _, m := range spec.Mounts {
		dir, err := openResolved(m.Source)
		if err != nil {
			return files, err
		}
		var f *os.File
		if m.Overlay != nil {
			// A cache: its lower layer idmapped and read-only (the host's files read as the agent's
			// and copy up as its own), then its layers' directory in the run's, idmapped too.
			f, err = detachedMount(dir, userns, true)
			dir.Close()
			if err != nil {
				return files, fmt.Errorf("cache %s: %w (filesystem.caches: [] shows no caches)", m.Source, err)
			}
			files = append(files, f)
			layers := filepath.Dir(m.Overlay.Upper)
			if real, err := filepath.EvalSymlinks(layers); err == nil {
				layers = real
			}
			if f, err = detachedMountAt(layers, userns, false); err != nil {
				return files, err
			}
			files = append(files, f)
			continue
		}
		f, err = policyMount(dir, m, userns, w)
		dir.Close()
		if err != nil {
			return files, err
		}
		if m.Writable && !mayWrite(f, ids) {
			w.Printf("filesystem.readwrite: %s is not writable by uid %d, as which the agent writes there when cordon runs as root; give it access (chown or an ACL) or run cordon as an ordinary user", m.Source, ids.UID)
		}
		files = append(files, f)
	}
	return files, nil
}

// policyMount is the detached copy of one policy path: idmapped and read-only for a read-only path
// where its file system allows, else with its host owners.
func policyMount(dir *os.File, m sandbox.Mount, userns *os.File, w warn.Func) (*os.File, error) {
	if !m.Writable {
		// Read-only, the caller's files may as well read as the agent's own (a 0600 file of root's
		// stays readable, as the policy asked): nothing of them can change. A tree with a file
		// system that cannot be idmapped is shown with its host owners instead.
		f, err := detachedMount(dir, userns, true)
		if err == nil {
			return f, nil
		}
		w.Printf("filesystem.readonly: %s is shown with its host owners (%v)", m.Source, err)
	}
	return detachedMount(dir, nil, false)
}

// mayWrite guesses from its owner and mode whether the agent's host ids may write the root of a
// writable policy path; one with an access ACL is given the benefit of the doubt. It only decides
// whether to warn: the kernel decides the access.
func mayWrite(f *os.File, ids hostIDs) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return true
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return true
	}
	switch {
	case int(st.Uid) == ids.UID:
		return st.Mode&0o200 != 0
	case int(st.Gid) == ids.GID:
		return st.Mode&0o020 != 0
	case st.Mode&0o002 != 0:
		return true
	}
	// The descriptor is O_PATH, which fgetxattr refuses; its /proc link is not.
	_, err := unix.Getxattr(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), "system.posix_acl_access", nil)
	return err == nil
}

// hostSources are the descriptors openHostSources made, as init receives them.
type hostSources struct {
	workspace   *os.File   // the workspace's source or overlay lower layer
	layers      *os.File   // the directory holding upper and work, with an overlay
	mounts      []*os.File // one per spec.Mounts, in order (a cache's lower layer)
	cacheLayers []*os.File // one per spec.Mounts: a cache's layers directory, else nil
}

// cacheCount is how many of the spec's mounts are caches (two descriptors each).
func cacheCount(spec *sandbox.Spec) int {
	n := 0
	for _, m := range spec.Mounts {
		if m.Overlay != nil {
			n++
		}
	}
	return n
}

// close closes every descriptor; a nil set has none.
func (s *hostSources) close() {
	if s == nil {
		return
	}
	closeAll(append(append([]*os.File{s.workspace, s.layers}, s.mounts...), s.cacheLayers...))
}

// receiveHostSources reads the message with openHostSources' descriptors from the status channel.
func receiveHostSources(sock int, spec *sandbox.Spec) (*hostSources, error) {
	want := 1 + len(spec.Mounts) + cacheCount(spec)
	if spec.Workspace.Overlay != nil {
		want++
	}
	files, err := receiveDescriptors(sock, kindHostSources, want, maxHostSources, "host paths")
	if err != nil {
		return nil, err
	}
	s := &hostSources{workspace: files[0]}
	rest := files[1:]
	if spec.Workspace.Overlay != nil {
		s.layers, rest = files[1], files[2:]
	}
	s.mounts = make([]*os.File, len(spec.Mounts))
	s.cacheLayers = make([]*os.File, len(spec.Mounts))
	for i, m := range spec.Mounts {
		s.mounts[i], rest = rest[0], rest[1:]
		if m.Overlay != nil {
			s.cacheLayers[i], rest = rest[0], rest[1:]
		}
	}
	return s, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
