package workspace

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
func TrackedUnchanged(project string, paths []string) map[string]bool {
	out := map[string]bool{}
	if len(paths) == 0 {
		return out
	}
	entries, err := readIndex(project)
	if err != nil {
		return out
	}
	for _, p := range paths {
		want, ok := entries[p]
		if !ok {
			continue
		}
		if got, err := blobHash(filepath.Join(project, filepath.FromSlash(p))); err == nil && got == want {
			out[p] = true
		}
	}
	return out
}

// readIndex decodes the index of the repository whose work tree is project (.git a directory, or a
// file naming the git directory, as in a linked work tree) into path -> blob hash, for stage-0
// regular-file entries.
func readIndex(project string) (entries map[string]plumbing.Hash, err error) {
	gitDir := filepath.Join(project, ".git")
	fi, err := os.Lstat(gitDir)
	if err != nil {
		return nil, err
	}
	if fi.Mode().IsRegular() {
		b, err := os.ReadFile(gitDir)
		if err != nil {
			return nil, err
		}
		dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
		if !ok {
			return nil, fmt.Errorf("%s: not a gitdir file", gitDir)
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(project, dir)
		}
		gitDir = dir
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", gitDir)
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
