package runstate

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A run's state directory holds what cordon writes for it. Two of those the agent can grow: the
// workspace's layers (its own writes) and the audit log (every decision its traffic causes). Budget
// shares limits.disk between them so that the directory as a whole stays under the limit, and bounds
// the log even when the policy sets no limit: the host's disk must not be the agent's to fill.
// Everything else there (meta.json, workspace.json, the lock) is cordon's, small, and its size does
// not depend on what the agent does; metaReserve covers it.
const (
	// metaReserve is kept for the run's own small files.
	metaReserve = 256 << 10
	// logShare: the audit log gets a sixteenth of limits.disk, at least minLog and at most the
	// caller's default.
	logShare = 16
	minLog   = 64 << 10
	// minLayers is the smallest image the layers get: an ext4 file system needs some room of its own.
	minLayers = 1 << 20
)

// Budget is how a run's state is bounded.
type Budget struct {
	// Layers is the size of the workspace's layers (the image limits.disk makes); 0 for no limit.
	Layers int64
	// AuditLog is the audit log's byte cap.
	AuditLog int64
}

// NewBudget shares disk (limits.disk, 0 for none) between the layers and the audit log, whose cap
// is logMax when the disk allows it. With a limit, Layers + AuditLog plus the run's own small files
// stay within disk; a limit too small to hold an image besides them is an error.
func NewBudget(disk, logMax int64) (Budget, error) {
	if disk <= 0 {
		return Budget{AuditLog: logMax}, nil
	}
	b := Budget{AuditLog: min(logMax, max(disk/logShare, minLog))}
	b.Layers = disk - b.AuditLog - metaReserve
	if b.Layers < minLayers {
		return Budget{}, fmt.Errorf("limits.disk of %d bytes is too small: the run's state needs at least %d (the workspace's layers, the audit log and the run's records)",
			disk, minLayers+minLog+metaReserve)
	}
	return b, nil
}

// DiskUsage is the disk space the run's directory takes or may take: for each file the blocks
// allocated to it or its size, whichever is more (mkfs leaves the layers' image sparse, and the
// agent's writes fill it up to its size), not counting file systems mounted below the directory (the
// image is counted once, as the file it is).
func (r *Run) DiskUsage() (int64, error) {
	var top syscall.Stat_t
	if err := syscall.Lstat(r.Dir, &top); err != nil {
		return 0, fmt.Errorf("runstate: %w", err)
	}
	var total int64
	err := filepath.WalkDir(r.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Dev != top.Dev {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		total += max(st.Blocks*512, st.Size)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return total, fmt.Errorf("runstate: disk usage of run %s: %w", r.Meta.ID, err)
	}
	return total, nil
}
