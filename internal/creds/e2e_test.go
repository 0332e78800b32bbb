package creds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
)

// seen is what the upstream received.
type seen struct {
	host, apiKey, auth, amzToken string
}

// gateway is a tiny TLS-terminating reverse proxy standing in for cordon's
// intercepting gateway: for every request it calls Set.Modify with the
// connection's name, refuses the request when Modify fails, and forwards it
// to the upstream. It records every audit detail and error Modify returned.
type gateway struct {
	srv      *httptest.Server
	upstream *httptest.Server
	caFile   string
	roots    *x509.CertPool

	mu      sync.Mutex
	details []map[string]string
	errs    []string
	seen    []seen
}

func newGateway(t *testing.T, set *Set, gitRoot string) *gateway {
	t.Helper()
	g := &gateway{}
	var backend http.Handler = http.NotFoundHandler()
	if gitRoot != "" {
		path, err := exec.Command("git", "--exec-path").Output()
		if err != nil {
			t.Skipf("git --exec-path: %v", err)
		}
		backend = &cgi.Handler{
			Path: filepath.Join(strings.TrimSpace(string(path)), "git-http-backend"),
			Env:  []string{"GIT_PROJECT_ROOT=" + gitRoot, "GIT_HTTP_EXPORT_ALL=1"},
		}
	}
	g.upstream = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.seen = append(g.seen, seen{r.Host, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token")})
		g.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/repo.git/") {
			// The git host demands the real token as the Basic password.
			if _, pass, ok := r.BasicAuth(); !ok || pass != realGit {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			backend.ServeHTTP(w, r)
			return
		}
		fmt.Fprintf(w, "upstream saw x-api-key=%s authorization=%s\n", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	}))
	t.Cleanup(g.upstream.Close)
	target, _ := url.Parse(g.upstream.URL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the upstream sees the name the client asked for
		},
		Transport: g.upstream.Client().Transport,
	}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			name = r.Host
		}
		// As the interceptor does: the request goes upstream over verified TLS.
		r.URL.Scheme, r.URL.Host = "https", r.Host
		details, err := set.Modify(r, name)
		g.mu.Lock()
		g.details = append(g.details, details)
		if err != nil {
			g.errs = append(g.errs, err.Error())
		}
		g.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	// The gateway's certificate stands in for the per-run CA's leaves (httptest's own covers only
	// one level under example.com).
	ca := testpki.NewCA(t, "creds test CA")
	g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "*.example.com", "*.gh.example.com", "*.amazonaws.example.com")}}
	g.srv.EnableHTTP2 = true
	g.srv.StartTLS()
	t.Cleanup(g.srv.Close)
	g.roots = ca.Pool
	g.caFile = ca.WriteFile(t, "")
	return g
}

func (g *gateway) port() string {
	_, p, _ := net.SplitHostPort(g.srv.Listener.Addr().String())
	return p
}

// client is Go's HTTP client, resolving every name to the gateway.
func (g *gateway) client() *http.Client {
	c := g.srv.Client()
	tr := c.Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, g.srv.Listener.Addr().String())
	}
	tr.ForceAttemptHTTP2 = true
	tr.TLSClientConfig = &tls.Config{RootCAs: g.roots}
	c.Transport = tr
	return c
}

func (g *gateway) last() (seen, map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s seen
	if len(g.seen) > 0 {
		s = g.seen[len(g.seen)-1]
	}
	return s, g.details[len(g.details)-1]
}

// noLeak checks that no real value appears in anything the gateway
// recorded for audit, in errors, or in fmt output of the Set.
func (g *gateway) noLeak(t *testing.T, set *Set, reals ...string) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	var all []string
	for _, d := range g.details {
		for k, v := range d {
			all = append(all, k, v)
		}
	}
	all = append(all, g.errs...)
	all = append(all, fmt.Sprintf("%v %+v %#v %s %x", set, set, set, set, set))
	for _, s := range all {
		for _, r := range reals {
			if strings.Contains(s, r) {
				t.Fatalf("a real value leaked into %q", s)
			}
		}
	}
}

func requireTool(t *testing.T, name string) {
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

// TestEndToEnd drives the gateway with curl (HTTP/1.1 and HTTP/2) and Go's
// client: the bound host's upstream receives the real value, another host
// receives the placeholder unchanged and the misuse is reported, and no real
// value appears in audit details, errors or printed values.
func TestEndToEnd(t *testing.T) {
	requireTool(t, "curl")
	env := []string{"API=" + realAPI, "GH=" + realGit}
	set, err := Prepare(context.Background(), []Spec{
		{Name: "API", Source: FromEnv(env, "API"), Inject: Inject{Hosts: []string{"api.example.com"}, Header: "x-api-key"}},
		{Name: "GH", Source: FromEnv(env, "GH"), Inject: Inject{Hosts: []string{"*.gh.example.com"}, Scheme: SchemeBearer}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ph := map[string]string{}
	for _, kv := range set.Env() {
		k, v, _ := strings.Cut(kv, "=")
		ph[k] = v
	}
	g := newGateway(t, set, "")
	port := g.port()
	curl := func(host string, args ...string) string {
		t.Helper()
		argv := append([]string{"-sS", "--fail-with-body", "--cacert", g.caFile, "--resolve", host + ":" + port + ":127.0.0.1"}, args...)
		argv = append(argv, "https://"+host+":"+port+"/v1/messages")
		out, err := exec.Command("curl", argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", argv, err, out)
		}
		return string(out)
	}
	for _, proto := range []string{"--http1.1", "--http2"} {
		t.Run("curl"+proto, func(t *testing.T) {
			out := curl("api.example.com", proto, "-w", "\nHTTP/%{http_version}", "-H", "x-api-key: "+ph["API"])
			if want := map[string]string{"--http1.1": "HTTP/1.1", "--http2": "HTTP/2"}[proto]; !strings.HasSuffix(out, want) {
				t.Fatalf("curl %s spoke %q", proto, out[strings.LastIndex(out, "\n")+1:])
			}
			s, d := g.last()
			if s.apiKey != realAPI || d[DetailInjected] != "API" || d[DetailMisuse] != "" {
				t.Fatalf("bound host: upstream saw %q, details %v", s.apiKey, d)
			}
			curl("other.example.com", proto, "-H", "x-api-key: "+ph["API"])
			s, d = g.last()
			if s.apiKey != ph["API"] || d[DetailInjected] != "" || !strings.Contains(d[DetailMisuse], "API in header X-Api-Key") {
				t.Fatalf("other host: upstream saw %q, details %v", s.apiKey, d)
			}
		})
	}
	t.Run("go client", func(t *testing.T) {
		c := g.client()
		for _, tc := range []struct{ host, want, misuse string }{
			{"api.gh.example.com", "Bearer " + realGit, ""},
			{"gh.example.com", "Bearer " + ph["GH"], "GH in header Authorization"},
		} {
			req, _ := http.NewRequest("GET", "https://"+tc.host+":"+port+"/user", nil)
			req.Header.Set("Authorization", "Bearer "+ph["GH"])
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Errorf("Go client spoke %s, want HTTP/2", resp.Proto)
			}
			s, d := g.last()
			if s.auth != tc.want || d[DetailMisuse] != tc.misuse {
				t.Fatalf("%s: upstream saw %q, details %v", tc.host, s.auth, d)
			}
		}
	})
	g.noLeak(t, set, realAPI, realGit)
}

// TestEndToEndGit: real git sends the placeholder in the Basic form (user
// x-access-token, password the placeholder, as a GitHub token is used) and
// lists the refs of a repository whose host demands the real token; the
// same command against a host the credential is not bound to is refused by
// the upstream, and reported.
func TestEndToEndGit(t *testing.T) {
	requireTool(t, "git")
	root := t.TempDir()
	gitEnv := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+root, "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	setup := exec.Command("sh", "-ec", `git init -q --bare -b main repo.git
git init -q -b main seed && cd seed && echo hello > README && git add README && git commit -qm seed && git push -q ../repo.git main`)
	setup.Dir, setup.Env = root, gitEnv
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	set, err := Prepare(context.Background(), []Spec{
		{Name: "GH_TOKEN", Source: FromEnv([]string{"T=" + realGit}, "T"), Inject: Inject{Hosts: []string{"git.example.com"}, Scheme: SchemeBasic}},
	})
	if err != nil {
		t.Fatal(err)
	}
	placeholder := strings.TrimPrefix(set.Env()[0], "GH_TOKEN=")
	g := newGateway(t, set, root)
	lsRemote := func(host string) (string, error) {
		cmd := exec.Command("git", "-c", "http.curloptResolve="+host+":"+g.port()+":127.0.0.1",
			"ls-remote", "https://x-access-token:"+placeholder+"@"+host+":"+g.port()+"/repo.git")
		cmd.Env = append(gitEnv, "GIT_SSL_CAINFO="+g.caFile) // the environment's wins over http.sslCAInfo
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := lsRemote("git.example.com")
	if err != nil || !strings.Contains(out, "refs/heads/main") {
		t.Fatalf("git ls-remote through the gateway: %v\n%s", err, out)
	}
	if _, d := g.last(); d[DetailInjected] != "GH_TOKEN" {
		t.Fatalf("details %v", d)
	}
	out, err = lsRemote("other.example.com")
	if err == nil || strings.Contains(out, "refs/heads/main") {
		t.Fatalf("git ls-remote with the placeholder on an unbound host succeeded:\n%s", out)
	}
	s, d := g.last()
	if !strings.Contains(d[DetailMisuse], "GH_TOKEN in header Authorization") || strings.Contains(s.auth, "REAL") {
		t.Fatalf("unbound host: details %v, upstream saw %q", d, s.auth)
	}
	g.noLeak(t, set, realGit)
}

// TestEndToEndAWS: an AWS request signed in the "sandbox" with the
// placeholder keys reaches the upstream signed with the real access key id
// and session token; the same request to a host the keys are not bound to
// goes out as signed, and is reported. (awssig's tests verify signatures.)
func TestEndToEndAWS(t *testing.T) {
	real := awssig.Keys{AccessKeyID: "AKIAREALREALREAL9876", SecretAccessKey: "REALsecretREALsecretREALsecretREALsecret", SessionToken: "REALtoken"}
	set, err := Prepare(context.Background(), []Spec{{Name: "AWS", AWS: staticKeys(real), Inject: Inject{Hosts: []string{"*.amazonaws.example.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range set.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if len(env) != 3 || !strings.HasPrefix(env["AWS_ACCESS_KEY_ID"], "ASIA") || len(env["AWS_SECRET_ACCESS_KEY"]) != 40 || env["AWS_SESSION_TOKEN"] == "" {
		t.Fatalf("Env = %v", set.Env())
	}
	ph := awssig.Keys{AccessKeyID: env["AWS_ACCESS_KEY_ID"], SecretAccessKey: env["AWS_SECRET_ACCESS_KEY"], SessionToken: env["AWS_SESSION_TOKEN"]}
	g := newGateway(t, set, "")
	c := g.client()
	for _, tc := range []struct {
		host      string
		keyID     string
		misuse    bool
		wantToken string
	}{
		{"s3.amazonaws.example.com", real.AccessKeyID, false, real.SessionToken},
		{"evil.example.com", ph.AccessKeyID, true, ph.SessionToken},
	} {
		req, _ := http.NewRequest("GET", "https://"+tc.host+":"+g.port()+"/bucket/key", nil)
		signForTest(t, req, ph)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s, d := g.last()
		if !strings.Contains(s.auth, "Credential="+tc.keyID+"/") || s.amzToken != tc.wantToken || (d[DetailMisuse] != "") != tc.misuse {
			t.Fatalf("%s: upstream saw %q token %q, details %v", tc.host, s.auth, s.amzToken, d)
		}
	}
	g.noLeak(t, set, real.SecretAccessKey, real.SessionToken)
}

type staticKeys awssig.Keys

func (k staticKeys) Keys(context.Context) (awssig.Keys, error) { return awssig.Keys(k), nil }
