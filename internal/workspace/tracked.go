package workspace

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// maxIndex bounds the git index read: a larger one is not read (nothing is reported tracked).
// maxHashed bounds a file hashed to compare with it: a larger one counts as not tracked.
const (
	maxIndex  = 256 << 20
	maxHashed = 64 << 20
)

// TrackedUnchanged reports which of paths (relative to project, slash-separated) are regular files
// whose content is, byte for byte, what the project's git index holds for them: content that .git
// already keeps, where anyone who can read the project can read it with `git show`. Hiding such a
// file's working copy protects nothing, and an agent committing in the workspace would commit it
// emptied. The index is read with go-git's decoder; git itself is never run on the project (its
// configuration could make git run the project's code). Whatever cannot be read counts as not
// tracked, so the caller errs on the side of masking.
//
// memo, if not nil, carries verdicts from one start to the next: when the index and a file are as
// they were (device, inode, size, modification and change time), the file's verdict is reused
// without decoding the index, which takes about 0.4 s for a 100,000-file repository. Like the
// secret scan's cache it must live where the sandbox cannot write. TrackedUnchanged updates it.
func TrackedUnchanged(project string, paths []string, memo *TrackedMemo) map[string]bool {
	out := map[string]bool{}
	if len(paths) == 0 {
		return out
	}
	if memo == nil {
		memo = &TrackedMemo{}
	}
	indexStamp, indexErr := stampOf(indexPath(project))
	stamps := make(map[string]Stamp, len(paths))
	var unknown []string
	for _, p := range paths {
		st, err := stampOf(filepath.Join(project, filepath.FromSlash(p)))
		if err != nil {
			continue
		}
		stamps[p] = st
		if indexErr == nil && memo.Index == indexStamp {
			if v, ok := memo.Files[p]; ok && v.Stamp == st {
				if v.Tracked {
					out[p] = true
				}
				continue
			}
		}
		unknown = append(unknown, p)
	}
	if len(unknown) == 0 {
		memo.prune(stamps)
		return out
	}
	entries, err := readIndex(project)
	if err != nil {
		return out
	}
	if memo.Index != indexStamp {
		memo.Index, memo.Files = indexStamp, nil
	}
	window := memo.racy
	if window == 0 {
		window = time.Second
	}
	racy := time.Now().Add(-window).UnixNano()
	for _, p := range unknown {
		tracked := false
		if want, ok := entries[p]; ok {
			got, err := blobHash(filepath.Join(project, filepath.FromSlash(p)))
			tracked = err == nil && got == want
		}
		if tracked {
			out[p] = true
		}
		if st := stamps[p]; indexErr == nil && st.Mtime < racy && st.Ctime < racy && indexStamp.Mtime < racy {
			if memo.Files == nil {
				memo.Files = map[string]TrackedVerdict{}
			}
			memo.Files[p] = TrackedVerdict{Stamp: st, Tracked: tracked}
		}
	}
	memo.prune(stamps)
	return out
}

// TrackedMemo is what TrackedUnchanged remembers between starts; the caller stores it (as JSON).
type TrackedMemo struct {
	Index Stamp                     `json:"index"`
	Files map[string]TrackedVerdict `json:"files,omitempty"`
	// racy is how long before now a change must be for a verdict to be kept; zero means a second
	// (a rewrite within the clock's tick could leave a stamp unchanged). Tests set it below zero.
	racy time.Duration
}

// TrackedVerdict is one file's verdict and the state of the file it was made for.
type TrackedVerdict struct {
	Stamp   Stamp `json:"stamp"`
	Tracked bool  `json:"tracked"`
}

// Stamp is what says a file has not changed: a rewrite moves its change time even when it keeps
// its size and modification time.
type Stamp struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64 // nanoseconds
}

func stampOf(path string) (Stamp, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return Stamp{}, err
	}
	mtime, ctime, dev := statTimes(&st)
	return Stamp{Dev: dev, Ino: st.Ino, Size: st.Size, Mtime: mtime, Ctime: ctime}, nil
}

// prune drops verdicts for files not asked about now (deleted, or no longer secret-shaped).
func (m *TrackedMemo) prune(asked map[string]Stamp) {
	for p := range m.Files {
		if _, ok := asked[p]; !ok {
			delete(m.Files, p)
		}
	}
}

// indexPath is where the index of project's repository is, following a .git file to the git
// directory it names; "" when there is none.
func indexPath(project string) string {
	dir, err := gitDirOf(project)
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "index")
}

// readIndex decodes the index of the repository whose work tree is project (.git a directory, or a
// file naming the git directory, as in a linked work tree) into path -> blob hash, for stage-0
// regular-file entries.
func readIndex(project string) (entries map[string]plumbing.Hash, err error) {
	gitDir, err := gitDirOf(project)
	if err != nil {
		return nil, err
	}
	// Non-blocking and not through a symlink: gitdir may name anything, a FIFO included, and a
	// start must not hang on it.
	f, err := os.OpenFile(filepath.Join(gitDir, "index"), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() > maxIndex {
		return nil, fmt.Errorf("%s: not a regular index file of at most %d bytes", f.Name(), maxIndex)
	}
	defer func() {
		// The index is the project's, so untrusted: a decoder panic is a read failure.
		if r := recover(); r != nil {
			entries, err = nil, fmt.Errorf("reading the git index: %v", r)
		}
	}()
	var idx index.Index
	if err := index.NewDecoder(bufio.NewReader(f)).Decode(&idx); err != nil {
		return nil, fmt.Errorf("reading the git index: %w", err)
	}
	entries = make(map[string]plumbing.Hash, len(idx.Entries))
	for _, e := range idx.Entries {
		// Stage 0 is a merged entry (go-git's index.Merged constant says 1, but the decoder gives
		// the stage bits as they are).
		if e.Stage == 0 && (e.Mode.IsRegular() || e.Mode == filemode.Executable) && !e.SkipWorktree {
			entries[e.Name] = e.Hash
		}
	}
	return entries, nil
}

// gitDirOf returns the git directory of the work tree at project: its .git directory, or the
// directory a .git file names (a linked work tree).
func gitDirOf(project string) (string, error) {
	gitDir := filepath.Join(project, ".git")
	fi, err := os.Lstat(gitDir)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return gitDir, nil
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return "", fmt.Errorf("%s: neither a directory nor a gitdir file", gitDir)
	}
	b, err := os.ReadFile(gitDir)
	if err != nil {
		return "", err
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("%s: not a gitdir file", gitDir)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(project, dir)
	}
	return dir, nil
}

// blobHash is the git object id of the regular file at path as a blob.
func blobHash(path string) (plumbing.Hash, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > maxHashed {
		return plumbing.ZeroHash, fmt.Errorf("%s: not a regular file of at most %d bytes", path, maxHashed)
	}
	h := plumbing.NewHasher(plumbing.BlobObject, st.Size())
	if _, err := io.Copy(h, io.LimitReader(f, st.Size())); err != nil {
		return plumbing.ZeroHash, err
	}
	return h.Sum(), nil
}
