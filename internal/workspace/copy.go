package workspace

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/runstate"
	"golang.org/x/sys/unix"
)

// manifestEntry is one project entry as the copy fallback copied it. The copy's own ctime is kept
// so that Changes can tell, without rereading the project, which copies the agent touched: a
// program cannot set ctime, and every write, chmod or rename moves it.
type manifestEntry struct {
	Mode    fs.FileMode `json:"m"`
	Size    int64       `json:"s,omitempty"`
	CopyCtm int64       `json:"c"`
	// Skipped entries (sockets, devices the copier may not create) are not in the copy; their
	// absence there is not a deletion.
	Skipped bool `json:"k,omitempty"`
}

// copyProject copies project into dst (which exists), cloning file data where the file system
// supports FICLONE, and records a manifest. It returns how it copied, for the one-line note.
func copyProject(runDir, project, dst string) (string, error) {
	man := map[string]manifestEntry{}
	reflinks, full := 0, 0
	err := filepath.WalkDir(project, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(project, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			err = os.Mkdir(target, 0o700)
		case mode.IsRegular():
			var cloned bool
			cloned, err = copyFile(p, target, mode.Perm())
			if cloned {
				reflinks++
			} else {
				full++
			}
		case mode&fs.ModeSymlink != 0:
			var link string
			if link, err = os.Readlink(p); err == nil {
				err = os.Symlink(link, target)
			}
		case mode&fs.ModeNamedPipe != 0:
			err = unix.Mkfifo(target, uint32(mode.Perm()))
		default:
			man[filepath.ToSlash(rel)] = manifestEntry{Mode: mode, Skipped: true}
			return nil
		}
		if err != nil {
			return err
		}
		if mode&fs.ModeSymlink == 0 {
			// Directories were created writable so they could be filled; their mode is set below.
			if err := os.Chmod(target, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil && !mode.IsDir() {
				return err
			}
			if err := os.Chtimes(target, fi.ModTime(), fi.ModTime()); err != nil {
				return err
			}
		}
		man[filepath.ToSlash(rel)] = manifestEntry{Mode: mode, Size: fi.Size()}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("workspace: copy project: %w", err)
	}
	// Directory modes last (a read-only directory could not have been filled), then record ctimes.
	for rel, e := range man {
		t := filepath.Join(dst, filepath.FromSlash(rel))
		if e.Mode.IsDir() {
			if err := os.Chmod(t, e.Mode&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return "", fmt.Errorf("workspace: copy project: %w", err)
			}
		}
		if e.Skipped {
			continue
		}
		fi, err := os.Lstat(t)
		if err != nil {
			return "", fmt.Errorf("workspace: copy project: %w", err)
		}
		e.CopyCtm = ctimeNs(fi)
		man[rel] = e
	}
	b, err := json.Marshal(man)
	if err != nil {
		return "", fmt.Errorf("workspace: manifest: %w", err)
	}
	if err := runstate.WriteFileAtomic(filepath.Join(runDir, manifestFile), b, 0o600); err != nil {
		return "", fmt.Errorf("workspace: manifest: %w", err)
	}
	if reflinks > 0 && full == 0 {
		return "reflinked copy", nil
	}
	return "full copy", nil
}

func ctimeNs(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		_, ctime, _ := statTimes(st)
		return ctime
	}
	return fi.ModTime().UnixNano()
}

// copyFile copies src to a new file dst, by FICLONE when possible (constant time, shared extents)
// and by copy_file_range/read-write otherwise. Neither end is followed if it is a symlink.
func copyFile(src, dst string, perm fs.FileMode) (cloned bool, err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm&fs.ModePerm|0o200)
	if err != nil {
		return false, err
	}
	if cloneFile(int(out.Fd()), int(in.Fd())) == nil {
		return true, out.Close()
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, err
	}
	return false, out.Close()
}

// loadManifest reads the copy fallback's manifest.
func loadManifest(runDir string) (map[string]manifestEntry, error) {
	b, err := os.ReadFile(filepath.Join(runDir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("workspace: manifest: %w", err)
	}
	var man map[string]manifestEntry
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("workspace: manifest: %w", err)
	}
	return man, nil
}

// copyChanges finds what the agent changed in a copy workspace: entries the manifest does not know
// (added), entries whose copy's ctime or mode moved (touched, then compared with the project), and
// manifest entries missing from the copy (deleted).
func copyChanges(runDir, project, upper string) ([]Change, error) {
	man, err := loadManifest(runDir)
	if err != nil {
		return nil, err
	}
	var out []Change
	seen := map[string]bool{}
	err = filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e, known := man[rel]
		if known && !e.Skipped && e.Mode == fi.Mode() && e.CopyCtm == ctimeNs(fi) {
			return nil // untouched copy
		}
		if known && fi.IsDir() && e.Mode.IsDir() && e.Mode == fi.Mode() {
			return nil // only its entries changed; they are visited on their own
		}
		for _, c := range classify(project, upper, rel, fi) {
			c.copiedUp = known // the project had this path when the run started
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workspace: changes: %w", err)
	}
	for rel, e := range man {
		if seen[rel] || e.Skipped {
			continue
		}
		// Report only the top of a deleted tree here; deleteSubtree lists the project below it.
		if parent := slashDir(rel); parent != "." {
			if _, ok := man[parent]; ok && !seen[parent] {
				continue
			}
		}
		d, err := deleteSubtree(project, rel)
		if err != nil {
			return nil, err
		}
		out = append(out, d...)
	}
	return dedupe(out), nil
}

// slashDir is path.Dir for the slash paths Change uses.
func slashDir(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "."
}
