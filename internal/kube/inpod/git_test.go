package inpod

import (
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// hostGit is the environment of the git the tests themselves run: no user or system configuration.
var hostGit = []string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "LC_ALL=C"}

// git runs the host's git in dir and returns its output, failing the test on an error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, hostGit
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// sh runs a shell script in dir with the tests' git environment.
func sh(t *testing.T, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir, cmd.Env = dir, hostGit
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// testRepo is a bare repository served by the tests: main holds two commits (first, tip: a text
// file, an executable, a binary file, a symbolic link), the annotated tag v1 names first, and the
// branch side a third commit.
type testRepo struct {
	root             string // holds srv.git and the seed it was made from
	first, tip, side string
}

func newTestRepo(t *testing.T) *testRepo {
	t.Helper()
	root := t.TempDir()
	sh(t, root, `git init -q -b main seed && cd seed
echo one > README && git add README && git commit -qm first && git tag -a v1 -m v1
echo two >> README && mkdir -p src && printf 'package main\n' > src/main.go && echo log > keep.log
printf 'bin\000ary\001' > data.bin && chmod +x src/main.go && ln -s README readme.link && git add -A && git commit -qm tip
git checkout -q -b side && echo side > side.txt && git add side.txt && git commit -qm side && git checkout -q main
git clone -q --bare . ../srv.git && git -C ../srv.git update-server-info`)
	seed := filepath.Join(root, "seed")
	return &testRepo{root: root, first: git(t, seed, "rev-parse", "v1^{commit}"), tip: git(t, seed, "rev-parse", "main"),
		side: git(t, seed, "rev-parse", "side")}
}

// serverKind is how a test serves the repository.
type serverKind int

const (
	smartV2  serverKind = iota // git http-backend: protocol v2, shallow fetches, any commit by name
	smartV0                    // the same, with the protocol header dropped: v0 refuses unadvertised commits
	dumbHTTP                   // the repository's files: no shallow fetches
)

func (k serverKind) String() string {
	return [...]string{"smart-v2", "smart-v0", "dumb"}[k]
}

// handler serves r.root's repositories as kind; requests counts every request.
func (r *testRepo) handler(t *testing.T, kind serverKind, requests *atomic.Int64) http.Handler {
	t.Helper()
	var h http.Handler
	switch kind {
	case dumbHTTP:
		h = http.FileServer(http.Dir(r.root))
	default:
		execPath := strings.TrimSpace(string(must(exec.Command("git", "--exec-path").Output())))
		h = &cgi.Handler{Path: filepath.Join(execPath, "git-http-backend"),
			Env:    []string{"GIT_PROJECT_ROOT=" + r.root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent"},
			Stderr: io.Discard}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if requests != nil {
			requests.Add(1)
		}
		if kind == smartV0 {
			req.Header.Del("Git-Protocol")
		}
		h.ServeHTTP(w, req)
	})
}

// serve serves r as kind on loopback and returns the repository's URL.
func (r *testRepo) serve(t *testing.T, kind serverKind) string {
	t.Helper()
	srv := httptest.NewServer(r.handler(t, kind, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/srv.git"
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
