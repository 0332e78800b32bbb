package scan

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeTree creates files (slash paths relative to root) with their contents.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		abs := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func scanOK(t *testing.T, root string, opt Options) []Finding {
	t.Helper()
	found, err := ScanTree(context.Background(), root, opt)
	if err != nil {
		t.Fatalf("ScanTree: %v", err)
	}
	return found
}

// pkcs12Head is the start of a DER PFX: SEQUENCE (long length), INTEGER 3, SEQUENCE.
var pkcs12Head = "\x30\x82\x0a\x10\x02\x01\x03\x30\x82\x09\xd6" + strings.Repeat("\x01", 64)

func TestScanTree(t *testing.T) {
	g := newGen(10)
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"README.md":                         "# project\nSet GITHUB_TOKEN in your shell.\n",
		"main.go":                           "package main\n",
		".env":                              "PORT=3000\nOPENAI_API_KEY=" + g.str(20, alnum) + "\n",
		".env.example":                      "OPENAI_API_KEY=\nPORT=3000\n",
		"config/db.yml":                     "prod:\n  url: postgres://app:" + g.str(12, alnum) + "@db.prod.example/app\ndev:\n  url: postgres://app:dev@localhost/app\n",
		"keys/id_ed25519":                   "anything",
		"keys/id_ed25519.pub":               "ssh-ed25519 AAAA user@host\n",
		"certs/tls.key":                     g.pem(privateLabel("EC")),
		"certs/tls.crt":                     g.pem("CERTIFICATE"),
		"certs/client.p12":                  pkcs12Head,
		"certs/notes.p12":                   "not a key store\n",
		"certs/app.jks":                     "\xfe\xed\xfe\xed\x00\x00\x00\x02",
		".aws/credentials":                  "[default]\n",
		"infra/terraform.tfstate":           "{}",
		"infra/.terraform/providers/x.json": "{\"k\": \"" + g.github() + "\"}",
		"secrets.kdbx":                      "\x03\xd9\xa2\x9a",
		".netrc":                            "machine a login b password c\n",
		"src/app.js":                        "const key = '" + g.stripe() + "';\n",
		"node_modules/pkg/.env":             "SECRET=" + g.str(20, alnum) + "\n",
		"vendor/modules.txt":                "# golang.org/x/sys v0.1.0\n",
		"vendor/golang.org/x/sys/.env":      "SECRET=" + g.str(20, alnum) + "\n",
		"py/.env/pyvenv.cfg":                "home = /usr/bin\n",
		"py/.env/lib/site-packages/x/k.pem": g.pem(privateLabel("RSA")),
		"target/CACHEDIR.TAG":               cacheDirSignature + "\n# cargo\n",
		"target/debug/build/out.txt":        g.github(),
		"notcache/CACHEDIR.TAG":             "no signature\n",
		"notcache/a.txt":                    "k=" + g.github(),
		".git/config":                       "[remote \"origin\"]\n\turl = https://u:" + g.str(20, alnum) + "@git.corp.io/a.git\n",
		".git/objects/ab/cdef":              g.github(),
		"image.png":                         "\x89PNG" + g.github(),
		"data.bin":                          g.github(),
	})
	want := []Finding{
		{Path: ".aws/credentials", Kind: "AWS credentials file"},
		{Path: ".env", Line: 2, Kind: "secret in dotenv file", Preview: "OPENAI_API_KEY=…"},
		{Path: ".git/config", Line: 2, Kind: "URL with credentials for git.corp.io", Preview: "https://u:…@git.corp.io"},
		{Path: ".netrc", Kind: "netrc file (machine passwords)"},
		{Path: "certs/app.jks", Kind: "Java key store"},
		{Path: "certs/client.p12", Kind: "PKCS#12 key store"},
		{Path: "certs/tls.key", Line: 1, Kind: "private key", Preview: p("-----BEGIN ", privateLabel("EC"), "-----")},
		{Path: "config/db.yml", Line: 2, Kind: "database URL to db.prod.example", Preview: "postgres://app:…@db.prod.example"},
		{Path: "infra/terraform.tfstate", Kind: "Terraform state (holds secrets in plain text)"},
		{Path: "keys/id_ed25519", Kind: "SSH private key"},
		{Path: "notcache/a.txt", Line: 1, Kind: "GitHub token", Preview: p("gh", "p_") + "…"},
		{Path: "secrets.kdbx", Kind: "KeePass database"},
		{Path: "src/app.js", Line: 1, Kind: "Stripe live key", Preview: p("sk", "_live_") + "…"},
	}
	for _, workers := range []int{1, 8} {
		got := scanOK(t, root, Options{Workers: workers})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("workers=%d: findings (-want +got):\n%s", workers, diff)
		}
	}
	wantPaths := []string{".aws/credentials", ".env", ".git/config", ".netrc", "certs/app.jks", "certs/client.p12",
		"certs/tls.key", "config/db.yml", "infra/terraform.tfstate", "keys/id_ed25519", "notcache/a.txt", "secrets.kdbx",
		"src/app.js"}
	if diff := cmp.Diff(wantPaths, Paths(want)); diff != "" {
		t.Errorf("Paths (-want +got):\n%s", diff)
	}

	// The trees skipped by default hold findings, so the skip can be seen to matter.
	all := Paths(scanOK(t, root, Options{NoDefaultSkip: true}))
	for _, p := range []string{"node_modules/pkg/.env", "vendor/golang.org/x/sys/.env", ".git/objects/ab/cdef",
		"infra/.terraform/providers/x.json", "py/.env/lib/site-packages/x/k.pem", "target/debug/build/out.txt"} {
		if !contains(all, p) {
			t.Errorf("NoDefaultSkip: %s not found in %v", p, all)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestSkipAndAllow(t *testing.T) {
	g := newGen(11)
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		".env":                 "API_KEY=" + g.str(20, alnum),
		"data/dump.sql":        "-- postgres://a:" + g.str(10, alnum) + "@db.prod.example/x",
		"testdata/server.key":  g.pem(privateLabel("RSA")),
		"vendor/lib/.env":      "API_KEY=" + g.str(20, alnum), // a vendor tree without modules.txt is the project's own
		"sub/dir/.env.staging": "API_KEY=" + g.str(20, alnum),
	})
	all := []string{".env", "data/dump.sql", "sub/dir/.env.staging", "testdata/server.key", "vendor/lib/.env"}
	if diff := cmp.Diff(all, Paths(scanOK(t, root, Options{}))); diff != "" {
		t.Fatalf("without globs (-want +got):\n%s", diff)
	}
	got := Paths(scanOK(t, root, Options{Skip: []string{"data/"}, Allow: []string{"testdata/**", ".env.*"}}))
	if diff := cmp.Diff([]string{".env", "vendor/lib/.env"}, got); diff != "" {
		t.Errorf("with globs (-want +got):\n%s", diff)
	}
	if _, err := ScanTree(context.Background(), root, Options{Allow: []string{"/etc/passwd"}}); err == nil {
		t.Error("an absolute allow glob was accepted")
	}
	if _, err := ScanTree(context.Background(), filepath.Join(root, "missing"), Options{}); err == nil {
		t.Error("a missing root was accepted")
	}
}

func TestSymlinks(t *testing.T) {
	g := newGen(12)
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{
		".ssh/id_rsa":  g.pem(privateLabel("RSA")),
		"prod.env":     "API_KEY=" + g.str(20, alnum),
		"notes.txt":    g.github(),
		"keys/a.txt":   g.github(),
		".ssh/config":  "Host *\n",
		"project/.env": "",
	})
	root := t.TempDir()
	writeTree(t, root, map[string]string{"id_rsa": g.pem(privateLabel("RSA")), "src/main.go": "package main\n"})
	links := map[string]string{
		"deploy_key":    filepath.Join(outside, ".ssh/id_rsa"), // the target's name says it
		".env":          filepath.Join(outside, "prod.env"),    // the link's name says it
		"sshdir":        filepath.Join(outside, ".ssh"),        // a directory of credentials
		"notes.txt":     filepath.Join(outside, "notes.txt"),   // never followed, so its token is not seen
		"keys":          filepath.Join(outside, "keys"),        // a directory: not walked
		"src/local_key": "../id_rsa",                           // inside: id_rsa is reported itself
		"src/up":        "../../" + filepath.Base(outside) + "/prod.env",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	got := scanOK(t, root, Options{})
	want := []Finding{
		{Path: ".env", Kind: "symbolic link to dotenv file outside the workspace", Preview: links[".env"]},
		{Path: "deploy_key", Kind: "symbolic link to SSH private key outside the workspace", Preview: links["deploy_key"]},
		{Path: "id_rsa", Kind: "SSH private key"},
		{Path: "src/up", Kind: "symbolic link to dotenv file outside the workspace", Preview: links["src/up"]},
		{Path: "sshdir", Kind: "symbolic link to path under .ssh outside the workspace", Preview: links["sshdir"]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestSpecialFilesDoNotBlock(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{".env", "pipe"} {
		if err := syscall.Mkfifo(filepath.Join(root, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ScanTree(ctx, root, Options{})
	if err != nil || len(got) != 0 {
		t.Errorf("ScanTree over pipes = %v, %v; want nothing", got, err)
	}
}

func TestCancelled(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a/b/c.txt": "x"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ScanTree(ctx, root, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ScanTree with a cancelled context: %v", err)
	}
}

// TestUnreadable checks that files and directories the scan cannot read are reported, not fatal. Root
// reads everything, so as root the scan runs again in a child process as nobody.
func TestUnreadable(t *testing.T) {
	if dir := os.Getenv("CORDON_SCAN_UNREADABLE_ROOT"); dir != "" {
		found, err := ScanTree(context.Background(), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			os.Stdout.WriteString("FINDING " + f.String() + "\n")
		}
		return
	}
	g := newGen(13)
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"secret.txt":     "k=" + g.github(),
		"closed.txt":     "x",
		"closed/a.txt":   "x",
		"open/readme.md": "x",
	})
	for _, p := range []string{"closed.txt", "closed"} {
		if err := os.Chmod(filepath.Join(root, p), 0); err != nil {
			t.Fatal(err)
		}
	}
	want := "FINDING closed: unreadable directory (not scanned)\nFINDING closed.txt: unreadable file (not scanned)\n" +
		"FINDING secret.txt:1: GitHub token (" + p("gh", "p_") + "…)\n"
	if os.Geteuid() != 0 {
		var b strings.Builder
		for _, f := range scanOK(t, root, Options{}) {
			b.WriteString("FINDING " + f.String() + "\n")
		}
		if b.String() != want {
			t.Errorf("got\n%s\nwant\n%s", b.String(), want)
		}
		return
	}
	// The child needs to reach the tree and the test binary as nobody.
	for dir := root; dir != "/"; dir = filepath.Dir(dir) {
		if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, st.Mode().Perm())
		}
	}
	bin := filepath.Join(root, "..", "scan.test")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestUnreadable$", "-test.count=1")
	cmd.Env = []string{"CORDON_SCAN_UNREADABLE_ROOT=" + root}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as nobody: %v\n%s", err, out)
	}
	var got strings.Builder
	for _, line := range strings.SplitAfter(string(out), "\n") {
		if strings.HasPrefix(line, "FINDING ") {
			got.WriteString(line)
		}
	}
	if got.String() != want {
		t.Errorf("got\n%s\nwant\n%s", got.String(), want)
	}
}

func TestConfigOnly(t *testing.T) {
	g := newGen(14)
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"src/app.js":       "const k = '" + g.github() + "';\n",
		"config/db.yml":    "url: postgres://a:" + g.str(10, alnum) + "@db.prod.example/x\n",
		".env":             "API_KEY=" + g.str(20, alnum),
		".config/tool":     "token=" + g.github(), // a dotfile directory's file: the name does not say
		".s3cfg":           "secret_key = " + g.str(40, b64),
		"certs/server.key": g.pem(privateLabel("RSA")),
		"keys/id_rsa":      "x",
	})
	all := []string{".config/tool", ".env", ".s3cfg", "certs/server.key", "config/db.yml", "keys/id_rsa", "src/app.js"}
	if diff := cmp.Diff(all, Paths(scanOK(t, root, Options{}))); diff != "" {
		t.Fatalf("full scan (-want +got):\n%s", diff)
	}
	want := []string{".env", ".s3cfg", "certs/server.key", "config/db.yml", "keys/id_rsa"}
	if diff := cmp.Diff(want, Paths(scanOK(t, root, Options{ConfigOnly: true}))); diff != "" {
		t.Errorf("ConfigOnly (-want +got):\n%s", diff)
	}
}

func TestSummary(t *testing.T) {
	hint := "filesystem.allow_secrets in the policy"
	for _, tt := range []struct {
		paths []string
		want  string
	}{
		{nil, ""},
		{[]string{".env"}, "masked 1 secret-shaped file from the agent: .env (allow one with " + hint + ")"},
		{[]string{"keys/id_rsa", ".env", ".env", "config/db.yml", "x.kdbx"},
			"masked 4 secret-shaped files from the agent: .env, config/db.yml, keys/id_rsa and 1 more (allow one with " + hint + ")"},
	} {
		var fs []Finding
		for _, p := range tt.paths {
			fs = append(fs, Finding{Path: p, Kind: "k"})
		}
		fs = append(fs, Finding{Env: "TOKEN", Kind: "k"}) // variables are not masked files
		if got := Summary(fs, hint, ""); got != tt.want {
			t.Errorf("Summary(%v) = %q, want %q", tt.paths, got, tt.want)
		}
	}
}

// TestSummaryPointsToTheListing checks that a line naming only some files says where all of them are,
// and that the listing names every finding without its secret.
func TestSummaryPointsToTheListing(t *testing.T) {
	var fs []Finding
	for _, p := range []string{"a.env", "b.env", "c.env", "d.env", "e.env"} {
		fs = append(fs, Finding{Path: p, Line: 1, Kind: "database URL to db.corp.io", Preview: "postgres://u:…@db.corp.io"})
	}
	want := "masked 5 secret-shaped files from the agent: a.env, b.env, c.env and 2 more, all in /run/x/masked-secrets.txt (allow one with h)"
	if got := Summary(fs, "h", "/run/x/masked-secrets.txt"); got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got := Summary(fs[:3], "h", "/run/x/masked-secrets.txt"); strings.Contains(got, "all in") {
		t.Errorf("Summary of files it names all points to the listing: %q", got)
	}
	got := string(Listing(fs))
	if n := strings.Count(got, "\n"); n != 5 || !strings.Contains(got, "e.env:1: database URL to db.corp.io (postgres://u:…@db.corp.io)\n") {
		t.Errorf("Listing = %q, want 5 lines naming e.env", got)
	}
}

// TestTerminalSafe checks that names and URLs from the workspace cannot put escape sequences on the
// user's terminal through a finding's text.
func TestTerminalSafe(t *testing.T) {
	g := newGen(15)
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"evil\x1b[2J.env": "API_KEY=" + g.str(20, alnum),
		"db.txt":          "postgres://u\x9b31m:" + g.str(10, alnum) + "@db.prod\xc2\x9b2J.example/x",
	})
	found := scanOK(t, root, Options{})
	if len(found) != 2 {
		t.Fatalf("findings %v, want 2", found)
	}
	lines := Summary(found, "x", "")
	for _, f := range found {
		lines += "\n" + f.String()
	}
	if strings.Contains(lines, "\x1b") || strings.Contains(lines, "\x9b") || strings.Contains(lines, "\u009b") {
		t.Errorf("raw control characters in:\n%q", lines)
	}
	if !strings.Contains(lines, `"evil\x1b[2J.env"`) {
		t.Errorf("the name is not shown escaped:\n%s", lines)
	}
}

func TestMaxRead(t *testing.T) {
	g := newGen(16)
	root := t.TempDir()
	writeTree(t, root, map[string]string{"big.txt": strings.Repeat("x\n", 1000) + g.github() + "\n"})
	if got := Paths(scanOK(t, root, Options{MaxRead: 1000})); len(got) != 0 {
		t.Errorf("MaxRead 1000 found %v past its bound", got)
	}
	if got := Paths(scanOK(t, root, Options{MaxRead: 4000})); len(got) != 1 {
		t.Errorf("MaxRead 4000 found %v, want big.txt", got)
	}
}

// TestOwnSourceIsClean scans this package: its tests build their secrets at run time, so that the
// repository holds nothing a scanner (this one included) flags. A rule that starts matching its own
// source, or a test that commits a secret-shaped string, fails here.
func TestOwnSourceIsClean(t *testing.T) {
	if found := scanOK(t, ".", Options{}); len(found) != 0 {
		t.Errorf("this package's files hold secret-shaped strings:\n%v", found)
	}
}
