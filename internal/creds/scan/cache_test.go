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

// stamp is the identity fields WriteTo would write for the file or directory at abs, as it is now.
func stamp(t *testing.T, abs string) string {
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
	return strings.Join(fields, " ")
}

// trusting returns c set to trust what was written just now (the tests' trees are).
func trusting(c *Cache) *Cache {
	c.racy = -time.Hour
	return c
}

// saved is c as WriteTo renders it.
func saved(t *testing.T, c *Cache) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// reread is c written out and read back, as the next cordon start gets it.
func reread(t *testing.T, c *Cache) *Cache {
	t.Helper()
	r, err := ReadCache(strings.NewReader(saved(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	return trusting(r)
}

// rewriteKeepingTimes writes content into the existing file at abs and sets its times back, as
// `touch -r` would, until its change time has moved (it ticks every few milliseconds). It fails the
// test if the directory holding the file changed: the rewrite must be one only a per-file stamp sees.
func rewriteKeepingTimes(t *testing.T, abs, content string) {
	t.Helper()
	fi, err := os.Stat(abs)
	if err != nil {
		t.Fatal(err)
	}
	dir, before := stamp(t, filepath.Dir(abs)), stamp(t, abs)
	for deadline := time.Now().Add(2 * time.Second); stamp(t, abs) == before; {
		if time.Now().After(deadline) {
			t.Fatal("the change time did not move")
		}
		time.Sleep(5 * time.Millisecond) // the kernel's clock tick, not synchronisation
		f, err := os.OpenFile(abs, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(content); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chtimes(abs, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	if stamp(t, filepath.Dir(abs)) != dir {
		t.Fatal("rewriting a file in place changed its directory: the test would not test the per-file stamp")
	}
}

func TestCache(t *testing.T) {
	g := newGen(50)
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n", "dir/b.txt": "world\n", "config.yml": "debug: true\n", "secret.txt": "k=" + g.github() + "\n"})
	want := []string{"secret.txt"}
	scan := func(c *Cache) []string {
		t.Helper()
		return Paths(scanOK(t, root, Options{Cache: trusting(c)}))
	}

	c := NewCache()
	if diff := cmp.Diff(want, scan(c)); diff != "" {
		t.Fatalf("first scan (-want +got):\n%s", diff)
	}
	// Directories with their identity and subdirectories, the candidate (config.yml) with its own,
	// the file with a finding to judge again; nothing about the other clean files.
	wantSaved := cacheMagic + " " + rulesVersion + " maxread=65536\n" +
		"d " + stamp(t, root) + " 0 \".\"\ns \"dir\"\nf " + stamp(t, filepath.Join(root, "config.yml")) + " \"config.yml\"\na \"secret.txt\"\n" +
		"d " + stamp(t, filepath.Join(root, "dir")) + " 0 \"dir\"\n"
	got := saved(t, c)
	if got != wantSaved {
		t.Fatalf("saved cache:\n%s\nwant:\n%s", got, wantSaved)
	}

	// The cache is trusted: a forged record that does not name the secret hides it. This is why the
	// cache must live where the sandbox cannot write.
	forged, err := ReadCache(strings.NewReader(strings.Replace(got, "a \"secret.txt\"\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := scan(forged); len(got) != 0 {
		t.Fatalf("scan with a forged record found %v: the cache was not used", got)
	}
	// A changed directory is listed again, whatever its record says.
	writeTree(t, root, map[string]string{"new.txt": "\n"})
	if diff := cmp.Diff(want, scan(forged)); diff != "" {
		t.Errorf("after a new name in the directory (-want +got):\n%s", diff)
	}

	// Other options or rules: the records are not trusted.
	for _, opt := range []string{"maxread=1", "maxread=65536 allow=\"x\""} {
		other, err := ReadCache(strings.NewReader(strings.Replace(strings.Replace(got, "maxread=65536", opt, 1), "a \"secret.txt\"\n", "", 1)))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, scan(other)); diff != "" {
			t.Errorf("with a cache of other options %s (-want +got):\n%s", opt, diff)
		}
	}
}

// TestCacheCandidateRewrittenInPlace is the attack on the directory stamps: a secret written into a
// file that was clean, with its old modification time put back (touch -r), leaves the directory as it
// was; the file's own stamp (its change time) must still get it read again. The control scan, before
// the rewrite, takes the cache's word for the file (a forged stamp hides a secret), so the catch is
// the stamp's, not a full scan's.
func TestCacheCandidateRewrittenInPlace(t *testing.T) {
	g := newGen(51)
	for _, name := range []string{".env", "deploy/config.yaml", ".git/config", "keys/server.pem"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{name: "# nothing yet\n", "main.go": "package main\n"})
			c := NewCache()
			if got := Paths(scanOK(t, root, Options{Cache: trusting(c)})); len(got) != 0 {
				t.Fatalf("clean tree: found %v", got)
			}
			if !strings.Contains(saved(t, c), "f ") {
				t.Fatalf("the candidate has no stamp of its own:\n%s", saved(t, c))
			}
			secret := map[string]string{
				".env":               "GITHUB_TOKEN=" + g.github() + "\n",
				"deploy/config.yaml": "url: " + p("postgres://app", ":s3cr3t-pw", "@db.prod.example.com/app") + "\n",
				".git/config":        "[remote \"origin\"]\n\turl = https://x:" + g.github() + "@github.com/acme/app\n",
				"keys/server.pem":    pemKey(g),
			}[name]
			rewriteKeepingTimes(t, filepath.Join(root, filepath.FromSlash(name)), secret)
			if diff := cmp.Diff([]string{name}, Paths(scanOK(t, root, Options{Cache: reread(t, c)}))); diff != "" {
				t.Errorf("after the rewrite (-want +got):\n%s", diff)
			}
		})
	}
}

// pemKey is a PEM private key with key material after its header.
func pemKey(g *gen) string {
	return "-----BEGIN " + "PRIVATE KEY-----\n" + g.str(64, alnum) + "\n" + g.str(64, alnum) + "\n-----END PRIVATE KEY-----\n"
}

// TestCacheNewDeepFile: a secret-shaped file created deep in the tree changes only its own directory;
// the scan replays every unchanged directory from the cache, down to that one, and lists it. The file
// need not be a candidate: a new name's content is always read.
func TestCacheNewDeepFile(t *testing.T) {
	g := newGen(52)
	root := t.TempDir()
	deep := "a/b/c/d/e/f/g"
	writeTree(t, root, map[string]string{deep + "/util.go": "package g\n", "a/b/x.go": "package b\n", "top.go": "package main\n"})
	c := NewCache()
	if got := Paths(scanOK(t, root, Options{Cache: trusting(c)})); len(got) != 0 {
		t.Fatalf("clean tree: found %v", got)
	}
	parents := map[string]string{}
	for d := deep; d != "."; d = filepath.Dir(d) {
		parents[d] = stamp(t, filepath.Join(root, filepath.Dir(d)))
	}
	for _, f := range []string{deep + "/creds.go", deep + "/h/i/.env", deep + "/id_ed25519"} {
		c = reread(t, c)
		content := "const token = \"" + g.github() + "\"\n"
		if strings.HasSuffix(f, ".env") {
			content = "API_KEY=" + g.str(40, alnum) + "\n"
		}
		writeTree(t, root, map[string]string{f: content})
		for d, st := range parents {
			if d != deep && stamp(t, filepath.Join(root, filepath.Dir(d))) != st {
				t.Fatalf("%s changed: the test would not test the replay", filepath.Dir(d))
			}
		}
		found := Paths(scanOK(t, root, Options{Cache: c}))
		if !strings.Contains(strings.Join(found, " "), f) {
			t.Errorf("new %s not found: %v", f, found)
		}
	}
}

func TestCacheRacilyClean(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n", "b.yml": "x: 1\n"})
	c := NewCache() // the default window: everything was changed just now
	scanOK(t, root, Options{Cache: c})
	if s := saved(t, c); strings.Contains(s, "d ") || strings.Contains(s, "f ") {
		t.Errorf("a directory or file changed within the racy window was trusted:\n%s", s)
	}
	c.racy = -time.Hour
	scanOK(t, root, Options{Cache: c})
	if s := saved(t, c); !strings.Contains(s, "d ") || !strings.Contains(s, "\"b.yml\"") {
		t.Errorf("a tree outside the racy window was not recorded:\n%s", s)
	}
}

// TestCacheRacyFile: a file changed within the racy window of a scan whose directory is older is
// judged again next time, candidate or not: it may have been read before a write in the same tick.
func TestCacheRacyFile(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n", "b.yml": "x: 1\n"})
	old := time.Now().Add(-time.Hour)
	c := NewCache()
	c.begin("k")
	w := &walker{root: root, cache: c, maxRead: DefaultMaxRead}
	buf := make([]byte, DefaultMaxRead)
	w.scanFile(".", "a.txt", buf)
	w.scanFile(".", "b.yml", buf)
	c.sawDir(".", fileIdentity{mtime: old.UnixNano(), ctime: old.UnixNano()}, nil, false)
	s := saved(t, c)
	if !strings.Contains(s, "a \"a.txt\"") || !strings.Contains(s, "a \"b.yml\"") {
		t.Errorf("files changed just now are not judged again:\n%s", s)
	}
}

func TestReadCacheErrors(t *testing.T) {
	h := cacheMagic + " 2\n"
	for in, line := range map[string]string{
		"":                          "header",
		"not a cache\n":             "not a scan cache",
		h + "x \"a\"\n":             "line 2: unknown record",
		h + "s \"a\"\n":             "line 2: an entry before any directory",
		h + "d 1 2 3 4 5 \".\"\n":   "line 2: too few fields",
		h + "d 1 2 3 4 5 0 .\n":     "line 2: path",
		h + "d 1 2 x 4 5 0 \".\"\n": "line 2: strconv",
		h + "d 1 2 3 4 5 0 \".\"\n" + "d 1 2 3 4 5 0 \".\"\n": "line 3: directory \".\" twice",
		h + "d 1 2 3 4 5 0 \".\"":                             "line 2: EOF",
	} {
		_, err := ReadCache(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("ReadCache(%q) = %v, want an error with %q", in, err, line)
		}
	}
	good := h + "d 1 2 3 4 5 0 \".\"\ns \"a b\\n\"\nf 1 2 3 4 5 \"c\"\na \"d\"\n"
	c, err := ReadCache(strings.NewReader(good))
	if err != nil {
		t.Fatalf("ReadCache of a good cache: %v", err)
	}
	if got := string(encode(c.key, c.old)); got != good {
		t.Errorf("read back:\n%s\nwant:\n%s", got, good)
	}
}

// TestCacheChanged: a scan that finds the tree as the cache remembers it does not need the cache
// written again; a new, changed or deleted file, or other options, do.
func TestCacheChanged(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.txt": "hello\n", "b.json": "{}\n", "d/c.txt": "x\n"})
	scan := func(c *Cache, opt Options) *Cache {
		t.Helper()
		opt.Cache = c
		scanOK(t, root, opt)
		return c
	}
	c := scan(trusting(NewCache()), Options{})
	if !c.Changed() {
		t.Fatal("a first scan must be written")
	}
	if c = scan(reread(t, c), Options{}); c.Changed() {
		t.Fatal("nothing changed, yet Changed")
	}
	writeTree(t, root, map[string]string{"c.txt": "new\n"})
	if c = scan(reread(t, c), Options{}); !c.Changed() {
		t.Fatal("a new file, yet not Changed")
	}
	rewriteKeepingTimes(t, filepath.Join(root, "b.json"), "{\"a\": 1}\n")
	if c = scan(reread(t, c), Options{}); !c.Changed() {
		t.Fatal("a changed candidate, yet not Changed")
	}
	if err := os.RemoveAll(filepath.Join(root, "d")); err != nil {
		t.Fatal(err)
	}
	if c = scan(reread(t, c), Options{}); !c.Changed() {
		t.Fatal("a deleted directory, yet not Changed")
	}
	if c = scan(reread(t, c), Options{MaxRead: 1}); !c.Changed() {
		t.Fatal("other options, yet not Changed")
	}
}
