//go:build linux

package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testpki"

	"github.com/cordon-sandbox/cordon/internal/creds/githubapp/fakegithub"
)

// tlsUpstream is an HTTPS server on the host's loopback with its own CA and a certificate for the given
// names, as a real upstream has: the gateway must verify it (network.tls.caFile) when it intercepts.
type tlsUpstream struct {
	port   int
	caFile string // PEM of the upstream's CA, outside the project

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	host, method, path, header, auth string
}

func newTLSUpstream(t *testing.T, h *harness, header string, names ...string) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{}
	u.port, u.caFile = serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{host: r.Host, method: r.Method, path: r.URL.Path, header: r.Header.Get(header), auth: r.Header.Get("Authorization")})
		u.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/echo") {
			// A host that quotes the credential it was sent (an error page, a debugging endpoint):
			// the gateway must put the placeholder back before the agent reads it.
			w.Header().Set("X-Echo", r.Header.Get(header))
			fmt.Fprintf(w, "UPSTREAM %s %s %s ECHO=%s\n", r.Method, r.Host, r.URL.Path, r.Header.Get(header))
			return
		}
		fmt.Fprintf(w, "UPSTREAM %s %s %s proto=%s\n", r.Method, r.Host, r.URL.Path, r.Proto)
	}), names...)
	return u
}

// serveTLS serves handler over HTTPS (HTTP/2 and 1.1) on the host's loopback with a certificate for
// names from a CA of its own, whose PEM it writes outside the project.
func serveTLS(t *testing.T, h *harness, handler http.Handler, names ...string) (port int, caFile string) {
	t.Helper()
	ca := testpki.NewCA(t, "upstream test CA")
	caFile = ca.WriteFile(t, h.base)
	os.Chown(caFile, h.who.uid, h.who.gid)
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, names...)}, NextProtos: []string{"h2", "http/1.1"}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port, caFile
}

func (u *tlsUpstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// TestCredentialInjection: the agent holds a placeholder, the upstream it is bound to receives the real
// value (from curl, python and git without any CA flag: the run's CA is trusted inside), another host
// receives the placeholder unchanged, and the real value appears nowhere the agent or the logs can show.
func TestCredentialInjection(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	goClient := buildGoClient(t)
	_, nodeErr := exec.LookPath("node")
	forEachTier(t, func(t *testing.T, h *harness) {
		secret := "sk-ant-api03-" + h.canary + "REALSECRET"
		h.writeFile(filepath.Join(h.ws, "goclient"), string(goClient), 0o755)
		up := newTLSUpstream(t, h, "x-api-key", "api.test", "rules.test", "other.test")
		pol := fmt.Sprintf(`network:
  allow:
    - {host: api.test, ports: [%[1]d]}
    - {host: rules.test, ports: [%[1]d]}
    - {host: other.test, ports: [%[1]d]}
  hosts: {api.test: 127.0.0.1, rules.test: 127.0.0.1, other.test: 127.0.0.1}
  tls: {caFile: %[2]q}
  http:
    - host: rules.test
      allow: [{methods: [GET], paths: ["/ok/*"]}]
credentials:
  - name: API_KEY
    from: {env: CORDON_TEST_API_KEY}
    inject: {host: api.test, header: x-api-key}
`, up.port, up.caFile)
		h.writeFile(filepath.Join(h.ws, "upstream-ca.pem"), mustRead(t, up.caFile), 0o644)
		paths := []string{"/curl", "/curl-proxy-h1", "/python", "/go", "/echo-curl", "/echo-python"}
		node := ""
		if nodeErr == nil {
			// node's fetch ignores the proxy variables and trusts NODE_EXTRA_CA_CERTS.
			node = fmt.Sprintf(`node -e 'fetch("https://api.test:%d/node", {headers: {"x-api-key": process.env.API_KEY}}).then(r => r.text()).then(console.log, e => { console.error(e); process.exit(1) })'`, up.port)
			paths = append(paths, "/node")
		}
		script := fmt.Sprintf(`echo "KEY=$API_KEY"
curl -sS -m 10 --noproxy '*' -H "x-api-key: $API_KEY" https://api.test:%[1]d/curl
curl -sS -m 10 --http1.1 -H "x-api-key: $API_KEY" https://api.test:%[1]d/curl-proxy-h1
python3 -c 'import os, urllib.request; r = urllib.request.Request("https://api.test:%[1]d/python", headers={"x-api-key": os.environ["API_KEY"]}); print(urllib.request.urlopen(r, timeout=10).read().decode())'
./goclient https://api.test:%[1]d/go tcp4 x-api-key API_KEY
%[2]s
curl -sS -m 10 --noproxy '*' -D - -H "x-api-key: $API_KEY" https://api.test:%[1]d/echo-curl
python3 -c 'import os, urllib.request; r = urllib.request.Request("https://api.test:%[1]d/echo-python", headers={"x-api-key": os.environ["API_KEY"]}); print(urllib.request.urlopen(r, timeout=10).read().decode())'
curl -sS -m 10 --noproxy '*' -H "x-api-key: $API_KEY" https://rules.test:%[1]d/ok/misuse
curl -sS -m 10 --noproxy '*' --cacert upstream-ca.pem -H "x-api-key: $API_KEY" https://other.test:%[1]d/passthrough
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'; grep -rs "$(printf 'REAL%%sSECRET' '')" /etc /tmp "$HOME" . && echo FOUND-IN-FILES
true`, up.port, node)
		r := h.sandboxed(pol, script, "CORDON_TEST_API_KEY="+secret)
		if r.code != 0 {
			t.Fatalf("run failed:\n%s", r)
		}
		placeholder := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "KEY="); ok {
				placeholder = v
			}
		}
		if placeholder == "" || placeholder == secret || !strings.HasPrefix(placeholder, "sk-ant-") {
			t.Fatalf("the agent's API_KEY is %q: want a placeholder in the real format", placeholder)
		}
		for _, path := range append(paths, "/ok/misuse", "/passthrough") {
			if !strings.Contains(r.stdout, "UPSTREAM GET") || !strings.Contains(r.stdout, path) {
				t.Errorf("request %s did not reach the upstream:\n%s", path, r)
			}
		}
		if strings.Contains(r.stdout+r.stderr, "REALSECRET") {
			t.Fatalf("the real value reached the agent or cordon's output:\n%s", r)
		}
		// The echoing host got the real value (checked below) and the agent read its placeholder.
		for _, want := range []string{"/echo-curl ECHO=" + placeholder, "/echo-python ECHO=" + placeholder, "x-echo: " + placeholder} {
			if !strings.Contains(strings.ToLower(r.stdout), strings.ToLower(want)) {
				t.Errorf("the agent did not read %q from the echoing host:\n%s", want, r)
			}
		}
		if !strings.Contains(r.stderr, "2 answers echoed a credential") {
			t.Errorf("the run's summary does not count the echoes:\n%s", r.stderr)
		}
		got := map[string]string{}
		for _, s := range up.requests() {
			got[s.path] = s.header
		}
		want := map[string]string{"/ok/misuse": placeholder, "/passthrough": placeholder} // other hosts: unchanged
		for _, p := range paths {
			want[p] = secret // the bound host: the real value
		}
		for path, want := range want {
			if got[path] != want {
				t.Errorf("upstream saw x-api-key %q on %s, want %q", got[path], path, want)
			}
		}
		// The audit log records the use and the misuse, never the value.
		log := h.cordon(nil, "", "log", "last")
		if strings.Contains(log.stdout, "REALSECRET") || strings.Contains(log.stdout, placeholder) {
			t.Errorf("the audit log shows a credential value:\n%s", log.stdout)
		}
		if !strings.Contains(log.stdout, "API_KEY") || !strings.Contains(log.stdout, "misuse") {
			t.Errorf("the audit log does not record the credential's use and misuse:\n%s", log)
		}
		stateFiles := filepath.Join(h.home, ".local", "state", "cordon")
		filepath.Walk(stateFiles, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && strings.Contains(mustRead(t, p), "REALSECRET") {
				t.Errorf("the real value is stored in %s", p)
			}
			return nil
		})
	})
}

// TestHTTPRulesAndFronting: requests to a host with HTTP rules are allowed only by method and path
// (with a 403 that names the rule otherwise), and a Host that differs from the TLS name is refused with
// 421, each beside the allowed control.
func TestHTTPRulesAndFronting(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		up := newTLSUpstream(t, h, "x-none", "rules.test", "other.test")
		pol := fmt.Sprintf(`network:
  allow:
    - {host: rules.test, ports: [%[1]d]}
    - {host: other.test, ports: [%[1]d]}
  hosts: {rules.test: 127.0.0.1, other.test: 127.0.0.1}
  tls: {caFile: %[2]q}
  http:
    - host: rules.test
      allow: [{methods: [GET], paths: ["/ok/*"]}]
`, up.port, up.caFile)
		req := func(args string) string {
			return fmt.Sprintf("curl -sS -m 10 --noproxy '*' -o /dev/null -w '%%{http_code}\\n' %s; ", args)
		}
		u := fmt.Sprintf("https://rules.test:%d", up.port)
		script := req(u+"/ok/yes") + req(u+"/no") + req("-X POST "+u+"/ok/yes") + req("--http2 "+u+"/ok/h2") +
			req("-H 'Host: other.test' "+u+"/ok/front") + req(u+"/ok/../no") + req("--path-as-is "+u+"/ok/../no") +
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' %s/no", u)
		r := h.sandboxed(pol, script)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		want := []string{"200", "403", "403", "200", "421", "403", "403"}
		if len(lines) < len(want) {
			t.Fatalf("want %d status lines:\n%s", len(want), r)
		}
		for i, w := range want {
			if lines[i] != w {
				t.Errorf("request %d: status %s, want %s\n%s", i, lines[i], w, r)
			}
		}
		if body := strings.Join(lines[len(want):], "\n"); !strings.Contains(body, "network.http") {
			t.Errorf("the 403 does not name the rule:\n%s", body)
		}
		for _, s := range up.requests() {
			if s.path != "/ok/yes" && s.path != "/ok/h2" {
				t.Errorf("a refused request reached the upstream: %+v", s)
			}
		}
	})
}

// TestSecretsMasked: a secret-shaped file in the project is masked inside with one line saying so, and
// readable when the policy allows it (the control).
func TestSecretsMasked(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		token := "ghp_" + strings.Repeat("A1b2C3d4", 4) + "Zz9Y"
		h.writeFile(filepath.Join(h.ws, ".env"), "GITHUB_TOKEN="+token+"\nDATABASE_URL=postgres://app:hunter2@db.prod.example.com/app\n", 0o644)
		h.writeFile(filepath.Join(h.ws, "main.go"), "package main\n", 0o644)
		r := h.sandboxed("", "cat .env; cat main.go")
		if strings.Contains(r.stdout, token) || !strings.Contains(r.stdout, "package main") {
			t.Fatalf("the .env was readable inside (or the project was not):\n%s", r)
		}
		if !strings.Contains(r.stderr, ".env") || !strings.Contains(r.stderr, "filesystem.secrets.allow") {
			t.Errorf("no line saying what was masked and how to allow it:\n%s", r)
		}
		if r := h.sandboxed("filesystem: {secrets: {allow: [.env]}}\n", "cat .env"); !strings.Contains(r.stdout, token) {
			t.Fatalf("control: an allowed .env is not readable:\n%s", r)
		}
		// Layouts the scan must not trip over: a secret reached through a symlink (hidden all the
		// same), a key symlinked to the host's home (nothing there inside), a named pipe.
		os.Rename(filepath.Join(h.ws, ".env"), filepath.Join(h.ws, ".env.production"))
		for link, target := range map[string]string{".env": ".env.production", "id_rsa": filepath.Join(h.home, ".ssh", "id_canary")} {
			if err := os.Symlink(target, filepath.Join(h.ws, link)); err != nil {
				t.Fatal(err)
			}
			os.Lchown(filepath.Join(h.ws, link), h.who.uid, h.who.gid)
		}
		if err := syscall.Mkfifo(filepath.Join(h.ws, "pipe"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(h.ws, "pipe"), h.who.uid, h.who.gid)
		r = h.sandboxed("", "cat .env .env.production id_rsa; echo RAN")
		if !strings.Contains(r.stdout, "RAN") || strings.Contains(r.stdout, token) || strings.Contains(r.stdout, h.canary) {
			t.Fatalf("with symlinks and a pipe in the project: want the run to start and nothing secret readable:\n%s", r)
		}
	})
}

// TestSecretsMaskedOnWarmStart attacks the scan's cache, which lets a start stat directories rather
// than read files: between two runs, a secret is written into a file that was clean, with its old
// modification time put back (touch -r) so that neither the file's mtime nor its directory changes, and
// a new secret file appears deep in the tree. Both are masked on the second run. The control is the
// first run: the same .env, clean, is readable, and the cache it leaves trusts the tree (a record of
// the root and a stamp of .env), so the second run catches the secrets through the stamps.
func TestSecretsMaskedOnWarmStart(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		token := "ghp_" + strings.Repeat("Q7w8E9r0", 4) + "Tt5U"
		env, deep := filepath.Join(h.ws, ".env"), filepath.Join(h.ws, "src", "a", "b", "c", "d", "e")
		h.writeFile(env, "DEBUG=1\n", 0o644)
		h.writeFile(filepath.Join(deep, "util.py"), "X = 1\n", 0o644)
		h.chownAll(filepath.Join(h.ws, "src"))
		// The cache trusts only what changed more than a second before the scan (a rewrite within the
		// kernel's clock tick could leave a file's stamp as it was): wait that out once.
		waitOlder(t, time.Second, env, deep, h.ws)
		if r := h.sandboxed("", "cat .env"); !strings.Contains(r.stdout, "DEBUG=1") {
			t.Fatalf("control: the clean .env is not readable:\n%s", r)
		}
		caches, _ := filepath.Glob(filepath.Join(h.home, ".local", "state", "cordon", "scan-cache", "*"))
		var cache []byte
		for _, c := range caches {
			if b, err := os.ReadFile(c); err == nil && bytes.Contains(b, []byte(`"src"`)) {
				cache = b
			}
		}
		if !bytes.Contains(cache, []byte("\nd ")) || !bytes.Contains(cache, []byte(" \".env\"\n")) {
			t.Fatalf("control: the first run left no cache trusting the tree:\n%s", cache)
		}

		fi, err := os.Stat(env)
		if err != nil {
			t.Fatal(err)
		}
		dirBefore, _ := os.Stat(h.ws)
		if err := os.WriteFile(env, []byte("GITHUB_TOKEN="+token+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(env, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		if dirAfter, _ := os.Stat(h.ws); !dirAfter.ModTime().Equal(dirBefore.ModTime()) {
			t.Fatal("rewriting .env in place changed the workspace directory: the attack would not need the file's stamp")
		}
		h.writeFile(filepath.Join(deep, "settings.py"), "TOKEN = \""+token+"\"\n", 0o644)
		r := h.sandboxed("", "cat .env src/a/b/c/d/e/settings.py src/a/b/c/d/e/util.py; echo RAN")
		if !strings.Contains(r.stdout, "RAN") || !strings.Contains(r.stdout, "X = 1") || strings.Contains(r.stdout, token) {
			t.Fatalf("second run: want both secrets masked and the rest readable:\n%s", r)
		}
		if !strings.Contains(r.stderr, ".env") || !strings.Contains(r.stderr, "settings.py") {
			t.Errorf("second run: the line does not name both masked files:\n%s", r)
		}
	})
}

// waitOlder waits until each path's last change is more than d old.
func waitOlder(t *testing.T, d time.Duration, paths ...string) {
	t.Helper()
	var latest time.Time
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		for _, ts := range []syscall.Timespec{st.Mtim, st.Ctim} {
			if tm := time.Unix(ts.Unix()); tm.After(latest) {
				latest = tm
			}
		}
	}
	time.Sleep(time.Until(latest.Add(d + 10*time.Millisecond)))
}

// TestGitHubAppScopedPush: a GitHub App credential mints a token limited to acme/app, git inside
// clones and pushes acme/app over HTTPS with the placeholder (the gateway puts the real token into
// git's basic auth), a push to acme/other is refused by the HTTP rules and by the token's scope,
// and the token is revoked when the run ends. The control allows acme/other in both and the same push
// works.
func TestGitHubAppScopedPush(t *testing.T) {
	requireTool(t, "git")
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git --exec-path: %v", err)
	}
	_, key := fakegithub.GenerateKey(t)
	forEachTier(t, func(t *testing.T, h *harness) {
		app := fakegithub.NewApp(t, fakegithub.Options{Repositories: []string{"app", "other"}, Key: key})
		root, git := acmeRepos(t, string(backend))
		var mu sync.Mutex
		var seenTokens []string
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Like GitHub: the token must be valid and cover the repository (write for a push).
			_, tok, _ := r.BasicAuth()
			repo := strings.TrimSuffix(strings.Join(strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)[:2], "/"), ".git")
			write := r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack")
			mu.Lock()
			seenTokens = append(seenTokens, tok)
			mu.Unlock()
			if !app.Authorize(tok, repo, write) {
				w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
				http.Error(w, "token does not cover "+repo, http.StatusUnauthorized)
				return
			}
			git.ServeHTTP(w, r)
		}), "github.test")
		keyFile := filepath.Join(h.base, "app.pem")
		h.writeFile(keyFile, string(app.PrivateKeyPEM), 0o600)
		policyFor := func(paths, repos string) string {
			return fmt.Sprintf(`network:
  allow: [{host: github.test, ports: [%d]}]
  hosts: {github.test: 127.0.0.1}
  tls: {caFile: %q}
  http:
    - host: github.test
      allow: [{methods: [GET, POST], paths: [%s]}]
credentials:
  - name: GH_TOKEN
    from:
      githubApp: {appId: %d, privateKeyFile: %q, installationId: %d, apiURL: %q,
                  repositories: [%s], permissions: {contents: write}}
    inject: {host: github.test, scheme: bearer}   # git sends it as basic auth
`, port, caFile, paths, app.ID, keyFile, app.InstallationID, app.URL(), repos)
		}
		push := fmt.Sprintf(`export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a GIT_TERMINAL_PROMPT=0
echo "TOKEN=$GH_TOKEN"
git clone -q https://x-access-token:$GH_TOKEN@github.test:%d/acme/%%[1]s.git %%[1]s && cd %%[1]s && cat README &&
echo agent > AGENT && git add AGENT && git commit -qm agent-%%[1]s && git push -q origin main && echo PUSHED-%%[1]s`, port)

		r := h.sandboxed(policyFor(`"/acme/app.git/*"`, "acme/app"), fmt.Sprintf(push, "app")+"; cd /tmp && "+fmt.Sprintf(push, "other"))
		if !strings.Contains(r.stdout, "PUSHED-app") {
			t.Fatalf("clone and push of acme/app failed:\n%s", r)
		}
		if strings.Contains(r.stdout, "PUSHED-other") {
			t.Fatalf("a push to acme/other went through:\n%s", r)
		}
		if !strings.Contains(r.stderr, "network.http") {
			t.Errorf("the refusal does not name the rule:\n%s", r)
		}
		if n := strings.Count("\n"+r.stderr, "\ncordon: blocked GET https://github.test"); n != 1 {
			t.Errorf("cordon printed %d lines for the refused clone, want one:\n%s", n, r.stderr)
		}
		toks := app.Tokens()
		if len(toks) != 1 {
			t.Fatalf("the fake issued %d tokens, want 1", len(toks))
		}
		tok := toks[0]
		if !slices.Equal(tok.Repositories, []string{"acme/app"}) || tok.Permissions["contents"] != "write" {
			t.Errorf("token scope: repositories %v, permissions %v", tok.Repositories, tok.Permissions)
		}
		if !tok.Revoked {
			t.Error("the token was not revoked when the run ended")
		}
		if strings.Contains(r.stdout+r.stderr, tok.Value) || !strings.Contains(r.stdout, "TOKEN=") {
			t.Errorf("the real token reached the agent's output:\n%s", r)
		}
		mu.Lock()
		if !slices.Contains(seenTokens, tok.Value) {
			t.Error("the upstream never saw the real token")
		}
		mu.Unlock()
		if out, err := exec.Command("git", "-C", filepath.Join(root, "acme", "other.git"), "log", "--format=%s", "main").Output(); err != nil || strings.Contains(string(out), "agent") {
			t.Fatalf("acme/other changed: %q %v", out, err)
		}

		// Control: rules and token both cover acme/other, and the same push works.
		r = h.sandboxed(policyFor(`"/acme/app.git/*", "/acme/other.git/*"`, "acme/app, acme/other"), "cd /tmp && "+fmt.Sprintf(push, "other"))
		if !strings.Contains(r.stdout, "PUSHED-other") {
			t.Fatalf("control: push to acme/other with rules and token covering it failed:\n%s", r)
		}
	})
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGitHubAppRevokedOnInterrupt: Ctrl-C (SIGINT) and SIGTERM end the run and still revoke the token
// the run minted; the token is minted before the command starts.
func TestGitHubAppRevokedOnInterrupt(t *testing.T) {
	_, key := fakegithub.GenerateKey(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			forEachTier(t, func(t *testing.T, h *harness) {
				app := fakegithub.NewApp(t, fakegithub.Options{Key: key})
				keyFile := filepath.Join(h.base, "app.pem")
				h.writeFile(keyFile, string(app.PrivateKeyPEM), 0o600)
				pol := h.policy(fmt.Sprintf(`network:
  allow: [github.test]
credentials:
  - name: GH_TOKEN
    from:
      githubApp: {appId: %d, privateKeyFile: %q, installationId: %d, apiURL: %q,
                  repositories: [acme/app], permissions: {contents: read}}
    inject: {host: github.test, scheme: bearer}
`, app.ID, keyFile, app.InstallationID, app.URL()))
				cmd := h.command(nil, cordonBin, h.tierArgs([]string{"run", "--policy", pol, "--", "sh", "-c", "echo STARTED; exec sleep 60"})...)
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 64)
				if n, _ := stdout.Read(buf); !strings.Contains(string(buf[:n]), "STARTED") {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("the command did not start: %q", buf[:n])
				}
				if toks := app.Tokens(); len(toks) != 1 || toks[0].Revoked {
					t.Fatalf("want one live token while the run runs, got %+v", toks)
				}
				cmd.Process.Signal(sig)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					cmd.Process.Kill()
					t.Fatal("cordon did not end after the signal")
				}
				if toks := app.Tokens(); len(toks) != 1 || !toks[0].Revoked {
					t.Fatalf("the token was not revoked after %v: %+v", sig, toks)
				}
			})
		})
	}
}

// TestCredentialFilesOwnerOnly: a credential file (a token, a GitHub App's private key) that other users
// can read is refused before anything starts: it is already leaked, and cordon must not pretend.
func TestCredentialFilesOwnerOnly(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		keyFile := filepath.Join(h.base, "app.pem")
		tokenFile := filepath.Join(h.base, "token")
		h.writeFile(keyFile, "-----BEGIN RSA PRIVATE KEY-----\nnot checked this far\n-----END RSA PRIVATE KEY-----\n", 0o644)
		h.writeFile(tokenFile, "tok-"+h.canary+"\n", 0o644)
		for name, from := range map[string]string{
			"app key": fmt.Sprintf("{githubApp: {appId: 1, privateKeyFile: %q, installationId: 2, repositories: [acme/app], permissions: {contents: read}}}", keyFile),
			"token":   fmt.Sprintf("{file: %q}", tokenFile),
		} {
			pol := fmt.Sprintf("network: {allow: [github.test]}\ncredentials:\n  - {name: T, from: %s, inject: {host: github.test, scheme: bearer}}\n", from)
			r := h.sandboxed(pol, "echo RAN")
			if r.code != exitCordon || strings.Contains(r.stdout, "RAN") || !strings.Contains(r.stderr, "T") {
				t.Fatalf("%s readable by others: want exit 125 and nothing run:\n%s", name, r)
			}
		}
		// Control: the same token file, readable by its owner only, is taken.
		os.Chmod(tokenFile, 0o600)
		pol := fmt.Sprintf("network: {allow: [github.test]}\ncredentials:\n  - {name: T, from: {file: %q}, inject: {host: github.test, scheme: bearer}}\n", tokenFile)
		if r := h.sandboxed(pol, `echo "RAN $T"`); !strings.Contains(r.stdout, "RAN ") || strings.Contains(r.stdout, h.canary) {
			t.Fatalf("control: an owner-only token file: want a run with a placeholder:\n%s", r)
		}
	})
}

// sigV4Python signs a GET of https://HOST/bucket/key with the AWS keys in its environment, as an SDK
// would (Signature Version 4, S3, us-east-1), using nothing but Python's standard library, and prints
// the answer.
const sigV4Python = `
import datetime, hashlib, hmac, os, sys, urllib.request
host = sys.argv[1]
ak, sk, tok = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_SESSION_TOKEN"]
now = datetime.datetime.now(datetime.timezone.utc)
amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
payload = hashlib.sha256(b"").hexdigest()
signed = "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
canonical = "GET\n/bucket/key\n\nhost:%s\nx-amz-content-sha256:%s\nx-amz-date:%s\nx-amz-security-token:%s\n\n%s\n%s" % (host, payload, amz, tok, signed, payload)
scope = day + "/us-east-1/s3/aws4_request"
to_sign = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (amz, scope, hashlib.sha256(canonical.encode()).hexdigest())
key = ("AWS4" + sk).encode()
for part in (day, "us-east-1", "s3", "aws4_request"):
    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
req = urllib.request.Request("https://" + host + "/bucket/key", headers={
    "X-Amz-Date": amz, "X-Amz-Content-Sha256": payload, "X-Amz-Security-Token": tok,
    "Authorization": "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (ak, scope, signed, sig)})
print(urllib.request.urlopen(req, timeout=10).read().decode())
`

// TestAWSAssumeRole: with assumeRole, cordon trades the caller's AWS keys for a role's session keys
// before the run (an STS call signed with the caller's keys, for the role, duration and session
// policy asked), the agent holds placeholders in the session keys' format, and its requests reach AWS
// signed with the session keys: never with the caller's long-lived ones, which do not enter the
// sandbox in any form, nor do the session's.
func TestAWSAssumeRole(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		base := []string{"AWS_ACCESS_KEY_ID=AKIABASE" + strings.ToUpper(h.canary[:12]), "AWS_SECRET_ACCESS_KEY=BASEsecret" + h.canary + "0123456789"}
		session := struct{ id, secret, token string }{"ASIASESS" + strings.ToUpper(h.canary[:12]), "SESSsecret" + h.canary + "0123456789", "SESStoken" + h.canary + strings.Repeat("t", 100)}
		var mu sync.Mutex
		var stsForm url.Values
		var stsAuth string
		sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			stsForm, _ = url.ParseQuery(string(body))
			stsAuth = r.Header.Get("Authorization")
			mu.Unlock()
			fmt.Fprintf(w, `<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>`,
				session.id, session.secret, session.token, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		}))
		defer sts.Close()
		var awsAuth, awsToken string
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			awsAuth, awsToken = r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token")
			mu.Unlock()
			fmt.Fprintf(w, "S3 %s %s\n", r.Method, r.URL.Path)
		}), "s3.aws.test")
		pol := fmt.Sprintf(`network:
  allow: [{host: s3.aws.test, ports: [%[1]d]}]
  hosts: {s3.aws.test: 127.0.0.1}
  tls: {caFile: %[2]q}
credentials:
  - name: AWS
    from:
      aws:
        env: true
        assumeRole:
          roleArn: arn:aws:iam::123456789012:role/agent
          sessionPolicy: '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/*"}]}'
          duration: 20m
          endpoint: %[3]q
    inject: {host: s3.aws.test}
`, port, caFile, sts.URL)
		h.writeFile(filepath.Join(h.ws, "sign.py"), sigV4Python, 0o644)
		script := fmt.Sprintf(`echo "ID=$AWS_ACCESS_KEY_ID"; echo "TOKEN=$AWS_SESSION_TOKEN"
python3 sign.py s3.aws.test:%d
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'`, port)
		r := h.sandboxed(pol, script, base...)
		if r.code != 0 || !strings.Contains(r.stdout, "S3 GET /bucket/key") {
			t.Fatalf("run failed:\n%s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if stsForm.Get("Action") != "AssumeRole" || stsForm.Get("RoleArn") != "arn:aws:iam::123456789012:role/agent" ||
			stsForm.Get("DurationSeconds") != "1200" || !strings.Contains(stsForm.Get("Policy"), "s3:GetObject") ||
			!strings.HasPrefix(stsForm.Get("RoleSessionName"), "cordon-") {
			t.Errorf("STS was asked %v", stsForm)
		}
		if !strings.Contains(stsAuth, "Credential="+strings.TrimPrefix(base[0], "AWS_ACCESS_KEY_ID=")+"/") {
			t.Errorf("the STS call was not signed with the caller's keys: %q", stsAuth)
		}
		if !strings.Contains(awsAuth, "Credential="+session.id+"/") || awsToken != session.token {
			t.Errorf("AWS got Authorization %q and token %q: want the session's keys", awsAuth, awsToken)
		}
		if !strings.Contains(r.stdout, "ID=ASIA") || !strings.Contains(r.stdout, "TOKEN=") {
			t.Errorf("the agent's keys are not placeholders of session keys:\n%s", r.stdout)
		}
		for _, secret := range []string{"BASEsecret", "AKIABASE", "SESSsecret", "SESStoken", session.id} {
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%s reached the sandbox or cordon's output:\n%s", secret, r)
			}
		}
	})
}

// TestSecretsTrackedByGit: a secret-shaped file git keeps unchanged (a test fixture with a fake key,
// or a real key committed long ago) is not masked, since .git holds the same content for anyone
// to read, and masking it made an agent's `git commit -a` commit it emptied; the user is told. The
// same file changed since, or an untracked one, is masked as before.
func TestSecretsTrackedByGit(t *testing.T) {
	requireTool(t, "git")
	forEachTier(t, func(t *testing.T, h *harness) {
		token := "ghp_" + strings.Repeat("Q7w8E9r0", 4) + "Tt5U"
		h.writeFile(filepath.Join(h.ws, "testdata", "fixture.env"), "GITHUB_TOKEN="+token+"\n", 0o644)
		h.writeFile(filepath.Join(h.ws, "README"), "hi\n", 0o644)
		git := exec.Command("sh", "-c", "git init -q && git -c safe.directory='*' add -A && git -c safe.directory='*' -c user.name=t -c user.email=t@t commit -qm init")
		git.Dir = h.ws
		if out, err := git.CombinedOutput(); err != nil {
			t.Fatalf("git: %v\n%s", err, out)
		}
		h.chownAll(h.ws)
		h.writeFile(filepath.Join(h.ws, "local.env"), "GITHUB_TOKEN="+token+"\n", 0o644)
		r := h.sandboxed("", "cat testdata/fixture.env; cat local.env; git -c safe.directory='*' status --short")
		if !strings.Contains(r.stdout, "GITHUB_TOKEN="+token) || strings.Count(r.stdout, token) != 1 {
			t.Fatalf("want the tracked fixture readable and the untracked local.env masked:\n%s", r)
		}
		if strings.Contains(r.stdout, " M testdata/fixture.env") || !strings.Contains(r.stderr, "not masked: 1 secret-shaped file that git keeps unchanged") ||
			!strings.Contains(r.stderr, "testdata/fixture.env") || !strings.Contains(r.stderr, "masked 1 secret-shaped file from the agent: local.env") {
			t.Fatalf("want git to see no change and one line for each decision:\n%s", r)
		}
		// Changed since the last commit: the new content may be a new secret, so it is masked.
		h.writeFile(filepath.Join(h.ws, "testdata", "fixture.env"), "GITHUB_TOKEN="+token+"\nMORE=1\n", 0o644)
		if r := h.sandboxed("", "cat testdata/fixture.env; echo RAN"); strings.Contains(r.stdout, token) || !strings.Contains(r.stdout, "RAN") {
			t.Fatalf("a changed tracked file was not masked:\n%s", r)
		}
	})
}

// TestCredentialMountWarned: mounting a directory where a tool keeps a long-lived credential (Claude
// Code's login under ~/.claude, say) is allowed, as the policy asks, with a warning naming the file
// and the safe way; mounting something else says nothing.
func TestCredentialMountWarned(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		h.writeFile(filepath.Join(h.home, ".claude", ".credentials.json"), `{"claudeAiOauth":{"accessToken":"sk-ant-oat01-x"}}`, 0o600)
		h.writeFile(filepath.Join(h.home, ".claude", "settings.json"), `{}`, 0o644)
		h.writeFile(filepath.Join(h.home, ".tool", "x"), "x", 0o644)
		h.chownAll(h.home)
		r := h.sandboxed("filesystem:\n  readonly: [~/.claude]\n", "true")
		want := "cordon: warning: filesystem: " + filepath.Join(h.home, ".claude") + " exposes " + filepath.Join(h.home, ".claude", ".credentials.json") +
			" (Claude Code's login token) to the agent; give it a CLAUDE_CODE_OAUTH_TOKEN credential instead"
		if r.code != 0 || !strings.Contains(r.stderr, want) {
			t.Fatalf("want the warning %q:\n%s", want, r)
		}
		if r := h.sandboxed("filesystem:\n  readonly: [~/.tool]\n", "true"); strings.Contains(r.stderr, "exposes") {
			t.Fatalf("a mount with no credential in it was warned about:\n%s", r)
		}
	})
}
