package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/runstate"
	"golang.org/x/sys/unix"
)

// Kind is what happened to a path.
type Kind string

// The kinds of change. A change of type (file to directory, file to symlink) is a Deleted and an
// Added at the same path, as git shows it; a rename is a Deleted and an Added at two paths, because
// that is all an overlay's upper layer can say (with userxattr there is no redirect_dir).
const (
	Added    Kind = "added"
	Modified Kind = "modified"
	Deleted  Kind = "deleted"
)

// Change is one path that differs between the project and the agent's view of it.
type Change struct {
	// Path is slash-separated and relative to the project root.
	Path string
	Kind Kind
	// Mode is the new type and permission bits (Added, Modified); OldMode the project's (Modified,
	// Deleted).
	Mode, OldMode fs.FileMode
	// Target is the new symlink's target.
	Target string
	// ContentChanged is false for a Modified change that only changed permission bits.
	ContentChanged bool
	// Size is the new size of a regular file.
	Size int64

	// src is where the new entry lives in the run's upper layer (or copy).
	src string
	// copiedUp says the overlay copied this entry up from the lower layer (it has an origin mark), so
	// some lower file was its starting point.
	copiedUp bool
}

// Changes lists what the agent changed, sorted by path with a deletion before an addition at the
// same path (and so every directory before its contents). Deleted directories are listed with
// everything below them. For a patch run it lists the patch's files as the patch names them,
// without reading the project (so it works wherever the run's record is).
func Changes(run *runstate.Run) ([]Change, error) {
	info, err := LoadInfo(run)
	if err != nil {
		return nil, err
	}
	if info.Mode == ModePatch {
		es, err := loadPatch(run, info)
		if err != nil {
			return nil, err
		}
		return patchList(es), nil
	}
	return changesFor(run, info)
}

// changesFor is the changes with their sources, for Guard, Apply and Export. A patch run's are
// materialised from its patch against the project, or a *ConflictError says where they cannot be.
func changesFor(run *runstate.Run, info *Info) ([]Change, error) {
	if info.Mode == ModePatch {
		return patchChanges(run, info)
	}
	release, err := attachDisk(run, info)
	if err != nil {
		return nil, err
	}
	defer release()
	upper := filepath.Join(run.Dir, upperDir)
	if info.Mode == ModeCopy {
		return copyChanges(run.Dir, info.Project, upper)
	}
	var out []Change
	if err := overlayWalk(info.Project, upper, "", false, &out); err != nil {
		return nil, fmt.Errorf("workspace: changes of run %s: %w", run.Meta.ID, err)
	}
	return dedupe(out), nil
}

// overlayWalk reads one directory of the upper layer. opaque says the lower directory is hidden
// (the directory carries user.overlay.opaque, or an ancestor replaced the lower one), so every
// project entry not in the upper layer was deleted.
func overlayWalk(project, upper, rel string, opaque bool, out *[]Change) error {
	dir := filepath.Join(upper, filepath.FromSlash(rel))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if opaque {
		names := make(map[string]bool, len(ents))
		for _, e := range ents {
			names[e.Name()] = true
		}
		pents, err := readProjectDir(project, rel)
		if err != nil {
			return err
		}
		for _, n := range pents {
			if !names[n] {
				d, err := deleteSubtree(project, join(rel, n))
				if err != nil {
					return err
				}
				*out = append(*out, d...)
			}
		}
	}
	for _, e := range ents {
		p := join(rel, e.Name())
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if isWhiteout(fi) {
			d, err := deleteSubtree(project, p)
			if err != nil {
				return err
			}
			*out = append(*out, d...)
			continue
		}
		cs := classify(project, upper, p, fi)
		*out = append(*out, cs...)
		if fi.IsDir() {
			childOpaque := opaque || hasXattr(filepath.Join(upper, filepath.FromSlash(p)), "user.overlay.opaque", "y")
			// A directory that replaced a non-directory, or that is new, hides nothing below it that
			// the project still has; treating it as opaque lists any such leftovers as deleted.
			for _, c := range cs {
				if c.Kind == Added {
					childOpaque = true
				}
			}
			if err := overlayWalk(project, upper, p, childOpaque, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// isWhiteout says whether fi is an overlay whiteout: a character device 0:0.
func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func hasXattr(path, name, want string) bool {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return false
	}
	return want == "" || string(buf[:n]) == want
}

func join(dir, name string) string {
	if dir == "" || dir == "." {
		return name
	}
	return dir + "/" + name
}

// projectLstat looks at rel in the project without following any symlink on the way: when a parent
// is not a real directory the project has nothing at rel (writing there would go somewhere else).
func projectLstat(project, rel string) (fs.FileInfo, error) {
	parts := strings.Split(rel, "/")
	cur := project
	for i, part := range parts {
		if part == "" || part == "." || part == ".." {
			return nil, fmt.Errorf("workspace: bad path %q", rel)
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return nil, err
		}
		if i == len(parts)-1 {
			return fi, nil
		}
		if !fi.IsDir() {
			return nil, &fs.PathError{Op: "lstat", Path: cur, Err: syscall.ENOTDIR}
		}
	}
	return nil, fs.ErrNotExist
}

func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// readProjectDir lists a project directory's names, or none when it is not a real directory.
func readProjectDir(project, rel string) ([]string, error) {
	if rel != "" {
		fi, err := projectLstat(project, rel)
		if absent(err) || (err == nil && !fi.IsDir()) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	ents, err := os.ReadDir(filepath.Join(project, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// deleteSubtree lists the project's entry at rel and everything below it as deleted.
func deleteSubtree(project, rel string) ([]Change, error) {
	fi, err := projectLstat(project, rel)
	if absent(err) {
		return nil, nil // the project no longer has it either
	}
	if err != nil {
		return nil, err
	}
	out := []Change{{Path: rel, Kind: Deleted, OldMode: fi.Mode()}}
	if fi.IsDir() {
		names, err := readProjectDir(project, rel)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			d, err := deleteSubtree(project, join(rel, n))
			if err != nil {
				return nil, err
			}
			out = append(out, d...)
		}
	}
	return out, nil
}

// classify compares the agent's entry at rel (fi, in upper) with the project's.
func classify(project, upper, rel string, fi fs.FileInfo) []Change {
	src := filepath.Join(upper, filepath.FromSlash(rel))
	add := Change{Path: rel, Kind: Added, Mode: fi.Mode(), src: src, copiedUp: hasXattr(src, "user.overlay.origin", "")}
	if fi.Mode().IsRegular() {
		add.Size = fi.Size()
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		add.Target, _ = os.Readlink(src)
	}
	pfi, err := projectLstat(project, rel)
	if err != nil {
		// Absent, or unreadable: either way the agent's entry is new to the project as it is now.
		return []Change{add}
	}
	if pfi.Mode().Type() != fi.Mode().Type() {
		del, _ := deleteSubtree(project, rel)
		return append(del, add)
	}
	mod := add
	mod.Kind, mod.OldMode = Modified, pfi.Mode()
	switch {
	case fi.Mode().IsRegular():
		mod.ContentChanged = pfi.Size() != fi.Size() || !sameContent(filepath.Join(project, filepath.FromSlash(rel)), src)
	case fi.Mode()&fs.ModeSymlink != 0:
		old, err := os.Readlink(filepath.Join(project, filepath.FromSlash(rel)))
		mod.ContentChanged = err != nil || old != add.Target
	case fi.IsDir():
	default:
		a, _ := fi.Sys().(*syscall.Stat_t)
		b, _ := pfi.Sys().(*syscall.Stat_t)
		mod.ContentChanged = a == nil || b == nil || a.Rdev != b.Rdev
	}
	if !mod.ContentChanged && mod.Mode == mod.OldMode {
		return nil
	}
	return []Change{mod}
}

// sameContent compares two regular files byte for byte; any error counts as different.
func sameContent(a, b string) bool {
	fa, err := os.OpenFile(a, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer fa.Close()
	fb, err := os.OpenFile(b, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF)
		}
	}
}

// dedupe sorts changes (path, then deletions first) and drops repeats.
func dedupe(cs []Change) []Change {
	rank := map[Kind]int{Deleted: 0, Modified: 1, Added: 2}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Path != cs[j].Path {
			return cs[i].Path < cs[j].Path
		}
		return rank[cs[i].Kind] < rank[cs[j].Kind]
	})
	out := cs[:0]
	for i, c := range cs {
		if i > 0 && c.Path == cs[i-1].Path && c.Kind == cs[i-1].Kind {
			continue
		}
		out = append(out, c)
	}
	return out
}
