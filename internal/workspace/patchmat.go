package workspace

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// patchChanges materialises a patch run for Guard, Apply and Export: it checks every old side
// against the project (the project's file must be the patch's old blob, byte for byte and mode for
// mode; an added path must be free) and returns a *ConflictError naming every path that is not,
// then writes each new side to upper/<path> in the run's directory (fragments applied to the
// project's file, the result's blob id checked against the patch's) and returns the changes with
// their sources there, as the overlay and copy modes do. Directories the patch's files need and the
// project lacks are added, and directories the patch empties are deleted, as git does.
//
// The hash check replaces the timestamp check of the other modes: it does not depend on when the
// user changed a file, only on whether the file is still what the run started from.
func patchChanges(run *runstate.Run, info *Info) ([]Change, error) {
	es, err := loadPatch(run, info)
	if err != nil {
		return nil, err
	}
	m := &materialiser{run: run, info: info, oidLen: len(info.BaseCommit),
		deletedFile: map[string]bool{}, deletedDir: map[string]bool{}, newDir: map[string]bool{}, newSide: map[string]bool{}}
	for _, e := range es {
		if e.kind == Deleted {
			m.deletedFile[e.path] = true
		} else {
			m.newSide[e.path] = true
		}
	}
	if err := m.findEmptied(es); err != nil {
		return nil, err
	}
	olds := make([]fs.FileInfo, len(es))
	for i, e := range es {
		if olds[i], err = m.checkOld(e); err != nil {
			return nil, err
		}
	}
	if len(m.conflicts) > 0 {
		return nil, m.conflictError()
	}
	var out []Change
	for d := range m.deletedDir {
		fi, err := projectLstat(info.Project, d)
		if err != nil {
			return nil, fmt.Errorf("workspace: %s: %w", d, err)
		}
		out = append(out, Change{Path: d, Kind: Deleted, OldMode: fi.Mode()})
	}
	upper := filepath.Join(run.Dir, upperDir)
	if err := mkdirOwn(upper, 0o700); err != nil {
		return nil, err
	}
	for d := range m.newDir {
		if err := m.mkdirs(d); err != nil {
			return nil, err
		}
		out = append(out, Change{Path: d, Kind: Added, Mode: fs.ModeDir | 0o755, src: m.upperPath(d)})
	}
	for i, e := range es {
		c, err := m.materialise(e, olds[i])
		if err != nil {
			return nil, fmt.Errorf("workspace: patch run %s: %s: %w", run.Meta.ID, e.path, err)
		}
		out = append(out, c)
	}
	return dedupe(out), nil
}

type materialiser struct {
	run    *runstate.Run
	info   *Info
	oidLen int
	// deletedFile and newSide are the patch's paths by side; deletedDir the project directories the
	// patch leaves empty, newDir those it needs and the project does not have.
	deletedFile, deletedDir, newDir, newSide map[string]bool
	conflicts                                []Conflict
}

func (m *materialiser) conflict(p, why string) {
	m.conflicts = append(m.conflicts, Conflict{Path: p, Reason: why})
}

// conflictError gives every conflict the reason that explains it best: the project's HEAD is
// another commit than the run's base, or the project's files changed since.
func (m *materialiser) conflictError() *ConflictError {
	head := "changed in the project since the run's base"
	if h, ok := projectHead(m.info.Project); ok && h != m.info.BaseCommit {
		head = fmt.Sprintf("the project is not at the run's base commit (HEAD is %.12s, the run's base is %.12s)", h, m.info.BaseCommit)
	}
	out := make([]Conflict, len(m.conflicts))
	for i, c := range m.conflicts {
		out[i] = Conflict{Path: c.Path, Reason: head + ": " + c.Reason}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return &ConflictError{Conflicts: out}
}

// findEmptied finds the project directories that hold nothing once the patch's deletions are done,
// deepest first, so that a directory of emptied directories is emptied too.
func (m *materialiser) findEmptied(es []patchEntry) error {
	cand := map[string]bool{}
	for _, e := range es {
		if e.kind == Deleted {
			for d := slashDir(e.path); d != "."; d = slashDir(d) {
				cand[d] = true
			}
		}
	}
	// Directories with something of the new side below them stay.
	keep := map[string]bool{}
	for p := range m.newSide {
		for d := slashDir(p); d != "."; d = slashDir(d) {
			keep[d] = true
		}
	}
	dirs := make([]string, 0, len(cand))
	for d := range cand {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		if keep[d] {
			continue
		}
		names, err := readProjectDir(m.info.Project, d)
		if err != nil {
			return fmt.Errorf("workspace: %s: %w", d, err)
		}
		if names == nil {
			continue // not a directory in the project: its files conflict below
		}
		empty := true
		for _, n := range names {
			if p := d + "/" + n; !m.deletedFile[p] && !m.deletedDir[p] {
				empty = false
				break
			}
		}
		if empty {
			m.deletedDir[d] = true
		}
	}
	return nil
}

// checkOld compares the project with the patch's old side of e, recording a conflict when they
// differ, and returns the project's entry (nil for an added path).
func (m *materialiser) checkOld(e patchEntry) (fs.FileInfo, error) {
	project := m.info.Project
	if e.kind == Added {
		m.checkParents(e.path)
		fi, err := projectLstat(project, e.path)
		switch {
		case absent(err):
		case err != nil:
			m.conflict(e.path, err.Error())
		case m.deletedFile[e.path] || m.deletedDir[e.path]:
			// A change of type: the patch deletes what is there first.
		case fi.IsDir():
			m.conflict(e.path, "the run adds it, and the project has a directory there with other files")
		default:
			m.conflict(e.path, "the run adds it, and the project has it already")
		}
		return nil, nil
	}
	fi, err := projectLstat(project, e.path)
	if absent(err) {
		m.conflict(e.path, "the project no longer has it")
		return nil, nil
	}
	if err != nil {
		m.conflict(e.path, err.Error())
		return nil, nil
	}
	if got := gitModeOf(fi.Mode()); got != e.oldMode {
		m.conflict(e.path, fmt.Sprintf("it is %s in the project, the base has %06o", describeMode(fi.Mode(), got), e.oldMode))
		return nil, nil
	}
	if e.oldOID == "" {
		return fi, nil // a change of mode alone: any content is carried as it is
	}
	id, err := m.projectBlob(e.path, fi)
	if err != nil {
		m.conflict(e.path, err.Error())
		return nil, nil
	}
	if id != e.oldOID {
		m.conflict(e.path, "its content differs from the base's")
		return nil, nil
	}
	return fi, nil
}

// checkParents finds, for an added path, the directories above it that the project lacks (or has
// as a file the patch deletes), and records a conflict when one is something else.
func (m *materialiser) checkParents(p string) {
	var parents []string
	for d := slashDir(p); d != "."; d = slashDir(d) {
		parents = append([]string{d}, parents...)
	}
	for _, d := range parents {
		fi, err := projectLstat(m.info.Project, d)
		switch {
		case absent(err):
			m.newDir[d] = true
		case err != nil:
			m.conflict(p, err.Error())
			return
		case fi.IsDir():
		case m.deletedFile[d]:
			m.newDir[d] = true // a file the patch replaces by a directory
		default:
			m.conflict(p, fmt.Sprintf("%s is not a directory in the project", d))
			return
		}
	}
}

func describeMode(m fs.FileMode, git uint32) string {
	switch {
	case m.IsDir():
		return "a directory"
	case git == 0:
		return "a " + m.Type().String() + " file"
	}
	return fmt.Sprintf("mode %06o", git)
}

// gitModeOf is the mode git would record for a project entry, 0 for one git cannot record.
func gitModeOf(m fs.FileMode) uint32 {
	switch {
	case m&fs.ModeSymlink != 0:
		return gitSymlink
	case m.IsRegular() && m&0o100 != 0:
		return gitExecutable
	case m.IsRegular():
		return gitRegular
	}
	return 0
}

// projectBlob is the git blob id of the project's entry at rel.
func (m *materialiser) projectBlob(rel string, fi fs.FileInfo) (string, error) {
	full := filepath.Join(m.info.Project, filepath.FromSlash(rel))
	if fi.Mode()&fs.ModeSymlink != 0 {
		t, err := os.Readlink(full)
		if err != nil {
			return "", err
		}
		return blobID(m.oidLen, strings.NewReader(t), int64(len(t)))
	}
	f, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is no longer a regular file", rel)
	}
	return blobID(m.oidLen, f, st.Size())
}

// blobID hashes size bytes of r as git hashes a blob.
func blobID(oidLen int, r io.Reader, size int64) (string, error) {
	var h hash.Hash = sha1.New()
	if oidLen == 64 {
		h = sha256.New()
	}
	fmt.Fprintf(h, "blob %d\x00", size)
	n, err := io.Copy(h, r)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("changed while it was read (%d bytes, expected %d)", n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (m *materialiser) upperPath(rel string) string {
	return filepath.Join(m.run.Dir, upperDir, filepath.FromSlash(rel))
}

// mkdirs makes rel and its parents under upper/ as real directories with mode 0755 (they become the
// project's new directories).
func (m *materialiser) mkdirs(rel string) error {
	cur := ""
	for _, s := range strings.Split(rel, "/") {
		cur = join(cur, s)
		if err := mkdirOwn(m.upperPath(cur), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// mkdirOwn makes a directory with exactly mode, or accepts one that is there; anything else there
// (a symlink, a file) is an error, never followed.
func mkdirOwn(p string, mode fs.FileMode) error {
	if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("workspace: %w", err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("workspace: %s is not a directory", p)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// materialise writes e's new side to upper/<path> and returns its change; old is the project's
// entry that checkOld found to be the patch's old side.
func (m *materialiser) materialise(e patchEntry, old fs.FileInfo) (Change, error) {
	c := Change{Path: e.path, Kind: e.kind}
	if old != nil {
		c.OldMode = old.Mode()
	}
	if e.kind == Deleted {
		return c, nil
	}
	c.Mode = fileMode(e.newMode)
	if e.kind == Modified && e.newMode != gitSymlink {
		// Keep the project's permission bits (its umask, its group bits); git records only x.
		c.Mode = old.Mode().Perm()
		switch {
		case e.newMode == gitExecutable && e.oldMode != gitExecutable:
			c.Mode |= (c.Mode & 0o444) >> 2
		case e.newMode != gitExecutable && e.oldMode == gitExecutable:
			c.Mode &^= 0o111
		}
	}
	c.ContentChanged = e.kind == Added || len(e.file.TextFragments) > 0 || e.file.BinaryFragment != nil
	if d := slashDir(e.path); d != "." {
		if err := m.mkdirs(d); err != nil {
			return c, err
		}
	}
	tmp, err := os.CreateTemp(m.run.Dir, ".patch-new-*")
	if err != nil {
		return c, err
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	if err := m.apply(tmp, e); err != nil {
		return c, err
	}
	size, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return c, err
	}
	if e.newOID != "" {
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return c, err
		}
		id, err := blobID(m.oidLen, tmp, size)
		if err != nil {
			return c, err
		}
		if id != e.newOID {
			return c, fmt.Errorf("the patch is corrupt: its result hashes to %s, the patch says %s", id, e.newOID)
		}
	}
	dst := m.upperPath(e.path)
	c.src = dst
	if e.newMode == gitSymlink {
		if size > 4096 {
			return c, fmt.Errorf("a symlink target of %d bytes", size)
		}
		b, err := os.ReadFile(tmp.Name())
		if err != nil {
			return c, err
		}
		if len(b) == 0 || bytes.IndexByte(b, 0) >= 0 {
			return c, errors.New("not a valid symlink target")
		}
		c.Target = string(b)
		// The symlink is made under a fresh name and renamed into place, replacing an earlier one.
		link := tmp.Name() + ".link"
		if err := os.Symlink(c.Target, link); err != nil {
			return c, err
		}
		if err := os.Rename(link, dst); err != nil {
			os.Remove(link)
			return c, err
		}
		return c, nil
	}
	c.Size = size
	if err := tmp.Chmod(c.Mode.Perm()); err != nil {
		return c, err
	}
	if err := tmp.Close(); err != nil {
		return c, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return c, err
	}
	return c, nil
}

// apply writes e's new side to w: the fragments applied to the project's file (checked to be the
// old side), to nothing for an added file.
func (m *materialiser) apply(w io.Writer, e patchEntry) error {
	var src io.ReaderAt = bytes.NewReader(nil)
	if e.kind == Modified {
		full := filepath.Join(m.info.Project, filepath.FromSlash(e.path))
		if e.oldMode == gitSymlink {
			t, err := os.Readlink(full)
			if err != nil {
				return err
			}
			src = strings.NewReader(t)
		} else {
			f, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			src = f
		}
	}
	bw := bufio.NewWriter(w)
	if err := gitdiff.Apply(bw, src, e.file, gitdiff.WithMaxBinaryFragmentBytes(maxPatchBytes)); err != nil {
		return fmt.Errorf("the patch is corrupt: it does not apply to the base's file: %w", err)
	}
	return bw.Flush()
}

// projectHead is the commit the project's checkout is at, when git can say.
func projectHead(project string) (string, bool) {
	git, err := hosttool.Find("git", nil, project)
	if err != nil {
		return "", false
	}
	cmd := exec.Command(git, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	cmd.Dir = project
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GIT_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		return "", false
	}
	h := strings.TrimSpace(string(out))
	return h, fullOID(h)
}
