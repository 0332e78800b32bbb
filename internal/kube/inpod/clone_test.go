package inpod

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// cloneEnv is the environment a clone step in the tests gets: the host's PATH only.
var cloneEnv = []string{"PATH=" + os.Getenv("PATH")}

// TestCloneRefs: a branch, an annotated tag, the branch's tip by hash and an older commit by hash,
// from a smart server (v2: shallow, any commit), one that speaks only v0 (which will not send a
// commit no ref points at, so the clone falls back to every ref) and a dumb one (no shallow packs).
// Each time HEAD is the commit, detached, the tree is the commit's, the hash went to stdout and the
// termination log, .git/hooks is an empty directory and .git/config exists.
func TestCloneRefs(t *testing.T) {
	r := newTestRepo(t)
	for _, kind := range []serverKind{smartV2, smartV0, dumbHTTP} {
		url := r.serve(t, kind)
		for _, tc := range []struct {
			ref, want string
			shallow   bool // on a smart server
		}{
			{"main", r.tip, true},
			{"v1", r.first, true},
			{"side", r.side, true},
			{r.tip, r.tip, true},
			{r.first, r.first, kind == smartV2}, // v0 will not send it alone
		} {
			t.Run(kind.String()+"/"+tc.ref[:min(len(tc.ref), 8)], func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "src")
				termLog := filepath.Join(t.TempDir(), "termination-log")
				if err := os.WriteFile(termLog, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				var stdout bytes.Buffer
				got, err := Clone(context.Background(), CloneOptions{Repo: url, Ref: tc.ref, Dir: dir, Env: cloneEnv,
					Stdout: &stdout, TerminationLog: termLog})
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want || stdout.String() != tc.want+"\n" {
					t.Errorf("Clone = %s, stdout %q; want %s", got, stdout.String(), tc.want)
				}
				if b, _ := os.ReadFile(termLog); string(b) != tc.want {
					t.Errorf("termination log %q, want %s", b, tc.want)
				}
				if head := git(t, dir, "rev-parse", "HEAD"); head != tc.want {
					t.Errorf("HEAD %s, want %s", head, tc.want)
				}
				if sym := git(t, dir, "rev-parse", "--symbolic-full-name", "HEAD"); sym != "HEAD" {
					t.Errorf("HEAD is %s, not detached", sym)
				}
				if st := git(t, dir, "status", "--porcelain", "--untracked-files=all"); st != "" {
					t.Errorf("the checkout differs from its commit:\n%s", st)
				}
				hooks, err := os.ReadDir(filepath.Join(dir, ".git", "hooks"))
				if err != nil || len(hooks) != 0 {
					t.Errorf(".git/hooks: %v, %d entries (want an empty directory)", err, len(hooks))
				}
				if fi, err := os.Stat(filepath.Join(dir, ".git", "config")); err != nil || !fi.Mode().IsRegular() {
					t.Errorf(".git/config: %v", err)
				}
				_, err = os.Stat(filepath.Join(dir, ".git", "shallow"))
				if shallow := err == nil; shallow != (tc.shallow && kind != dumbHTTP) {
					t.Errorf("shallow clone: %v, want %v", shallow, tc.shallow && kind != dumbHTTP)
				}
				if u := git(t, dir, "config", "remote.origin.url"); u != url {
					t.Errorf("origin is %q, want %q", u, url)
				}
			})
		}
	}
}

// TestCloneErrors: each failure is one line naming the repository and the ref with git's own
// reason, and goes to the termination log too; nothing is written to stdout.
func TestCloneErrors(t *testing.T) {
	r := newTestRepo(t)
	url := r.serve(t, smartV2)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, repo, ref, dir string
		want                 []string
	}{
		{"no such branch", url, "nope", "", []string{"couldn't find remote ref nope"}},
		{"no such commit", url, strings.Repeat("1", 40), "", []string{"no commit 1111111111111111111111111111111111111111"}},
		{"no such repository", strings.TrimSuffix(url, "srv.git") + "gone.git", "main", "", []string{"gone.git", "not found"}},
		{"no server", "http://127.0.0.1:1/srv.git", "main", "", []string{"127.0.0.1 port 1"}},
		{"a token in the URL", "http://user:s3cret@127.0.0.1:1/srv.git", "main", "", []string{"http://xxxxx@127.0.0.1:1/srv.git"}},
		{"an option for a ref", url, "--upload-pack=touch /tmp/x", "", []string{"is not a branch, tag or commit"}},
		{"a refspec for a ref", url, "main:refs/heads/x", "", []string{"is not a branch, tag or commit"}},
		{"an option for a repository", "--upload-pack=x", "main", "", []string{"is not a URL"}},
		{"a directory with files", url, "main", full, []string{"is not empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "src")
			}
			termLog := filepath.Join(t.TempDir(), "termination-log")
			if err := os.WriteFile(termLog, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout bytes.Buffer
			_, err := Clone(context.Background(), CloneOptions{Repo: tc.repo, Ref: tc.ref, Dir: dir, Env: cloneEnv,
				Stdout: &stdout, TerminationLog: termLog})
			if err == nil {
				t.Fatal("Clone succeeded")
			}
			msg := err.Error()
			want := append([]string{"cloning " + redactURL(tc.repo) + " at " + tc.ref + ": "}, tc.want...)
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") || strings.Contains(msg, "s3cret") {
				t.Errorf("error is not one line or shows the password: %q", msg)
			}
			if b, _ := os.ReadFile(termLog); string(b) != msg {
				t.Errorf("termination log %q, want the error", b)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// TestCloneEnvironment: git runs with an environment of cordon's making. A hook path planted through
// the caller's GIT_CONFIG_* variables, GIT_CONFIG_PARAMETERS or a HOME's .gitconfig runs nothing
// (checkout would run post-checkout), GIT_DIR does not send the clone elsewhere; the caller's proxy
// and CA file are what git uses.
func TestCloneEnvironment(t *testing.T) {
	r := newTestRepo(t)
	evil := t.TempDir()
	marker := filepath.Join(evil, "ran")
	hooks := filepath.Join(evil, "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hooks, "post-checkout"), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(evil, "home")
	if err := os.MkdirAll(filepath.Join(home, ".config", "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(home, ".gitconfig"), filepath.Join(home, ".config", "git", "config")} {
		if err := os.WriteFile(f, []byte("[core]\n\thooksPath = "+hooks+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere := filepath.Join(evil, "elsewhere.git")

	t.Run("planted configuration", func(t *testing.T) {
		url := r.serve(t, smartV2)
		env := append([]string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
			"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=core.hooksPath", "GIT_CONFIG_VALUE_0=" + hooks,
			"GIT_CONFIG_PARAMETERS='core.hookspath'='" + hooks + "'", "GIT_DIR=" + elsewhere, "GIT_TEMPLATE_DIR=" + evil}, cloneEnv...)
		dir := filepath.Join(t.TempDir(), "src")
		if _, err := Clone(context.Background(), CloneOptions{Repo: url, Ref: "main", Dir: dir, Env: env}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("a hook planted through the environment ran")
		}
		if _, err := os.Stat(elsewhere); err == nil {
			t.Error("GIT_DIR sent the clone elsewhere")
		}
		if head := git(t, dir, "rev-parse", "HEAD"); head != r.tip {
			t.Errorf("HEAD %s, want %s", head, r.tip)
		}
	})

	t.Run("proxy", func(t *testing.T) {
		var proxied atomic.Int64
		proxy := httptest.NewServer(r.handler(t, smartV2, &proxied))
		t.Cleanup(proxy.Close)
		// git.invalid resolves nowhere: only the proxy can reach it.
		for _, name := range []string{"http_proxy", "HTTP_PROXY"} {
			proxied.Store(0)
			dir := filepath.Join(t.TempDir(), "src")
			env := append([]string{name + "=" + proxy.URL}, cloneEnv...)
			if _, err := Clone(context.Background(), CloneOptions{Repo: "http://git.invalid/srv.git", Ref: "main", Dir: dir, Env: env}); err != nil {
				if name == "HTTP_PROXY" {
					continue // curl reads only the lower-case name for http:// URLs; kept all the same
				}
				t.Fatalf("%s: %v", name, err)
			}
			if proxied.Load() == 0 {
				t.Errorf("%s: the clone did not go through the proxy", name)
			}
		}
	})

	t.Run("CA file", func(t *testing.T) {
		ca := testpki.NewCA(t, "clone test CA")
		srv := httptest.NewUnstartedServer(r.handler(t, smartV2, nil))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "127.0.0.1")}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		caFile := ca.WriteFile(t, "")
		for _, tc := range []struct {
			env []string
			ok  bool
		}{
			{nil, false},
			{[]string{"GIT_SSL_CAINFO=" + caFile}, true},
			{[]string{"SSL_CERT_FILE=" + caFile}, true},
		} {
			dir := filepath.Join(t.TempDir(), "src")
			_, err := Clone(context.Background(), CloneOptions{Repo: srv.URL + "/srv.git", Ref: "main", Dir: dir, Env: append(tc.env, cloneEnv...)})
			if (err == nil) != tc.ok {
				t.Errorf("with %q: %v, want success %v", tc.env, err, tc.ok)
			}
		}
	})
}

func TestAuthHeader(t *testing.T) {
	for _, tc := range []struct{ scheme, header, want string }{
		{"bearer", "", "Authorization: Bearer PH"},
		{"", "", "Authorization: Bearer PH"},
		{"basic", "", "Authorization: Basic eC1hY2Nlc3MtdG9rZW46UEg="},
		{"", "X-Api-Key", "X-Api-Key: PH"},
	} {
		if got := AuthHeader("PH", tc.scheme, tc.header); got != tc.want {
			t.Errorf("AuthHeader(%q, %q) = %q, want %q", tc.scheme, tc.header, got, tc.want)
		}
	}
}

// TestCloneRefusesOtherTransports: only http(s) leave the clone step, the transports the gateway
// judges: ext:: would run a command, file:// read the container's files.
func TestCloneRefusesOtherTransports(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	for _, repo := range []string{"ext::sh -c touch% " + marker, "file:///etc"} {
		_, err := Clone(context.Background(), CloneOptions{Repo: repo, Ref: "main", Dir: filepath.Join(t.TempDir(), "c"),
			Env: []string{"PATH=" + os.Getenv("PATH")}, Stdout: io.Discard, TerminationLog: filepath.Join(t.TempDir(), "log")})
		if err == nil {
			t.Errorf("%s was cloned", repo)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the ext:: transport ran its command")
	}
}
