// Package atomicfile replaces files so that a reader, or the disk after a crash, sees the old content
// or the new, never a torn mix: cordon's run metadata, its caches and its memos are read back by later
// runs, which must not trip over half a file. It is the one implementation for the whole tree.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes data to path through a temporary file in the same directory, fsyncs it, renames it
// over path and fsyncs the directory, so the new content survives a crash once Write returns.
func Write(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, true)
}

// WriteLazy is Write without the fsyncs, for a file whose durability is the disk's own pace or is
// seen to later (a run directory's Sync): readers still see the old or the new file, never a torn
// one, but a crash may lose the new content.
func WriteLazy(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, false)
}

// WriteFrom is Write with the content read from r, for a file too large to hold in memory at once
// (cordon's own binary, copied into a pod's shared volume).
func WriteFrom(path string, r io.Reader, perm fs.FileMode) error {
	return writeWith(path, perm, true, func(f *os.File) error {
		_, err := io.Copy(f, r)
		return err
	})
}

func write(path string, data []byte, perm fs.FileMode, durable bool) error {
	return writeWith(path, perm, durable, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// writeWith is the one implementation: fill writes the temporary file's content.
func writeWith(path string, perm fs.FileMode, durable bool, fill func(*os.File) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fill(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok = true
	if !durable {
		return nil
	}
	return SyncDir(dir)
}

// SyncDir makes a rename or creation in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
