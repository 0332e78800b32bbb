package scan

import (
	"bufio"
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

// rulesVersion names the rules a cache was made with; change it with any rule, so that a cache made by
// an older cordon is not trusted.
const rulesVersion = "1"

// cacheMagic starts a cache file.
const cacheMagic = "cordon-scan-cache"

// Cache remembers which files a scan read and found clean, by their identity (device, inode, size,
// modification and change time), so that the next scan of the same tree reads only files that
// changed: one lstat instead of open, fstat, read and close. A file with findings is not cached; it is
// read again each time. The change time cannot be set by a user, so a file rewritten with its old
// modification time is still read again. As the kernel stamps times with a clock that ticks every few
// milliseconds, a file changed within a second before the scan is not cached (git's "racily clean"
// entries): a rewrite in the same tick could leave its identity unchanged.
//
// A Cache is meant to be kept in cordon's own state, which the sandbox never sees; whoever can write
// it can hide a file from the scan. Its zero value is not usable: use NewCache or ReadCache.
type Cache struct {
	mu   sync.Mutex
	key  string                  // the rules and options the entries were made with
	old  map[string]fileIdentity // from the last scan: what may be trusted now
	next map[string]fileIdentity // clean files seen by this scan
	// racy is how long before a scan's start a change must be for the file to be cached.
	racy time.Duration
	// before is the latest change time (ns) a file may have to be cached by this scan.
	before int64
	// rekeyed says the last scan began with another key than the cache had.
	rekeyed bool
}

// racyWindow is Cache.racy's value: far longer than a clock tick.
const racyWindow = time.Second

// fileIdentity is what says a file has not changed since it was read.
type fileIdentity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{old: map[string]fileIdentity{}, next: map[string]fileIdentity{}, racy: racyWindow}
}

// ReadCache reads a cache written by Cache.WriteTo. A cache made with other rules or options is read
// as empty when a scan begins; a malformed one is an error (the caller can start with NewCache).
func ReadCache(r io.Reader) (*Cache, error) {
	c := NewCache()
	br := bufio.NewReader(r)
	head, err := br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("scan cache: header: %w", err)
	}
	key, ok := strings.CutPrefix(strings.TrimSuffix(head, "\n"), cacheMagic+" ")
	if !ok {
		return nil, errors.New("scan cache: not a scan cache")
	}
	c.key = key
	for n := 2; ; n++ {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return c, nil
		}
		if err != nil {
			return nil, fmt.Errorf("scan cache: line %d: %w", n, err)
		}
		rel, id, err := parseCacheLine(strings.TrimSuffix(line, "\n"))
		if err != nil {
			return nil, fmt.Errorf("scan cache: line %d: %w", n, err)
		}
		c.old[rel] = id
	}
}

// parseCacheLine reads "dev ino size mtime ctime quoted-path".
func parseCacheLine(line string) (string, fileIdentity, error) {
	var nums [5]int64
	for i := range nums {
		field, rest, ok := strings.Cut(line, " ")
		if !ok {
			return "", fileIdentity{}, errors.New("too few fields")
		}
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return "", fileIdentity{}, err
		}
		nums[i], line = v, rest
	}
	rel, err := strconv.Unquote(line)
	if err != nil {
		return "", fileIdentity{}, fmt.Errorf("path: %w", err)
	}
	return rel, fileIdentity{dev: uint64(nums[0]), ino: uint64(nums[1]), size: nums[2], mtime: nums[3], ctime: nums[4]}, nil
}

// WriteTo writes the clean files the last scan saw (not those of earlier scans: a deleted file
// drops out), sorted, for ReadCache.
func (c *Cache) WriteTo(w io.Writer) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bw := bufio.NewWriter(w)
	cw := &countWriter{w: bw}
	fmt.Fprintf(cw, "%s %s\n", cacheMagic, c.key)
	paths := make([]string, 0, len(c.next))
	for p := range c.next {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var line []byte
	for _, p := range paths {
		id := c.next[p]
		line = line[:0]
		for _, v := range []int64{int64(id.dev), int64(id.ino), id.size, id.mtime, id.ctime} {
			line = strconv.AppendInt(line, v, 10)
			line = append(line, ' ')
		}
		line = strconv.AppendQuote(line, p)
		line = append(line, '\n')
		cw.Write(line)
	}
	if cw.err == nil {
		cw.err = bw.Flush()
	}
	if cw.err != nil {
		return cw.n, fmt.Errorf("scan cache: %w", cw.err)
	}
	return cw.n, nil
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (cw *countWriter) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	cw.err = err
	return n, err
}

// Changed reports whether the last scan's entries differ from those it began with: a cache that would
// be written out the same need not be written (the common start, where nothing changed).
func (c *Cache) Changed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rekeyed || !maps.Equal(c.old, c.next)
}

// begin starts a scan with the given rules-and-options key: the entries of the last scan become the
// ones to trust, unless they were made with another key.
func (c *Cache) begin(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.next) > 0 {
		c.old = c.next
	}
	c.rekeyed = c.key != key
	if c.rekeyed {
		c.old = map[string]fileIdentity{}
		c.key = key
	}
	c.next = make(map[string]fileIdentity, len(c.old))
	c.before = time.Now().Add(-c.racy).UnixNano()
}

// clean reports whether rel was clean when last read and has not changed since, and if so keeps it.
func (c *Cache) clean(rel string, id fileIdentity) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.old[rel]; ok && old == id {
		c.next[rel] = id
		return true
	}
	return false
}

// record notes that rel, with this identity, was read and found clean.
func (c *Cache) record(rel string, id fileIdentity) {
	if id.ctime > c.before || id.mtime > c.before {
		return // racily clean: see Cache
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next[rel] = id
}
