package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// fileBatch is how many files one job scans: enough to make the queue's cost small, few enough that
// a large directory is shared among the workers.
const fileBatch = 32

// binarySniff is how much of a file is searched for a NUL byte to call it binary, as git does.
const binarySniff = 8000

// walker scans one tree with a pool of workers sharing a queue of jobs: a directory to list, or a
// batch of files to read.
type walker struct {
	root        string // absolute and clean
	skip, allow *policy.DenyMatcher
	defaultSkip bool
	configOnly  bool
	maxRead     int64
	cache       *Cache
	// rootFD is the root, opened for the cache's stats: a path relative to it costs the kernel fewer
	// lookups than the absolute one, and a warm scan is one stat per directory.
	rootFD int

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []job
	pending int // jobs queued or running
	found   []Finding
	err     error
}

// job is a directory to visit (dir, relative; "." is the root) or files of the directory parent to
// scan (names relative to it).
type job struct {
	dir    string
	parent string
	files  []string
}

// join is the relative path of name in the directory dir ("." is the root).
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

func (w *walker) run(ctx context.Context, workers int) ([]Finding, error) {
	abs, err := filepath.Abs(w.root)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", w.root, err)
	}
	w.root = abs
	w.rootFD = -1
	if w.cache != nil {
		if fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			w.rootFD = fd
			defer unix.Close(fd)
		}
	}
	if workers <= 0 {
		workers = 2 * runtime.GOMAXPROCS(0)
	}
	w.cond = sync.NewCond(&w.mu)
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.cond.Broadcast()
	})
	defer stop()
	w.push(job{dir: "."})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { w.work(ctx) })
	}
	wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scan %s: %w", w.root, err)
	}
	return w.found, nil
}

func (w *walker) push(j job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue = append(w.queue, j)
	w.pending++
	w.cond.Signal()
}

// pop takes the next job, waiting while others may still add some. It returns false when the walk is
// over: everything is done, a fatal error happened, or ctx ended.
func (w *walker) pop(ctx context.Context) (job, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && w.pending > 0 && w.err == nil && ctx.Err() == nil {
		w.cond.Wait()
	}
	if len(w.queue) == 0 || w.err != nil || ctx.Err() != nil {
		return job{}, false
	}
	j := w.queue[len(w.queue)-1] // last in, first out: the walk goes deep and the queue stays short
	w.queue = w.queue[:len(w.queue)-1]
	return j, true
}

// done records a finished job's findings.
func (w *walker) done(found []Finding, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.found = append(w.found, found...)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.pending--
	if w.pending == 0 || w.err != nil {
		w.cond.Broadcast()
	}
}

func (w *walker) work(ctx context.Context) {
	buf := make([]byte, w.maxRead)
	for {
		j, ok := w.pop(ctx)
		if !ok {
			return
		}
		var found []Finding
		var err error
		if j.dir != "" {
			found, err = w.visitDir(j.dir, buf)
		} else {
			for _, name := range j.files {
				found = append(found, w.scanFile(j.parent, name, buf)...)
			}
		}
		w.done(found, err)
	}
}

// excluded reports whether the user's globs keep rel out of the scan.
func (w *walker) excluded(rel string, isDir bool) bool {
	return w.skip.Match(rel, isDir) || w.allow.Match(rel, isDir)
}

// visitDir scans one directory: from the cache's record when the directory has not changed since
// the last scan, by listing it otherwise.
func (w *walker) visitDir(rel string, buf []byte) ([]Finding, error) {
	if w.cache != nil {
		if rec := w.cache.lookup(rel); rec != nil {
			var st unix.Stat_t
			var err error
			if rel == "." {
				err = unix.Stat(w.root, &st) // the root may be reached through a link, as when listed
			} else {
				err = w.lstat(rel, &st)
			}
			if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && identityOf(&st) == rec.id {
				return w.replay(rel, rec, buf), nil
			}
		}
	}
	return w.listDir(rel, buf)
}

// replay scans a directory that has not changed since the last scan, whose names are therefore those
// the cache recorded: its subdirectories are visited, its candidates stat'ed and read again if they
// changed, the names with findings judged again; its other files keep their verdict (see Cache).
func (w *walker) replay(rel string, rec *dirRecord, buf []byte) []Finding {
	w.cache.sawDir(rel, rec.id, rec.dirs, rec.skip)
	if rec.skip {
		return nil
	}
	for _, d := range rec.dirs {
		w.push(job{dir: join(rel, d)})
	}
	var found []Finding
	for name, id := range rec.files {
		var st unix.Stat_t
		if w.lstat(join(rel, name), &st) == nil && identityOf(&st) == id {
			w.cache.clean(rel, name, id)
			continue
		}
		found = append(found, w.scanFile(rel, name, buf)...)
	}
	for _, name := range rec.again {
		found = append(found, w.judgeAgain(rel, name, buf)...)
	}
	return found
}

// lstat is lstat(2) of a path relative to the root.
func (w *walker) lstat(rel string, st *unix.Stat_t) error {
	if w.rootFD < 0 {
		return unix.Lstat(filepath.Join(w.root, filepath.FromSlash(rel)), st)
	}
	return unix.Fstatat(w.rootFD, filepath.FromSlash(rel), st, unix.AT_SYMLINK_NOFOLLOW)
}

// judgeAgain judges a name the cache says to judge on every scan, as what it is now.
func (w *walker) judgeAgain(dir, name string, buf []byte) []Finding {
	rel := join(dir, name)
	var st unix.Stat_t
	if err := w.lstat(rel, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		found := w.symlink(rel)
		if len(found) > 0 {
			w.cache.again(dir, name)
		}
		return found
	}
	return w.scanFile(dir, name, buf)
}

// listDir lists one directory, queues its subdirectories and its files in batches, and scans the
// last batch itself. Only a root that cannot be listed is an error; another directory that cannot be
// listed is a finding.
func (w *walker) listDir(rel string, buf []byte) ([]Finding, error) {
	entries, id, err := readDir(filepath.Join(w.root, filepath.FromSlash(rel)), rel != ".")
	switch {
	case err != nil && rel == ".":
		return nil, fmt.Errorf("scan %s: %w", w.root, err)
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil // gone since it was listed
	case err != nil:
		return []Finding{{Path: rel, Kind: "unreadable directory (not scanned)"}}, nil
	}
	if w.defaultSkip && rel != "." && w.thirdParty(rel, entries) {
		if w.cache != nil && !hasEntry(entries, "CACHEDIR.TAG") { // a tag's content decided: read it again
			w.cache.sawDir(rel, id, nil, true)
		}
		return nil, nil
	}
	var found []Finding
	var batch, subdirs []string
	for _, e := range entries {
		name := e.Name()
		child := join(rel, name)
		t := e.Type()
		switch {
		case t.IsDir():
			if w.excluded(child, true) {
				continue
			}
			if w.defaultSkip && defaultSkipDirs[name] {
				if name == ".git" && !w.excluded(child+"/config", false) {
					batch = append(batch, name+"/config")
				}
				continue
			}
			subdirs = append(subdirs, name)
			w.push(job{dir: child})
		case t&fs.ModeSymlink != 0:
			if !w.excluded(child, false) {
				f := w.symlink(child)
				if len(f) > 0 {
					w.judgeNextTime(rel, name)
				}
				found = append(found, f...)
			}
		case t.IsRegular():
			if w.excluded(child, false) {
				continue
			}
			batch = append(batch, name)
			if len(batch) == fileBatch {
				w.push(job{parent: rel, files: batch})
				batch = nil
			}
		}
		// Devices, pipes and sockets are neither secrets nor safe to open.
	}
	if w.cache != nil {
		w.cache.sawDir(rel, id, subdirs, false)
	}
	for _, name := range batch {
		found = append(found, w.scanFile(rel, name, buf)...)
	}
	return found, nil
}

// cacheDirSignature starts a CACHEDIR.TAG file (https://bford.info/cachedir/).
const cacheDirSignature = "Signature: 8a477f597d28d172789f06886806bc55"

// thirdParty recognises, by what it holds, a directory of third-party or generated files that the
// default skip list does not name: a Go or Composer vendor tree, a Python virtualenv under any name
// (often .env or venv), a cache directory tagged as such (Cargo's target, for one).
func (w *walker) thirdParty(rel string, entries []fs.DirEntry) bool {
	if path.Base(rel) == "vendor" && hasEntry(entries, "modules.txt", "autoload.php") || hasEntry(entries, "pyvenv.cfg") {
		return true
	}
	if !hasEntry(entries, "CACHEDIR.TAG") {
		return false
	}
	var st unix.Stat_t
	buf := make([]byte, len(cacheDirSignature))
	n, err := readHead(filepath.Join(w.root, filepath.FromSlash(rel), "CACHEDIR.TAG"), buf, &st)
	return err == nil && string(buf[:n]) == cacheDirSignature
}

func hasEntry(entries []fs.DirEntry, names ...string) bool {
	for _, e := range entries {
		for _, n := range names {
			if e.Name() == n && e.Type().IsRegular() {
				return true
			}
		}
	}
	return false
}

// readDir lists a directory without sorting (the findings are sorted at the end), and returns its
// identity as it was before the listing (a change during the listing shows in the next scan's stat).
// noFollow refuses a directory that became a symbolic link since its parent was listed, so the walk
// never leaves root.
func readDir(abs string, noFollow bool) ([]fs.DirEntry, fileIdentity, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if noFollow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(abs, flags, 0)
	if err != nil {
		return nil, fileIdentity{}, &fs.PathError{Op: "open", Path: abs, Err: err}
	}
	f := os.NewFile(uintptr(fd), abs)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fileIdentity{}, &fs.PathError{Op: "fstat", Path: abs, Err: err}
	}
	entries, err := f.ReadDir(-1)
	return entries, identityOf(&st), err
}

// errNotRegular says a path listed as a regular file is something else now.
var errNotRegular = errors.New("not a regular file")

// readHead reads up to len(buf) bytes from the start of a regular file, without following a symbolic
// link and without blocking on a pipe that replaced the file since it was listed.
// st receives the file's status.
func readHead(abs string, buf []byte, st *unix.Stat_t) (int, error) {
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, errNotRegular
	}
	if st.Size < int64(len(buf)) {
		buf = buf[:st.Size] // a short file needs no read to find its end
	}
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// scanFile judges one regular file of the directory dir by its name and, when the name leaves it
// open, by the start of its content, and tells the cache what to do with it next time.
func (w *walker) scanFile(dir, name string, buf []byte) []Finding {
	rel := join(dir, name)
	c := classify(rel)
	if c.definite != "" {
		w.judgeNextTime(dir, name)
		return []Finding{{Path: rel, Kind: c.definite}}
	}
	if c.binary && c.magic == magicNone || w.configOnly && c.other {
		return nil // the name decides, and a name does not change without its directory
	}
	var st unix.Stat_t
	n, err := readHead(filepath.Join(w.root, filepath.FromSlash(rel)), buf, &st)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, errNotRegular):
		w.judgeNextTime(dir, name) // gone, or no longer a regular file, since it was listed
		return nil
	case err != nil:
		w.judgeNextTime(dir, name)
		return []Finding{{Path: rel, Kind: "unreadable file (not scanned)"}}
	}
	found := judge(rel, c, buf[:n])
	switch id := identityOf(&st); {
	case w.cache == nil:
	case len(found) > 0:
		w.cache.again(dir, name)
	case !c.other:
		w.cache.clean(dir, name, id)
	case w.cache.racyID(id):
		w.cache.again(dir, name) // read maybe before a write in the same clock tick
	}
	return found
}

// judgeNextTime has the cache judge a name again on the next scan.
func (w *walker) judgeNextTime(dir, name string) {
	if w.cache != nil {
		w.cache.again(dir, name)
	}
}

// judge applies the content rules for a file of class c to the start of its content.
func judge(rel string, c fileClass, data []byte) []Finding {
	switch c.magic {
	case magicPKCS12:
		if isPKCS12(data) || isJKS(data) {
			return []Finding{{Path: rel, Kind: "PKCS#12 key store"}}
		}
		return nil
	case magicJKS:
		if isPKCS12(data) || isJKS(data) {
			return []Finding{{Path: rel, Kind: "Java key store"}}
		}
		return nil
	}
	if bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
		return nil
	}
	var found []Finding
	emit := func(off int, kind, preview string) bool {
		found = append(found, Finding{Path: rel, Line: 1 + bytes.Count(data[:off], []byte{'\n'}), Kind: kind, Preview: preview})
		return len(found) < maxPerFile
	}
	if c.dotenv {
		matchDotenv(data, emit)
	}
	if c.config != nil && len(found) < maxPerFile {
		matchConfig(data, c.config, emit)
	}
	if c.json && len(found) < maxPerFile {
		matchGoogleJSON(data, emit)
	}
	if len(found) < maxPerFile {
		matchContent(data, c, emit)
	}
	return found
}

// isPKCS12 reports whether data starts like a DER PFX: a SEQUENCE holding INTEGER 3 (the version)
// and then a SEQUENCE.
func isPKCS12(data []byte) bool {
	if len(data) < 2 || data[0] != 0x30 {
		return false
	}
	i := 2
	if l := data[1]; l&0x80 != 0 {
		i += int(l & 0x7f)
		if l&0x7f == 0 || l&0x7f > 4 {
			return false
		}
	}
	return len(data) >= i+4 && bytes.Equal(data[i:i+3], []byte{0x02, 0x01, 0x03}) && data[i+3] == 0x30
}

// isJKS reports whether data starts with the magic number of a Java (JKS) or JCEKS key store.
func isJKS(data []byte) bool {
	return bytes.HasPrefix(data, []byte{0xfe, 0xed, 0xfe, 0xed}) || bytes.HasPrefix(data, []byte{0xce, 0xce, 0xce, 0xce})
}

// symlink reports a symbolic link whose target lies outside the root and names a secret-shaped file.
// The link is never followed.
func (w *walker) symlink(rel string) []Finding {
	target, err := os.Readlink(filepath.Join(w.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil
	}
	if filepath.IsAbs(target) {
		t := filepath.Clean(target)
		if t == w.root || strings.HasPrefix(t, w.root+string(filepath.Separator)) {
			return nil
		}
	} else if j := path.Join(path.Dir(rel), filepath.ToSlash(target)); j != ".." && !strings.HasPrefix(j, "../") {
		return nil // inside: the target is scanned itself
	}
	kind := symlinkKind(rel, filepath.ToSlash(target))
	if kind == "" {
		return nil
	}
	return []Finding{{Path: rel, Kind: "symbolic link to " + kind + " outside the workspace", Preview: display(target)}}
}
