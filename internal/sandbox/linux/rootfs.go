//go:build linux

package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/starttrace"
)

// Paths inside init's private mount namespace while the root is being built. The scratch tmpfs is
// mounted over /tmp and pivoted to; the host's root then lives at oldRoot, and the sandbox's root is
// assembled at newRoot before the final pivot detaches everything else.
const (
	scratchDir = "/tmp"
	oldRoot    = "/oldroot"
	newRoot    = "/newroot"
	emptyFile  = "/empty"
)

// stepOverlay names the setup step that mounts a copy-on-write workspace. Its failure wraps
// sandbox.ErrNoOverlay: the caller can fall back to a copied workspace, since the host lacks
// overlayfs in a user namespace, nothing more.
const stepOverlay = "mounting the copy-on-write workspace (overlayfs)"

// systemDirs are the host directories every program needs, bound read-only at the same path. On a
// merged-/usr system most are symlinks into /usr and are recreated as such.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// devices are the host device nodes bound into the sandbox's /dev. Nothing else of the host's /dev is
// there: no disks, no /dev/kmsg, no /dev/mem.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// rootStep is one step of building the root, named for error messages.
type rootStep struct {
	name string
	fn   func() error
}

// buildBase assembles the part of the sandbox's root that is the same for every sandbox: the scratch
// root it works from, the new root's tmpfs, the system directories, /proc and /dev. It runs in init,
// inside the new user and mount namespaces, before the config arrives, so that this work overlaps
// cordon's preparation of the run; buildRoot completes the root from the spec.
func buildBase() error {
	return runSteps([]rootStep{
		{"making mounts private", func() error {
			return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}},
		{"mounting the scratch root", func() error {
			if err := unix.Mount("tmpfs", scratchDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
				return err
			}
			for _, d := range []string{scratchDir + oldRoot, scratchDir + newRoot} {
				if err := os.Mkdir(d, 0o755); err != nil {
					return err
				}
			}
			if err := unix.Mknod(scratchDir+emptyFile, unix.S_IFREG|0o444, 0); err != nil {
				return fmt.Errorf("mknod %s: %w", emptyFile, err)
			}
			if err := unix.PivotRoot(scratchDir, scratchDir+oldRoot); err != nil {
				return fmt.Errorf("pivot_root: %w", err)
			}
			return os.Chdir("/")
		}},
		{"mounting the new root", func() error {
			return unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")
		}},
		{"binding system directories", func() error { return bindSystemDirs() }},
		{"mounting /proc", func() error { return mountProc() }},
		{"building /dev", func() error { return buildDev() }},
	})
}

// buildRoot completes the root that buildBase began with what the spec names, and pivots into it,
// leaving nothing of the host visible but what the spec names (under a Runtime, it readies the
// scratch root for the runtime instead and detaches the host's). srcs, when cordon runs as root, are
// the workspace and policy paths as cordon opened them on the host.
func buildRoot(cfg *initConfig, srcs *hostSources, etcFiles []*os.File) error {
	spec := &cfg.Spec
	return runSteps([]rootStep{
		{"building /etc", func() error { return buildEtc(cfg.Etc, etcFiles) }},
		{"mounting the workspace, home, /tmp and policy paths", func() error {
			// Under a Runtime init is root in its namespace, and the overlay must be made as the
			// sandbox user still: it writes its upper layer with its maker's ids.
			var creator *sandbox.User
			if cfg.Runtime != nil {
				creator = &cfg.User
			}
			return mountTree(spec, cfg.User.Home, srcs, creator)
		}},
		{"masking denied paths", func() error { return maskPaths(spec.Masks) }},
		{"making workspace paths read-only", func() error { return readOnlyPaths(spec.ReadOnly) }},
		{"sealing the root", func() error {
			return unix.Mount("", newRoot, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
		}},
		{"pivoting into the new root", func() error {
			if cfg.Runtime != nil {
				return prepareRuntime(cfg.Runtime)
			}
			return enterRoot()
		}},
	})
}

func runSteps(steps []rootStep) error {
	for _, s := range steps {
		err := s.fn()
		starttrace.Mark(s.name)
		if err != nil {
			var se *sandbox.SetupError
			if errors.As(err, &se) {
				return se
			}
			return &sandbox.SetupError{Step: s.name, Err: err}
		}
	}
	return nil
}

func host(p string) string   { return oldRoot + p }
func inRoot(p string) string { return newRoot + p }

func bindSystemDirs() error {
	for _, d := range systemDirs {
		fi, err := os.Lstat(host(d))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(host(d))
			if err != nil {
				return err
			}
			if err := os.Symlink(target, inRoot(d)); err != nil {
				return err
			}
			continue
		}
		if !fi.IsDir() {
			continue
		}
		if err := bindMount(host(d), inRoot(d), false); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	return nil
}

// bindMount binds src over dst (created as needed: a directory or an empty file, like src), recursively,
// and applies read-only (unless writable), nosuid and nodev to the whole subtree at once.
func bindMount(src, dst string, writable bool) error {
	if err := bind(src, dst); err != nil {
		return err
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if !writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	return nil
}

// bind binds src over dst (created as needed: a directory or an empty file, like src), recursively,
// with the source's own mount attributes; the caller applies the sandbox's.
func bind(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := ensureTarget(dst, fi.IsDir()); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", strings.TrimPrefix(src, oldRoot), err)
	}
	return nil
}

// ensureTarget creates a mount point: a directory, or an empty file, with any missing parents. A name
// that exists is left as it is (a bind over a file already there). A symbolic link in its place is
// left too, never followed to create anything: an open with O_CREAT would have made the link's
// target, wherever init can see it (the host's root among those places, until the last pivot). The
// mount made there afterwards resolves the name as mount(2) does; the paths cordon mounts were
// resolved on the host first, and as root are attached from descriptors opened without links.
//
// The mount point is made first and its parents only when they are missing: they nearly always
// exist (the tmpfs just mounted, the entry before), and init makes some fifty mount points on the way
// to the command, where os.MkdirAll would look up each path and its parent first and os.OpenFile
// and Close would take seven system calls for an empty file.
func ensureTarget(dst string, dir bool) error {
	create := func() error {
		if dir {
			return unix.Mkdir(dst, 0o755)
		}
		return unix.Mknod(dst, unix.S_IFREG|0o644, 0)
	}
	err := create()
	if err == unix.ENOENT {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		err = create()
	}
	if err != nil && err != unix.EEXIST {
		op := "mknod"
		if dir {
			op = "mkdir"
		}
		return &os.PathError{Op: op, Path: dst, Err: err}
	}
	return nil
}

// createFile creates dst, a new regular file (0644), open for writing. The descriptor is opened
// directly and handed to os.NewFile, which keeps a blocking regular file out of the runtime's
// poller: two system calls where os.OpenFile takes six (the poller's registration, refused for a
// regular file, and the flags set back).
func createFile(dst string) (*os.File, error) {
	fd, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: dst, Err: err}
	}
	return os.NewFile(uintptr(fd), dst), nil
}

// writeNewFile creates dst (0644) with content b.
func writeNewFile(dst string, b []byte) error {
	f, err := createFile(dst)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// buildEtc makes the sandbox's /etc from entries; a generated entry's content is inline or, when
// its File is set, in that descriptor of files.
func buildEtc(entries []etcEntry, files []*os.File) error {
	etc := inRoot("/etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", etc, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return err
	}
	for _, e := range entries {
		dst := filepath.Join(etc, e.Name)
		var err error
		switch e.Kind {
		case "symlink":
			err = os.Symlink(e.Target, dst)
		case "generated":
			switch {
			case e.File > 0:
				err = copyFrom(files[e.File-1], dst)
			case e.HostPrefix != "":
				err = writeAfterHostFile(host(e.HostPrefix), dst, append([]byte(e.Content), e.Binary...))
			default:
				err = writeNewFile(dst, append([]byte(e.Content), e.Binary...))
			}
		case "dir-empty":
			err = os.MkdirAll(dst, 0o755)
		case "mountpoint":
			// Where a policy path is bound later (mountTree), after the seal below.
			err = ensureTarget(dst, e.Target == "dir")
		case "cover":
			// A file of this tmpfs bound over one of a host directory bound above, read-only like it.
			err = bindMount(filepath.Join(etc, e.Target), dst, false)
		default:
			err = bind(host(filepath.Join("/etc", e.Name)), dst)
		}
		if err != nil {
			return fmt.Errorf("/etc/%s: %w", e.Name, err)
		}
	}
	// One call seals the tmpfs and every bind beneath it (some forty mounts): read-only, nosuid,
	// nodev, as bindMount would have made each of them one by one.
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(-1, etc, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("mount_setattr /etc: %w", err)
	}
	return nil
}

// copyFrom writes a new file dst (0644) with the whole content of f, from its start: the kernel
// copies it (sendfile from cordon's memfd).
func copyFrom(f *os.File, dst string) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	out, err := createFile(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, f); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeAfterHostFile writes a new file dst (0644): the content of the host file src (the kernel
// copies it), a newline when that does not end in one, then b.
func writeAfterHostFile(src, dst string, b []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := createFile(dst)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	if err == nil && n > 0 {
		last := make([]byte, 1)
		if _, err = in.ReadAt(last, n-1); err == nil && last[0] != '\n' {
			b = append([]byte{'\n'}, b...)
		}
	}
	if err == nil {
		_, err = out.Write(b)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// mountProc mounts the sandbox's /proc, and shows it at /proc of the scratch root too: init works
// there until the final pivot, and needs /proc/self (the gateway's sockets are made in its own
// network namespace through it). The scratch root is detached at the pivot, and the bind with it.
func mountProc() error {
	p := inRoot("/proc")
	if err := os.Mkdir(p, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", p, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := os.Mkdir("/proc", 0o555); err != nil {
		return err
	}
	return unix.Mount(p, "/proc", "", unix.MS_BIND, "")
}

func buildDev() error {
	dev := inRoot("/dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range devices {
		if err := ensureTarget(filepath.Join(dev, d), false); err != nil {
			return err
		}
		// Device nodes keep nodev off (they are the point) but nothing else may be executed or setuid.
		if err := unix.Mount(host("/dev/"+d), filepath.Join(dev, d), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return err
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
}

// treeMount is one mount of the sandbox's own tree, ordered by depth so that parents exist first
// (the workspace may live under the home directory or /tmp, which are fresh tmpfs inside).
type treeMount struct {
	target string
	mount  func(dst string) error
}

// mountTree mounts the sandbox's own tree: /tmp, home, the workspace and the policy paths. With
// srcs (cordon runs as root) the workspace and policy paths are attached from the descriptors
// cordon made on the host instead of bound from host paths.
func mountTree(spec *sandbox.Spec, home string, srcs *hostSources, creator *sandbox.User) error {
	tmpfs := func(mode string) func(string) error {
		return func(dst string) error {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			return unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode="+mode)
		}
	}
	mounts := []treeMount{{target: "/tmp", mount: tmpfs("1777")}}
	if home != "" {
		mode := "0700"
		if creator != nil {
			// Init is not the sandbox user here: the home is made the user's.
			mode += fmt.Sprintf(",uid=%d,gid=%d", creator.UID, creator.GID)
		}
		mounts = append(mounts, treeMount{target: home, mount: tmpfs(mode)})
	}
	ws := spec.Workspace
	mounts = append(mounts, treeMount{target: ws.Path, mount: func(dst string) error {
		if ws.Overlay != nil {
			lower, upper, work := host(ws.Source), host(ws.Overlay.Upper), host(ws.Overlay.Work)
			if srcs != nil {
				var err error
				if lower, upper, work, err = attachLayers(srcs, ws.Overlay); err != nil {
					return err
				}
			}
			if err := mountOverlay(lower, upper, work, dst, creator); err != nil {
				return &sandbox.SetupError{Step: stepOverlay, Err: sandbox.NoOverlay(err)}
			}
			return nil
		}
		if srcs != nil {
			return attachMount(srcs.workspace, dst, true)
		}
		return bindMount(host(ws.Source), dst, true)
	}})
	for i, m := range spec.Mounts {
		mounts = append(mounts, treeMount{target: m.Path(), mount: func(dst string) error {
			if m.Overlay != nil {
				return mountCache(m, i, srcs, dst, creator)
			}
			if srcs != nil {
				return attachMount(srcs.mounts[i], dst, m.Writable)
			}
			return bindMount(host(m.Source), dst, m.Writable)
		}})
	}
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.Count(mounts[i].target, "/") < strings.Count(mounts[j].target, "/")
	})
	for _, m := range mounts {
		if err := m.mount(inRoot(m.target)); err != nil {
			var se *sandbox.SetupError
			if errors.As(err, &se) {
				return err
			}
			return fmt.Errorf("%s: %w", m.target, err)
		}
	}
	return nil
}

// Where the workspace's layers, as cordon opened them on the host, are attached in the scratch root
// for the overlay to be mounted from them; the scratch root, and they with it, is detached at the
// final pivot.
const (
	scratchLower  = "/ws-lower"
	scratchLayers = "/ws-layers"
)

// mountCache mounts spec.Mounts[i], a host tree with a writable layer of the run's own: the overlay's
// lower layer is the host's tree and never written. As root its layers come from the descriptors
// cordon opened (idmapped, like the workspace's), attached in the scratch root under names of their
// own.
func mountCache(m sandbox.Mount, i int, srcs *hostSources, dst string, creator *sandbox.User) error {
	lower, upper, work := host(m.Source), host(m.Overlay.Upper), host(m.Overlay.Work)
	if srcs != nil {
		l, layers := fmt.Sprintf("%s-%d", scratchLower, i+1), fmt.Sprintf("%s-%d", scratchLayers, i+1)
		if err := attachScratch(srcs.mounts[i], l); err != nil {
			return err
		}
		if err := attachScratch(srcs.cacheLayers[i], layers); err != nil {
			return err
		}
		lower, upper, work = l, filepath.Join(layers, filepath.Base(m.Overlay.Upper)), filepath.Join(layers, filepath.Base(m.Overlay.Work))
	}
	if err := mountOverlay(lower, upper, work, dst, creator); err != nil {
		return fmt.Errorf("cache overlay over %s: %w (filesystem.caches: [] shows no caches)", m.Source, err)
	}
	return nil
}

// attachScratch attaches a detached mount at dst, a new directory of the scratch root.
func attachScratch(f *os.File, dst string) error {
	if f == nil {
		return fmt.Errorf("no descriptor for %s", dst)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching %s: %w", f.Name(), err)
	}
	return nil
}

// attachLayers attaches the overlay's idmapped lower layer and the directory of its upper and work
// directories in the scratch root and returns the three paths.
func attachLayers(srcs *hostSources, o *sandbox.Overlay) (lower, upper, work string, err error) {
	for _, a := range []struct {
		f   *os.File
		dst string
	}{{srcs.workspace, scratchLower}, {srcs.layers, scratchLayers}} {
		if err := os.Mkdir(a.dst, 0o711); err != nil {
			return "", "", "", err
		}
		if err := unix.MoveMount(int(a.f.Fd()), "", unix.AT_FDCWD, a.dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return "", "", "", fmt.Errorf("attaching %s: %w", a.f.Name(), err)
		}
	}
	return scratchLower, filepath.Join(scratchLayers, filepath.Base(o.Upper)), filepath.Join(scratchLayers, filepath.Base(o.Work)), nil
}

// attachMount attaches a detached mount that cordon made on the host at dst (created like its
// root: a directory or an empty file), and applies read-only (unless writable), nosuid and nodev
// to the whole subtree, as bindMount does for a host path.
func attachMount(f *os.File, dst string, writable bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if err := ensureTarget(dst, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return err
	}
	if err := unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching %s: %w", f.Name(), err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if !writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", strings.TrimPrefix(dst, newRoot), err)
	}
	return nil
}

// mountOverlay mounts a copy-on-write view with the new mount API, so that any character in the
// paths (commas, colons) is passed as data and never parsed as an option separator. Overlayfs does
// its work on the upper layer with the credentials of whoever created it; with creator set, that is
// creator's file-system ids (init's thread takes them for the one call, and then its own back),
// rather than init's.
func mountOverlay(lower, upper, work, dst string, creator *sandbox.User) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	for _, kv := range [][2]string{{"lowerdir+", lower}, {"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(fd, kv[0], kv[1]); err != nil {
			return fmt.Errorf("overlay %s: %w", kv[0], err)
		}
	}
	if err := unix.FsconfigSetFlag(fd, "userxattr"); err != nil {
		return fmt.Errorf("overlay userxattr: %w", err)
	}
	if err := asCreator(creator, func() error { return unix.FsconfigCreate(fd) }); err != nil {
		return fmt.Errorf("create overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	defer unix.Close(mfd)
	return unix.MoveMount(mfd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// maskPaths hides each path behind an empty read-only file or directory. The path is resolved inside
// the new root without following a final symlink, so a planted link cannot redirect the mask.
func maskPaths(paths []string) error {
	return forExisting(paths, "mask", func(p, dst string, fi os.FileInfo) error {
		switch {
		case fi.IsDir():
			return unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555,size=4k")
		case fi.Mode().IsRegular():
			if err := unix.Mount(emptyFile, dst, "", unix.MS_BIND, ""); err != nil {
				return err
			}
			return unix.MountSetattr(-1, dst, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC})
		default:
			// A symlink or special file: not followed; cordon's policy layer never hands these over.
			return errors.New("not a regular file or directory")
		}
	})
}

// readOnlyPaths binds each path over itself read-only (recursively).
func readOnlyPaths(paths []string) error {
	return forExisting(paths, "read-only", func(p, dst string, fi os.FileInfo) error {
		if fi.Mode()&os.ModeSymlink != 0 {
			return errors.New("is a symlink")
		}
		return bindMount(dst, dst, false)
	})
}

// forExisting calls fn for each path that exists in the new root (not following a final symlink),
// naming the path and what was being done in any error.
func forExisting(paths []string, what string, fn func(p, dst string, fi os.FileInfo) error) error {
	for _, p := range paths {
		dst := inRoot(p)
		fi, err := os.Lstat(dst)
		if os.IsNotExist(err) {
			continue
		}
		if err == nil {
			err = fn(p, dst, fi)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, p, err)
		}
	}
	return nil
}

// enterRoot makes newRoot the root and detaches everything else, the host's root included.
func enterRoot() error {
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return os.Chdir("/")
}

// asCreator runs fn with the file-system uid and gid of u (nil: as init is). Init's main thread is
// locked to its OS thread, and setfsuid is per thread.
func asCreator(u *sandbox.User, fn func() error) error {
	if u == nil {
		return fn()
	}
	uid, gid := unix.Getuid(), unix.Getgid()
	unix.Setfsgid(u.GID)
	unix.Setfsuid(u.UID)
	// Leaving fsuid 0 clears the file-system capabilities from the effective set; the native
	// init, which is the sandbox user, makes the overlay with them, so they are raised again.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	err := fn()
	unix.Setfsuid(uid)
	unix.Setfsgid(gid)
	if got, _ := unix.SetfsuidRetUid(-1); got != uid {
		return fmt.Errorf("file-system uid is %d after the overlay, not %d", got, uid)
	}
	// A change of credentials clears the parent-death signal, which is what ends the box when
	// cordon dies: set it again, and if cordon died meanwhile (its end of the status socket is
	// closed by then), stop here.
	if perr := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); perr != nil {
		return fmt.Errorf("restoring the parent-death signal: %w", perr)
	}
	fds := []unix.PollFd{{Fd: statusFD, Events: unix.POLLRDHUP}}
	if n, perr := unix.Poll(fds, 0); perr == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLRDHUP) != 0 {
		return errors.New("cordon ended while the box was being built")
	}
	return err
}
