package fakegithub_test

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/creds/githubapp/fakegithub"
)

// TestGitAuth serves real repositories with git http-backend behind GitAuth, over HTTPS, and drives them
// with real git: what each token can clone and push is what its scope says, and each refusal has a
// working twin (the same operation with a token that allows it).
func TestGitAuth(t *testing.T) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	execPath, err := exec.Command(gitPath, "--exec-path").Output()
	if err != nil {
		t.Skipf("git --exec-path: %v", err)
	}
	clk := newClock()
	app := fakegithub.NewApp(t, fakegithub.Options{Now: clk.Now})
	root, work := t.TempDir(), t.TempDir()
	env := append(os.Environ(), "HOME="+work, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	run := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(gitPath, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	seed, bare := filepath.Join(work, "seed"), filepath.Join(root, "acme", "app.git")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"init", "-q", "-b", "main", seed},
		{"-C", seed, "commit", "-q", "--allow-empty", "-m", "seed"},
		{"-C", seed, "push", "-q", bare, "main"},
	} {
		if out, err := run(work, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	cfg, err := os.OpenFile(filepath.Join(bare, "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.WriteString("[http]\n\treceivepack = true\n"); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Close(); err != nil {
		t.Fatal(err)
	}
	// acme/docs exists too, so a refusal to reach it is GitAuth's and not the backend's "not found".
	if err := os.CopyFS(filepath.Join(root, "acme", "docs.git"), os.DirFS(bare)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(app.GitAuth(&cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(work, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	env = append(env, "GIT_SSL_CAINFO="+ca)
	remote := func(tok, repo string) string {
		return strings.Replace(srv.URL, "https://", "https://x-access-token:"+tok+"@", 1) + "/" + repo + ".git"
	}

	writer := mintToken(t, app, clk, []string{"app"}, map[string]string{"contents": "write"})
	reader := mintToken(t, app, clk, []string{"app"}, map[string]string{"contents": "read"})
	docsReader := mintToken(t, app, clk, []string{"docs"}, map[string]string{"contents": "read"})
	revoked := mintToken(t, app, clk, []string{"app"}, map[string]string{"contents": "write"})
	revoke(t, app, revoked)

	tests := []struct {
		name    string
		tok     string
		repo    string
		push    bool
		wantErr string // in git's output; "" means success
	}{
		{"write token pushes", writer, "acme/app", true, ""},
		{"read token reads", reader, "acme/app", false, ""},
		{"read token cannot push", reader, "acme/app", true, "403"},
		{"repository outside the token", writer, "acme/docs", false, "not found"},
		{"a token for that repository reads it", docsReader, "acme/docs", false, ""},
		{"revoked token", revoked, "acme/app", false, "Authentication failed"},
		{"no token", "", "acme/app", false, "terminal prompts disabled"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := remote(tt.tok, tt.repo)
			if tt.tok == "" {
				url = srv.URL + "/" + tt.repo + ".git"
			}
			// ls-remote reads (upload-pack); a push of the seed's history to a new branch writes.
			branch := fmt.Sprintf("refs/heads/t%d", i)
			args := []string{"ls-remote", url}
			if tt.push {
				args = []string{"-C", seed, "push", "-q", url, "main:" + branch}
			}
			out, err := run(work, args...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v\n%s", err, out)
				}
				if tt.push {
					if _, err := run(root, "-C", bare, "rev-parse", "--verify", branch); err != nil {
						t.Errorf("the push did not land: %v", err)
					}
				} else if !strings.Contains(out, "refs/heads/main") {
					t.Errorf("ls-remote listed no main branch: %q", out)
				}
				return
			}
			if err == nil || !strings.Contains(out, tt.wantErr) {
				t.Fatalf("git: %v, output %q; want a failure mentioning %q", err, out, tt.wantErr)
			}
		})
	}
}

// TestGitAuthPaths: a path that names one repository to the check and another to the backend is refused.
func TestGitAuthPaths(t *testing.T) {
	clk := newClock()
	app := fakegithub.NewApp(t, fakegithub.Options{Now: clk.Now})
	tok := mintToken(t, app, clk, []string{"app"}, map[string]string{"contents": "read"})
	var reached []string
	h := app.GitAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = append(reached, r.URL.Path) }))
	for _, tt := range []struct {
		path string
		want int
	}{
		{"/acme/app.git/info/refs", 200}, // control
		{"/acme/app/info/refs", 200},
		{"/acme/app.git/../docs.git/info/refs", 404},
		{"/acme/app.git/../../acme/docs.git/info/refs", 404},
		{"/acme/./app.git/info/refs", 404},
		{"//acme/app.git/info/refs", 404},
		{"/acme/app.git", 404},
		{"/acme/docs.git/info/refs", 404},
	} {
		req := httptest.NewRequest("GET", "http://github.test/", nil)
		req.URL.Path = tt.path
		req.SetBasicAuth("x-access-token", tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("%s: %d, want %d", tt.path, rec.Code, tt.want)
		}
	}
	if len(reached) != 2 {
		t.Errorf("backend reached for %v, want only the two controls", reached)
	}
}
