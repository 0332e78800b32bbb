package scan

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// cacheLine is the line WriteTo would write for the file at abs, as it is now.
func cacheLine(t *testing.T, rel, abs string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		t.Fatal(err)
	}
	id := identityOf(&st)
	var fields []string
	for _, v := range []int64{int64(id.dev), int64(id.ino), id.size, id.mtime, id.ctime} {
		fields = append(fields, strconv.FormatInt(v, 10))
	}
	return strings.Join(fields, " ") + " " + strconv.Quote(rel) + "\n"
}

func TestCache(t *testing.T) {
	g := newGen(50)
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n", "dir/b.txt": "world\n", "secret.txt": "k=" + g.github() + "\n"})
	secret := filepath.Join(root, "secret.txt")
	want := []string{"secret.txt"}
	scan := func(c *Cache) []string {
		t.Helper()
		c.racy = -time.Hour // the files were just written: trust them anyway
		return Paths(scanOK(t, root, Options{Cache: c}))
	}

	c := NewCache()
	if diff := cmp.Diff(want, scan(c)); diff != "" {
		t.Fatalf("first scan (-want +got):\n%s", diff)
	}
	var saved bytes.Buffer
	if _, err := c.WriteTo(&saved); err != nil {
		t.Fatal(err)
	}
	wantSaved := cacheMagic + " " + rulesVersion + " maxread=65536\n" +
		cacheLine(t, "a.txt", filepath.Join(root, "a.txt")) + cacheLine(t, "dir/b.txt", filepath.Join(root, "dir/b.txt"))
	if saved.String() != wantSaved {
		t.Fatalf("saved cache:\n%s\nwant (clean files only):\n%s", saved.String(), wantSaved)
	}

	// The cache is trusted: a forged entry that calls the secret clean hides it. This is why the
	// cache must live where the sandbox cannot write.
	forged, err := ReadCache(strings.NewReader(saved.String() + cacheLine(t, "secret.txt", secret)))
	if err != nil {
		t.Fatal(err)
	}
	if got := scan(forged); len(got) != 0 {
		t.Fatalf("scan with a forged entry found %v: the cache was not used", got)
	}
	// The same file rewritten with its old size and modification time is read again: its change
	// time moved.
	st, err := os.Stat(secret)
	if err != nil {
		t.Fatal(err)
	}
	before := cacheLine(t, "secret.txt", secret)
	for deadline := time.Now().Add(2 * time.Second); cacheLine(t, "secret.txt", secret) == before; {
		if time.Now().After(deadline) {
			t.Fatal("the change time did not move")
		}
		time.Sleep(5 * time.Millisecond)
		if err := os.WriteFile(secret, []byte("k="+g.github()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(secret, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want, scan(forged)); diff != "" {
		t.Errorf("after a rewrite (-want +got):\n%s", diff)
	}

	// Other options or rules: the entries are not trusted.
	other, err := ReadCache(strings.NewReader(strings.Replace(saved.String(), "maxread=65536", "maxread=1", 1) +
		cacheLine(t, "secret.txt", secret)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, scan(other)); diff != "" {
		t.Errorf("with a cache of other options (-want +got):\n%s", diff)
	}
}

func TestCacheRacilyClean(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n"})
	c := NewCache() // the default window: a.txt was changed just now
	scanOK(t, root, Options{Cache: c})
	var saved bytes.Buffer
	if _, err := c.WriteTo(&saved); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(saved.String(), "a.txt") {
		t.Errorf("a file changed within the racy window was cached:\n%s", saved.String())
	}
	c.racy = -time.Hour
	scanOK(t, root, Options{Cache: c})
	saved.Reset()
	if _, err := c.WriteTo(&saved); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(saved.String(), "a.txt") {
		t.Errorf("a file outside the racy window was not cached:\n%s", saved.String())
	}
}

func TestReadCacheErrors(t *testing.T) {
	for _, in := range []string{"", "not a cache\n", cacheMagic + " 1\n1 2 3\n", cacheMagic + " 1\n1 2 3 4 5 unquoted\n",
		cacheMagic + " 1\n1 2 x 4 5 \"a\"\n", cacheMagic + " 1\n1 2 3 4 5 \"a\""} {
		if _, err := ReadCache(strings.NewReader(in)); err == nil {
			t.Errorf("ReadCache(%q) accepted", in)
		}
	}
	if _, err := ReadCache(strings.NewReader(cacheMagic + " 1\n1 2 3 4 5 \"a b\\n\"\n")); err != nil {
		t.Errorf("ReadCache of a good cache: %v", err)
	}
}

// TestCacheChanged: a scan that finds the tree as the cache remembers it does not need the cache
// written again; a new, changed or deleted clean file, or other options, do.
func TestCacheChanged(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n", "b.txt": "world\n"})
	scan := func(c *Cache, opt Options) *Cache {
		t.Helper()
		c.racy = -time.Hour
		opt.Cache = c
		scanOK(t, root, opt)
		return c
	}
	reread := func(c *Cache) *Cache {
		t.Helper()
		var b bytes.Buffer
		if _, err := c.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		r, err := ReadCache(&b)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	c := scan(NewCache(), Options{})
	if !c.Changed() {
		t.Fatal("a first scan must be written")
	}
	if c = scan(reread(c), Options{}); c.Changed() {
		t.Fatal("nothing changed, yet Changed")
	}
	writeTree(t, root, map[string]string{"c.txt": "new\n"})
	if c = scan(reread(c), Options{}); !c.Changed() {
		t.Fatal("a new file, yet not Changed")
	}
	if err := os.Remove(filepath.Join(root, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if c = scan(reread(c), Options{}); !c.Changed() {
		t.Fatal("a deleted file, yet not Changed")
	}
	if c = scan(reread(c), Options{MaxRead: 1}); !c.Changed() {
		t.Fatal("other options, yet not Changed")
	}
}
