package scan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rulesVersion names the rules and the cache's form; change it with any rule, so that a cache made by
// an older cordon is not trusted.
const rulesVersion = "2"

// cacheMagic starts a cache file.
const cacheMagic = "cordon-scan-cache"

// Cache remembers, per directory, what the last scan saw there, so that the next scan of the same tree
// costs one lstat per directory rather than one per file, and holds O(directories) in memory:
//
//   - the directory's identity (device, inode, size, modification and change time). A name added,
//     removed or renamed in it, a file replaced by another (an editor's save by rename), a link made,
//     a file system mounted over it: each changes this identity, and a changed directory is listed
//     and every file in it judged again, content included.
//   - its subdirectories (walked, each against its own record), and whether it is third-party (not
//     scanned below).
//   - its candidates: the files whose names mark configuration, keys or environment (dotfiles, .env*,
//     *.json, *.yaml, *.pem, .git/config, ...: what Options.ConfigOnly reads), kept with their own
//     identity when clean. Writing a file does not change its directory, so these are stat'ed on
//     every scan and read again when they changed; the change time cannot be set by a user, so a file
//     rewritten with its old modification time (touch -r) is read again.
//   - the names judged again on every scan: files with findings, unreadable ones, and any file changed
//     within racyWindow before the scan (git's "racily clean" entries: a rewrite in the same clock tick
//     could leave its identity unchanged).
//
// What the cache gives up: the content of other files (source code, text) is read when the file first
// appears in a directory, when the directory changes, or when the cache is lost, but not when the
// file is written in place, since only a stat of every file would see that. The name rules are never
// affected: a name cannot appear without its directory changing.
//
// A Cache is meant to be kept in cordon's own state, which the sandbox never sees; whoever can write
// it can hide a file from the scan. Its zero value is not usable: use NewCache or ReadCache.
type Cache struct {
	mu   sync.Mutex
	key  string                // the rules and options the records were made with
	old  map[string]*dirRecord // from the last scan: what may be trusted now, by directory
	next map[string]*dirRecord // what this scan saw
	// racy is how long before a scan's start a change must be for it to be trusted.
	racy time.Duration
	// before is the latest change time (ns) a file or directory may have to be trusted by this scan.
	before int64
	// rekeyed says the last scan began with another key than the cache had.
	rekeyed bool
}

// racyWindow is Cache.racy's value: far longer than a clock tick.
const racyWindow = time.Second

// fileIdentity is what says a file or directory has not changed since it was read.
type fileIdentity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

// dirRecord is what a scan saw in one directory.
type dirRecord struct {
	id fileIdentity
	// seen says the directory itself was listed (or found unchanged) and is not racy: only such a
	// record is written. Without it the record holds only results for its files that arrived.
	seen bool
	// skip: a third-party directory, nothing below it scanned.
	skip bool
	// dirs are the subdirectories to walk.
	dirs []string
	// files are the candidates found clean, by name (relative to the directory: ".git/config" is one).
	files map[string]fileIdentity
	// again are the names judged on every scan.
	again []string
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{old: map[string]*dirRecord{}, next: map[string]*dirRecord{}, racy: racyWindow}
}

// Cache lines after the header, one record per directory, its lines after its "d" line:
//
//	d DEV INO SIZE MTIME CTIME SKIP "dir"   the directory, relative to the root ("." is the root)
//	s "name"                                a subdirectory
//	f DEV INO SIZE MTIME CTIME "name"       a candidate found clean
//	a "name"                                a name judged on every scan

// ReadCache reads a cache written by Cache.WriteTo. A cache made with other rules or options is read
// as empty when a scan begins; a malformed one is an error naming the line (the caller can start with
// NewCache).
func ReadCache(r io.Reader) (*Cache, error) {
	c := NewCache()
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("scan cache: header: %w", err)
	}
	key, ok := strings.CutPrefix(strings.TrimSuffix(head, "\n"), cacheMagic+" ")
	if !ok {
		return nil, errors.New("scan cache: not a scan cache")
	}
	c.key = key
	var cur *dirRecord
	for n := 2; ; n++ {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return c, nil
		}
		if err != nil {
			return nil, fmt.Errorf("scan cache: line %d: %w", n, err)
		}
		if cur, err = c.parseLine(strings.TrimSuffix(line, "\n"), cur); err != nil {
			return nil, fmt.Errorf("scan cache: line %d: %w", n, err)
		}
	}
}

// parseLine adds one line to the cache; cur is the directory the line belongs to, and the result the
// one the next line does.
func (c *Cache) parseLine(line string, cur *dirRecord) (*dirRecord, error) {
	tag, rest, _ := strings.Cut(line, " ")
	var nums [6]int64
	var fields int
	switch tag {
	case "d":
		fields = 6
	case "f":
		fields = 5
	case "s", "a":
	default:
		return nil, fmt.Errorf("unknown record %q", tag)
	}
	for i := range fields {
		field, r, ok := strings.Cut(rest, " ")
		if !ok {
			return nil, errors.New("too few fields")
		}
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return nil, err
		}
		nums[i], rest = v, r
	}
	name, err := strconv.Unquote(rest)
	if err != nil {
		return nil, fmt.Errorf("path: %w", err)
	}
	id := fileIdentity{dev: uint64(nums[0]), ino: uint64(nums[1]), size: nums[2], mtime: nums[3], ctime: nums[4]}
	if tag == "d" {
		if c.old[name] != nil {
			return nil, fmt.Errorf("directory %q twice", name)
		}
		rec := &dirRecord{id: id, seen: true, skip: nums[5] != 0}
		c.old[name] = rec
		return rec, nil
	}
	if cur == nil {
		return nil, errors.New("an entry before any directory")
	}
	switch tag {
	case "s":
		cur.dirs = append(cur.dirs, name)
	case "f":
		if cur.files == nil {
			cur.files = map[string]fileIdentity{}
		}
		cur.files[name] = id
	case "a":
		cur.again = append(cur.again, name)
	}
	return cur, nil
}

// WriteTo writes what the last scan saw (not what earlier scans did: a deleted directory drops out),
// sorted, for ReadCache.
func (c *Cache) WriteTo(w io.Writer) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := w.Write(encode(c.key, c.next))
	if err != nil {
		return int64(n), fmt.Errorf("scan cache: %w", err)
	}
	return int64(n), nil
}

// encode renders records in the cache's form, sorted so that the same tree gives the same bytes.
func encode(key string, recs map[string]*dirRecord) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s\n", cacheMagic, key)
	dirs := make([]string, 0, len(recs))
	for d, rec := range recs {
		if rec.seen {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	var line []byte
	ident := func(tag string, id fileIdentity, extra ...int64) {
		line = append(line[:0], tag...)
		for _, v := range append([]int64{int64(id.dev), int64(id.ino), id.size, id.mtime, id.ctime}, extra...) {
			line = append(line, ' ')
			line = strconv.AppendInt(line, v, 10)
		}
		line = append(line, ' ')
	}
	named := func(name string) {
		line = strconv.AppendQuote(line, name)
		b.Write(append(line, '\n'))
	}
	for _, d := range dirs {
		rec := recs[d]
		skip := int64(0)
		if rec.skip {
			skip = 1
		}
		ident("d", rec.id, skip)
		named(d)
		for _, s := range sorted(rec.dirs) {
			line = append(line[:0], "s "...)
			named(s)
		}
		names := make([]string, 0, len(rec.files))
		for name := range rec.files {
			names = append(names, name)
		}
		for _, name := range sorted(names) {
			ident("f", rec.files[name])
			named(name)
		}
		for _, a := range sorted(rec.again) {
			line = append(line[:0], "a "...)
			named(a)
		}
	}
	return b.Bytes()
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// Changed reports whether the last scan saw something else than the records it began with: a cache
// that would be written out the same need not be written (the common start, where nothing changed).
// It may say so of records that differ only in order, which costs a write and nothing else.
func (c *Cache) Changed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rekeyed || seenCount(c.old) != seenCount(c.next) {
		return true
	}
	for d, n := range c.next {
		if !n.seen {
			continue
		}
		o := c.old[d]
		if o == nil || !o.seen || o.id != n.id || o.skip != n.skip || !slices.Equal(o.dirs, n.dirs) ||
			!slices.Equal(o.again, n.again) || !maps.Equal(o.files, n.files) {
			return true
		}
	}
	return false
}

func seenCount(recs map[string]*dirRecord) int {
	n := 0
	for _, r := range recs {
		if r.seen {
			n++
		}
	}
	return n
}

// begin starts a scan with the given rules-and-options key: the records of the last scan become the
// ones to trust, unless they were made with another key.
func (c *Cache) begin(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.next) > 0 {
		c.old = c.next
	}
	c.rekeyed = c.key != key
	if c.rekeyed {
		c.old = map[string]*dirRecord{}
		c.key = key
	}
	c.next = make(map[string]*dirRecord, len(c.old))
	c.before = time.Now().Add(-c.racy).UnixNano()
}

// racy reports whether a change at id's times may not be visible in them yet.
func (c *Cache) racyID(id fileIdentity) bool {
	return id.ctime > c.before || id.mtime > c.before
}

// lookup returns the last scan's record of dir, or nil.
func (c *Cache) lookup(dir string) *dirRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.old[dir]
}

// rec returns this scan's record of dir, made on first use; c.mu must be held.
func (c *Cache) rec(dir string) *dirRecord {
	r := c.next[dir]
	if r == nil {
		r = &dirRecord{}
		c.next[dir] = r
	}
	return r
}

// sawDir records a directory listed (or found unchanged) with this identity, its subdirectories, and
// whether it is third-party. A directory changed within the racy window is not recorded: the next
// scan lists it again.
func (c *Cache) sawDir(dir string, id fileIdentity, subdirs []string, skip bool) {
	if c.racyID(id) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(dir)
	r.id, r.seen, r.skip, r.dirs = id, true, skip, subdirs
}

// clean records a candidate of dir read and found clean with this identity (one changed within the
// racy window is judged again next time instead).
func (c *Cache) clean(dir, name string, id fileIdentity) {
	if c.racyID(id) {
		c.again(dir, name)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(dir)
	if r.files == nil {
		r.files = map[string]fileIdentity{}
	}
	r.files[name] = id
}

// again records a name of dir to judge on every scan.
func (c *Cache) again(dir, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rec(dir)
	r.again = append(r.again, name)
}
