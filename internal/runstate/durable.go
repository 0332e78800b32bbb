package runstate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
)

// This file is durability: atomic replacement of the files in a run directory (one implementation,
// package atomicfile) and the Sync that completes what a lazy creation left to the disk.

// Sync makes the run durable as it is now: every regular file directly in its directory (meta.json
// and what other packages keep beside it), the directory itself and its entry in the runs
// directory. It completes what CreateLazy and WriteFileAtomicLazy left to the disk's own pace.
func (r *Run) Sync() error {
	ents, err := os.ReadDir(r.Dir)
	if err != nil {
		return fmt.Errorf("runstate: sync run %s: %w", r.Meta.ID, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := syncFile(filepath.Join(r.Dir, e.Name())); err != nil {
			return fmt.Errorf("runstate: sync run %s: %w", r.Meta.ID, err)
		}
	}
	if err := SyncDir(r.Dir); err != nil {
		return fmt.Errorf("runstate: sync run %s: %w", r.Meta.ID, err)
	}
	if err := SyncDir(filepath.Dir(r.Dir)); err != nil {
		return fmt.Errorf("runstate: sync run %s: %w", r.Meta.ID, err)
	}
	return nil
}

// SyncMeta makes the run's metadata durable as it is now (meta.json and the directory entry it was
// renamed into), and the files of the run's directory named in also, for a record that Sync made
// durable earlier and that FinishLazy (and a writer of those files) changed since.
func (r *Run) SyncMeta(also ...string) error {
	for _, name := range append([]string{metaFile}, also...) {
		if err := syncFile(filepath.Join(r.Dir, name)); err != nil {
			return fmt.Errorf("runstate: sync run %s: %w", r.Meta.ID, err)
		}
	}
	if err := SyncDir(r.Dir); err != nil {
		return fmt.Errorf("runstate: sync run %s: %w", r.Meta.ID, err)
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile (a temporary file renamed away)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// WriteFileAtomic writes data to path through a temporary file in the same directory, fsyncs it,
// renames it over path and fsyncs the directory (atomicfile.Write, for the run directory's callers).
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return atomicfile.Write(path, data, perm)
}

// WriteFileAtomicLazy is WriteFileAtomic without the fsyncs, for a file in a run directory that
// Run.Sync makes durable later (see CreateLazy). Readers still see the old or the new file, never a
// torn one.
func WriteFileAtomicLazy(path string, data []byte, perm fs.FileMode) error {
	return atomicfile.WriteLazy(path, data, perm)
}

// SyncDir makes a rename or creation in dir durable (atomicfile.SyncDir).
func SyncDir(dir string) error { return atomicfile.SyncDir(dir) }
