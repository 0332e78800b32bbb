package workspace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"golang.org/x/sys/unix"
)

// The disk limit (limits.disk) puts the run's layers on an ext4 file system in an image file of
// exactly that size, loop-mounted under the run directory:
//
//   - the agent's writes land in the image, so filling it gives the agent ENOSPC and the host's
//     file system never sees more than the image;
//   - the image is allocated up front (fallocate), so a full host cannot turn the agent's writes
//     into I/O errors later, and the cost is paid once, not per write;
//   - it is a file on persistent storage, so unlike a size-capped tmpfs the run's changes survive
//     a reboot (Changes and Apply mount it again on demand).
//
// Loop devices need root. Project quotas would work rootless only where the file system was
// mounted with prjquota and cordon may set project ids (CAP_SYS_RESOURCE) — not an ordinary user's
// lot — so without root the limit is not enforced and Prepare says so in its note.

const (
	diskImage = "disk.img"
	diskMount = "layers"
)

// setupDisk creates and mounts the image. It returns a note instead of an error when the host
// cannot enforce the limit, so that the caller degrades visibly.
func setupDisk(run *runstate.Run, size int64) (note string, err error) {
	if os.Geteuid() != 0 {
		return "disk limit not enforced: it needs root (a loop-mounted image)", nil
	}
	mkfs, err := hosttool.System("mkfs.ext4") // as root: the system's, never the caller's PATH's
	if err != nil {
		return "disk limit not enforced: mkfs.ext4 not found", nil
	}
	img := filepath.Join(run.Dir, diskImage)
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("workspace: disk image: %w", err)
	}
	err = allocate(int(f.Fd()), size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("workspace: disk image of %d bytes: %w", size, err)
	}
	// No reserved blocks (the agent gets all of it); lazy inode tables keep mkfs fast.
	out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", img).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("workspace: mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Mkdir(filepath.Join(run.Dir, diskMount), 0o700); err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	if err := mountDisk(run); err != nil {
		return "", err
	}
	// The overlay's directories live in the image; run.Dir/upper and work point there.
	for _, d := range []string{upperDir, workDir} {
		if err := os.Mkdir(filepath.Join(run.Dir, diskMount, d), 0o700); err != nil {
			return "", fmt.Errorf("workspace: %w", err)
		}
		if err := os.Symlink(filepath.Join(diskMount, d), filepath.Join(run.Dir, d)); err != nil {
			return "", fmt.Errorf("workspace: %w", err)
		}
	}
	return "", nil
}

func mountDisk(run *runstate.Run) error {
	mnt := filepath.Join(run.Dir, diskMount)
	mount, err := hosttool.System("mount")
	if err != nil {
		return fmt.Errorf("workspace: mount disk image: %w", err)
	}
	out, err := exec.Command(mount, "-o", "loop,nosuid,nodev", filepath.Join(run.Dir, diskImage), mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("workspace: mount disk image: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(mnt, 0o700); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

func diskMounted(run *runstate.Run) bool {
	var a, b syscall.Stat_t
	if syscall.Lstat(run.Dir, &a) != nil || syscall.Lstat(filepath.Join(run.Dir, diskMount), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// attachDisk makes sure a disk-limited run's layers are mounted, and returns how to undo what it did.
func attachDisk(run *runstate.Run, info *Info) (release func(), err error) {
	if info.DiskBytes == 0 || diskMounted(run) {
		return func() {}, nil
	}
	if err := mountDisk(run); err != nil {
		return nil, err
	}
	return func() { _ = unix.Unmount(filepath.Join(run.Dir, diskMount), 0) }, nil
}

// Release unmounts a disk-limited run's image once the sandbox has exited, so that finished runs do
// not hold loop devices; later steps mount it again when they need it. Without a disk limit it does
// nothing.
func Release(run *runstate.Run) error {
	if !diskMounted(run) {
		return nil
	}
	if err := unix.Unmount(filepath.Join(run.Dir, diskMount), 0); err != nil {
		return fmt.Errorf("workspace: release disk of run %s: %w", run.Meta.ID, err)
	}
	return nil
}
