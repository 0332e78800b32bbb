package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

func get(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestGoClient: Go's client through ServeTLS, over HTTP/1.1 and HTTP/2; the upstream is reached by
// name over verified TLS in the protocol the client spoke, and each request is one audit event.
func TestGoClient(t *testing.T) {
	up := newUpstream(t, nil, false)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			s := newSetup(t, up, "github.com", false)
			resp, body := get(t, s.client(h2), newRequest(t, "POST", s.url("/acme/app?x=secret"), strings.NewReader("hello")))
			wantProto := map[bool]int{false: 1, true: 2}[h2]
			if resp.StatusCode != 200 || resp.ProtoMajor != wantProto {
				t.Fatalf("status %d proto %s: %s", resp.StatusCode, resp.Proto, body)
			}
			want := fmt.Sprintf(`upstream saw POST /acme/app?x=secret host=%s proto=%s body="hello"`, s.hostPort(), map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2])
			if !strings.Contains(body, want) {
				t.Fatalf("got %q, want %q", body, want)
			}
			if s.dialed[0] != fmt.Sprintf("github.com:%d", s.port) {
				t.Fatalf("dialed %v", s.dialed)
			}
			reqs := up.requests()
			if last := reqs[len(reqs)-1]; last.SNI != "github.com" {
				t.Fatalf("upstream SNI %q", last.SNI)
			}
			ev := s.rec.last(t, "POST", "/acme/app")
			if ev.Kind != audit.KindHTTP || ev.Decision != audit.Allow || ev.Name != "github.com" || ev.Port != s.port ||
				ev.Detail["status"] != "200" || ev.BytesOut != 5 || ev.BytesIn != int64(len(body)) {
				t.Fatalf("event %+v", ev)
			}
			if strings.Contains(fmt.Sprint(ev), "secret") {
				t.Fatalf("the query reached the audit log: %+v", ev)
			}
		})
	}
}

func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

// run runs a command with an environment that has no proxy settings and no user configuration.
func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a", "GIT_TERMINAL_PROMPT=0"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestConcurrent: many requests at once over one client (multiplexed on HTTP/2, a pool on HTTP/1.1)
// each get their own answer and their own audit event.
func TestConcurrent(t *testing.T) {
	up := newUpstream(t, nil, false)
	for _, h2 := range []bool{false, true} {
		s := newSetup(t, up, "github.com", false)
		c := s.client(h2)
		const n = 32
		errs := make(chan error, n)
		for k := range n {
			go func() {
				resp, err := c.Get(s.url(fmt.Sprintf("/c/%d", k)))
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("GET /c/%d ", k); err == nil && !strings.Contains(string(b), want) {
					err = fmt.Errorf("request %d got %q", k, b)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("h2=%v: %v", h2, err)
			}
		}
		for k := range n {
			s.rec.last(t, "GET", fmt.Sprintf("/c/%d", k))
		}
	}
}

// TestCurl: curl trusting the run CA, over HTTP/1.1 and HTTP/2.
func TestCurl(t *testing.T) {
	requireTool(t, "curl")
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false, withRules(gitRules...))
	for _, proto := range []struct{ flag, want string }{{"--http1.1", "1.1"}, {"--http2", "2"}} {
		for _, tc := range []struct {
			path   string
			status string
		}{{"/acme/app/readme", "200"}, {"/acme/other/readme", "403"}} {
			out, err := run(t, "", nil, "curl", "-sS", "--noproxy", "*", proto.flag, "--cacert", s.caFile,
				"--resolve", fmt.Sprintf("%s:127.0.0.1", s.hostPort()), "-w", "\n%{http_version} %{http_code}", s.url(tc.path))
			if err != nil {
				t.Fatalf("curl %s %s: %v\n%s", proto.flag, tc.path, err, out)
			}
			if !strings.HasSuffix(out, proto.want+" "+tc.status) {
				t.Fatalf("curl %s %s: want HTTP/%s %s, got:\n%s", proto.flag, tc.path, proto.want, tc.status, out)
			}
			if tc.status == "403" && !strings.Contains(out, "network.http[0]") {
				t.Fatalf("the 403 does not name the rule:\n%s", out)
			}
		}
	}
	if up.sawURI("/acme/other/readme") {
		t.Fatal("a refused request reached the upstream")
	}
}

// TestPython: python's urllib, with the run CA as its trust store.
func TestPython(t *testing.T) {
	requireTool(t, "python3")
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false, withRules(gitRules...))
	script := `import socket, ssl, sys, urllib.request, urllib.error
real = socket.getaddrinfo
socket.getaddrinfo = lambda host, *a, **k: real("127.0.0.1" if host == "github.com" else host, *a, **k)
ctx = ssl.create_default_context(cafile=sys.argv[1])
for url in sys.argv[2:]:
    try:
        with urllib.request.urlopen(url, context=ctx) as r:
            print(r.status, r.read().decode().strip())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
`
	out, err := run(t, "", nil, "python3", "-c", script, s.caFile, s.url("/acme/app/x"), s.url("/acme/other/x"))
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "200 upstream saw GET /acme/app/x") || !strings.HasPrefix(lines[1], "403 cordon: blocked GET") {
		t.Fatalf("python got:\n%s", out)
	}
}

// gitUpstream serves bare repositories acme/app.git and acme/other.git with git http-backend.
func gitUpstream(t *testing.T) (*upstream, string) {
	requireTool(t, "git")
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git --exec-path: %v", err)
	}
	root := t.TempDir()
	for _, repo := range []string{"acme/app.git", "acme/other.git"} {
		out, err := run(t, root, nil, "sh", "-ec", fmt.Sprintf(`git init -q --bare -b main %[1]s && git -C %[1]s config http.receivepack true
rm -rf /tmp/seed.$$ && git init -q -b main seed.$$ && cd seed.$$ && echo hello > README && git add README && git commit -qm seed && git push -q ../%[1]s main && cd .. && rm -rf seed.$$`, repo))
		if err != nil {
			t.Fatalf("setup %s: %v\n%s", repo, err, out)
		}
	}
	return newUpstream(t, &cgiHandler{path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"), root: root}, false), root
}

// TestGit: real git clones and pushes acme/app through the interceptor under the example rule,
// and is refused pushing to (or cloning) acme/other; the same push succeeds under a rule allowing it.
func TestGit(t *testing.T) {
	up, root := gitUpstream(t)
	push := func(t *testing.T, s *setup, repo string, config ...string) (string, error) {
		work := t.TempDir()
		git := []string{"-c", "http.sslCAInfo=" + s.caFile, "-c", "http.sslCAPath=" + filepath.Dir(s.caFile), "-c", "http.curloptResolve=" + s.hostPort() + ":127.0.0.1"}
		git = append(git, config...)
		out, err := run(t, work, nil, "git", append(git, "clone", "-q", s.url("/acme/"+repo+".git"), "c")...)
		if err != nil {
			return "clone: " + out, err
		}
		return run(t, filepath.Join(work, "c"), nil, "sh", "-ec", fmt.Sprintf(`echo agent > AGENT-%[2]s && git add . && git commit -qm agent-%[2]s && git %[1]s push -q origin main`, strings.Join(git, " "), repo))
	}
	logOf := func(repo string) string {
		out, _ := run(t, filepath.Join(root, "acme", repo+".git"), nil, "git", "log", "--format=%s", "main")
		return out
	}

	s := newSetup(t, up, "github.com", false, withRules(gitRules...))
	if out, err := push(t, s, "app"); err != nil || !strings.Contains(logOf("app"), "agent-app") {
		t.Fatalf("clone and push of acme/app under the rule failed: %v\n%s", err, out)
	}
	if ev := s.rec.last(t, "POST", "/acme/app.git/git-receive-pack"); ev.Decision != audit.Allow || ev.Detail["proto"] != "HTTP/2.0" || ev.BytesOut == 0 {
		t.Fatalf("push event %+v", ev)
	}
	out, err := push(t, s, "other")
	if err == nil || strings.Contains(logOf("other"), "agent-other") {
		t.Fatalf("acme/other was cloned or pushed under a rule for acme/app only: %s", out)
	}
	ev := s.rec.last(t, "GET", "/acme/other.git/info/refs")
	if ev.Decision != audit.Deny || ev.Rule != "network.http[0]" || ev.Detail["status"] != "403" {
		t.Fatalf("refusal event %+v", ev)
	}
	// The refusal of a push itself, as git's request would be made (clone had already been refused).
	c := s.client(false)
	resp, body := get(t, c, newRequest(t, "POST", s.url("/acme/other.git/git-receive-pack"), strings.NewReader("0000")))
	if resp.StatusCode != 403 || !strings.Contains(body, "network.http[0]") || !strings.Contains(body, `to allow: add {methods: [POST], paths: ["/acme/other.git/git-receive-pack"]}`) {
		t.Fatalf("push refusal: %d %q", resp.StatusCode, body)
	}
	for _, r := range up.requests() {
		if strings.Contains(r.URI, "other.git") {
			t.Fatalf("a refused request reached the upstream: %+v", r)
		}
	}

	// Control: with a rule that allows acme/other, the same push goes through (here over HTTP/1.1;
	// git chose HTTP/2 above).
	wide := newSetup(t, up, "github.com", false, withRules(Rule{Host: "github.com", Allow: []Access{{Methods: []string{"GET", "POST"}, Paths: []string{"/acme/*"}}}, Source: "network.http[0]"}))
	if out, err := push(t, wide, "other", "-c", "http.version=HTTP/1.1"); err != nil || !strings.Contains(logOf("other"), "agent-other") {
		t.Fatalf("control: push to acme/other under a rule allowing it failed: %v\n%s", err, out)
	}
	if ev := wide.rec.last(t, "POST", "/acme/other.git/git-receive-pack"); ev.Decision != audit.Allow || ev.Detail["proto"] != "HTTP/1.1" {
		t.Fatalf("push event %+v", ev)
	}
}

// TestPathTricks: requests that would leave acme/app.git on some server's reading of the path are
// refused and never reach the upstream; the plain path is the control.
func TestPathTricks(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false, withRules(gitRules...))
	host := s.hostPort()
	for _, tc := range []struct {
		target string
		status int
	}{
		{"/acme/app.git/info/refs", 200},
		{"/acme/app.git/../other.git/info/refs", 403},
		{"/acme/app.git/%2e%2e/other.git/info/refs", 403},
		{"/acme/app.git/%2E%2E/other.git/info/refs", 403},
		{"/acme/app.git%2f..%2fother.git/info/refs", 403},
		{"/acme/app.git/..%5cother.git/info/refs", 403},
		{`/acme/app.git/..\other.git/info/refs`, 403},
		{"//acme/app.git/../../acme/other.git/info/refs", 403},
		{"/acme/app.git/..;/other.git/info/refs", 403},
		{"/acme/app.git/%252e%252e/other.git/info/refs", 403},
		{"https://github.com/acme/app.git/info/refs", 400},
		{"*", 400},
	} {
		status, body := s.rawRequest(t, "GET", tc.target, host)
		if status != tc.status {
			t.Errorf("GET %s: %d, want %d: %s", tc.target, status, tc.status, body)
		}
		if tc.status != 200 && up.sawURI(tc.target) {
			t.Errorf("GET %s reached the upstream", tc.target)
		}
	}
	// The same over HTTP/2, where the path is :path.
	c := s.client(true)
	for _, tc := range []struct {
		opaque string
		status int
	}{{"/acme/app.git/info/refs", 200}, {"/acme/app.git/%2e%2e/other.git/info/refs", 403}} {
		req := newRequest(t, "GET", s.url("/"), nil)
		req.URL.Opaque = tc.opaque
		if resp, body := get(t, c, req); resp.StatusCode != tc.status || resp.ProtoMajor != 2 {
			t.Errorf("h2 GET %s: %s %d, want %d: %s", tc.opaque, resp.Proto, resp.StatusCode, tc.status, body)
		}
	}
}

// TestDomainFronting: a Host or :authority naming anything but the connection's name (or its port
// wrongly) is 421 and recorded; the right one is the control.
func TestDomainFronting(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false)
	for _, h2 := range []bool{false, true} {
		c := s.client(h2)
		for _, tc := range []struct {
			host   string
			status int
		}{
			{s.hostPort(), 200},
			{"GitHub.com", 200},
			{"evil.example", 421},
			{fmt.Sprintf("evil.example:%d", s.port), 421},
			{"github.com:1", 421},
			{"github.com.evil.example", 421},
		} {
			req := newRequest(t, "GET", s.url("/front"), nil)
			req.Host = tc.host
			resp, body := get(t, c, req)
			if resp.StatusCode != tc.status {
				t.Errorf("h2=%v Host %q: %d, want %d: %s", h2, tc.host, resp.StatusCode, tc.status, body)
			}
		}
	}
	for _, r := range up.requests() {
		if !strings.HasPrefix(strings.ToLower(r.Host), "github.com") || r.Host == "github.com:1" {
			t.Fatalf("a fronted request reached the upstream: %+v", r)
		}
	}
	ev := s.rec.last(t, "GET", "/front")
	found := false
	for _, e := range s.rec.events() {
		if e.Detail["status"] == "421" && e.Decision == audit.Deny && e.Reason == "Host does not match the connection's name" && e.Detail["host"] != "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no 421 audit event; last: %+v", ev)
	}
	// A raw HTTP/1.1 Host header naming another host, on a raw connection.
	if status, _ := s.rawRequest(t, "GET", "/front", "evil.example"); status != 421 {
		t.Fatalf("raw Host mismatch: %d", status)
	}
}

// TestUpstreamTrust: an upstream whose certificate the Roots do not vouch for is refused with 502 and
// a deny event; the same upstream with its CA in Roots is the control.
func TestUpstreamTrust(t *testing.T) {
	up := newUpstream(t, nil, false)
	other, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	wrong := x509.NewCertPool()
	wrong.AddCert(other.Certificate())
	for _, tc := range []struct {
		name   string
		roots  *x509.CertPool
		dial   bool // false: the upstream cannot be reached
		status int
		line   string // what the one upstream line says, "" for none
	}{
		{"trusted", up.pool(), true, 200, ""},
		{"untrusted", wrong, true, 502, "network.tls.caFile"},
		{"system roots", nil, true, 502, "network.tls.caFile"},
		{"unreachable", up.pool(), false, 502, "cannot reach github.com:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			lines := map[string][]string{}
			s := newSetup(t, up, "github.com", false, func(c *Config) {
				c.Roots = tc.roots
				// The hook puts a credential in: the summary counts it only if the request reached
				// the upstream.
				c.Modify = func(r *http.Request, _ string) (map[string]string, error) {
					r.Header.Set("Authorization", "Bearer real")
					return map[string]string{audit.DetailCredentials: "token"}, nil
				}
				c.NotifyUpstream = func(key, line string) {
					mu.Lock()
					defer mu.Unlock()
					lines[key] = append(lines[key], line)
				}
				if !tc.dial {
					c.Dial = func(context.Context, string, uint16) (net.Conn, error) {
						return nil, errors.New("dialing github.com: connection refused")
					}
				}
			})
			for range 3 { // an agent retrying: still one key for the host
				resp, body := get(t, s.client(false), newRequest(t, "GET", s.url("/x"), nil))
				if resp.StatusCode != tc.status {
					t.Fatalf("%d, want %d: %s", resp.StatusCode, tc.status, body)
				}
				ev := s.rec.last(t, "GET", "/x")
				if tc.status == 502 && tc.dial && (ev.Decision != audit.Deny || !strings.Contains(body, "certificate")) {
					t.Fatalf("refusal: %+v %q", ev, body)
				}
				sent, unsent := ev.Detail[audit.DetailCredentials], ev.Detail[audit.DetailCredentialsUnsent]
				if tc.status == 200 && (sent != "token" || unsent != "") || tc.status != 200 && (sent != "" || unsent != "token") {
					t.Fatalf("credentials %q, unsent %q after a %d", sent, unsent, tc.status)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.line == "" {
				if len(lines) != 0 {
					t.Fatalf("upstream lines for a working upstream: %q", lines)
				}
				return
			}
			// One key for the host (the gateway's notifier prints each key once).
			got := lines["upstream "+s.hostPort()]
			if len(got) == 0 || !strings.Contains(got[0], tc.line) || len(lines) != 1 {
				t.Fatalf("upstream lines %q, want them under one key for %s, saying %q", lines, s.hostPort(), tc.line)
			}
		})
	}
}

// TestWebsocket: an HTTP/1.1 upgrade through interception gets the upstream's 101, and frames then
// flow both ways; a refused path gets no upgrade.
func TestWebsocket(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false, withRules(Rule{Host: "github.com", Allow: []Access{{Methods: []string{"GET"}, Paths: []string{"/ws"}, Websocket: true}}, Source: "network.http[0]"}))
	for _, tc := range []struct {
		path, upgrade string
		status        int
	}{{"/ws", "websocket", 101}, {"/ws2", "websocket", 403}, {"/ws", "h2c", 403}} {
		c, br := s.raw(t)
		key := "dGhlIHNhbXBsZSBub25jZQ=="
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n\r\n", tc.path, s.hostPort(), tc.upgrade, key)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.status {
			t.Fatalf("%s upgrade to %s: %d, want %d", tc.path, tc.upgrade, resp.StatusCode, tc.status)
		}
		if tc.status != 101 {
			continue
		}
		if resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
			t.Fatalf("accept %q", resp.Header.Get("Sec-WebSocket-Accept"))
		}
		for _, msg := range []string{"ping 1", "ping 2", "a longer message, still one frame"} {
			if _, err := c.Write(wsFrame(1, []byte(msg), true)); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			op, got, err := wsRead(br)
			if err != nil || op != 1 || string(got) != msg {
				t.Fatalf("echo of %q: op %d %q %v", msg, op, got, err)
			}
		}
		_, _ = c.Write(wsFrame(8, nil, true))
		if _, err := io.ReadAll(br); err != nil { // the upstream closed after echoing the close frame
			t.Fatalf("after the close frame: %v", err)
		}
		c.Close() // the proxy relays the half-close and waits for ours
	}
	s.rec.wait(t, func(e audit.Event) bool {
		return e.Detail["path"] == "/ws" && e.Decision == audit.Allow && e.Detail["status"] == "101"
	})
	if n := len(up.requests()); n != 1 {
		t.Fatalf("want only the websocket relayed, upstream saw %+v", up.requests())
	}
}

// TestModify: the hook sees each allowed request; its header change reaches the upstream, its details
// reach the audit log, its error refuses the request, and the secret it adds is never recorded.
func TestModify(t *testing.T) {
	up := newUpstream(t, nil, false)
	var seen []string
	s := newSetup(t, up, "api.example.com", false, func(c *Config) {
		c.Hosts = []string{"*.example.com"}
		c.Modify = func(r *http.Request, name string) (map[string]string, error) {
			seen = append(seen, name+" "+r.URL.Path)
			if r.URL.Path == "/reroute" {
				r.URL.Path = "/elsewhere" // a buggy hook must not move the request past the rules
				return nil, nil
			}
			if r.URL.Path == "/refuse" {
				return map[string]string{"credential": "API_KEY"}, errors.New("placeholder bound to another host")
			}
			r.Header.Set("Authorization", "Bearer s3cr3t-value")
			r.URL.Host = "elsewhere.example" // must not redirect the request
			return map[string]string{"credential": "API_KEY", "method": "overridden?"}, nil
		}
	})
	if !s.i.Wants("api.example.com") || s.i.Wants("example.com") {
		t.Fatal("Wants does not follow Hosts")
	}
	resp, body := get(t, s.client(true), newRequest(t, "GET", s.url("/v1/models"), nil))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	reqs := up.requests()
	if got := reqs[len(reqs)-1]; got.Header.Get("Authorization") != "Bearer s3cr3t-value" || got.SNI != "api.example.com" {
		t.Fatalf("upstream got %+v", got)
	}
	if resp, body := get(t, s.client(false), newRequest(t, "GET", s.url("/refuse"), nil)); resp.StatusCode != 403 || !strings.Contains(body, "placeholder bound") {
		t.Fatalf("refusal: %d %q", resp.StatusCode, body)
	}
	if resp, body := get(t, s.client(false), newRequest(t, "GET", s.url("/reroute"), nil)); resp.StatusCode != 502 || up.sawURI("/elsewhere") {
		t.Fatalf("a hook that changed the path: %d %q", resp.StatusCode, body)
	}
	if up.sawURI("/refuse") {
		t.Fatal("a request Modify refused reached the upstream")
	}
	if len(seen) != 3 || seen[0] != "api.example.com /v1/models" {
		t.Fatalf("Modify saw %q", seen)
	}
	ev := s.rec.last(t, "GET", "/v1/models")
	if ev.Detail["credential"] != "API_KEY" || ev.Detail["method"] != "GET" || ev.Decision != audit.Allow {
		t.Fatalf("event %+v", ev)
	}
	if ev := s.rec.last(t, "GET", "/refuse"); ev.Decision != audit.Deny || ev.Detail["credential"] != "API_KEY" {
		t.Fatalf("refusal event %+v", ev)
	}
	for _, e := range s.rec.events() {
		if strings.Contains(fmt.Sprintf("%+v", e), "s3cr3t") {
			t.Fatalf("the secret reached the audit log: %+v", e)
		}
	}
}

// TestServePlain: the same rules on plain HTTP, forwarded as plain HTTP.
func TestServePlain(t *testing.T) {
	up := newUpstream(t, nil, true)
	s := newSetup(t, up, "github.com", true, withRules(gitRules...))
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", s.addr)
	}}}
	// The same client using the interceptor as its explicit proxy sends absolute-form targets.
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: s.addr})}}
	for _, cl := range []*http.Client{c, proxied} {
		for _, tc := range []struct {
			path   string
			status int
		}{{"/acme/app/x", 200}, {"/acme/other/x", 403}, {"/acme/app/../other/x", 403}} {
			req := newRequest(t, "GET", fmt.Sprintf("http://%s/", s.hostPort()), nil)
			req.URL.Opaque = tc.path // sent as is, not cleaned
			resp, body := get(t, cl, req)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s: %d, want %d: %s", tc.path, resp.StatusCode, tc.status, body)
			}
		}
	}
	for _, r := range up.requests() {
		if strings.Contains(r.URI, "other") || !strings.HasPrefix(r.URI, "/") {
			t.Fatalf("upstream got %+v", r)
		}
	}
	// An absolute-form target naming another host is fronting, on plain HTTP as on TLS.
	proxied.Transport.(*http.Transport).Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: s.addr})
	if resp, body := get(t, proxied, newRequest(t, "GET", "http://evil.example/acme/app/x", nil)); resp.StatusCode != 421 {
		t.Fatalf("absolute-form for another host: %d %s", resp.StatusCode, body)
	}
}

// TestServeTLSRefusesOtherSNI: the interceptor mints only for the name it is told, and a client that
// asked for another name does not get served (the caller should have refused it already).
func TestServeTLSRefusesOtherSNI(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false)
	for _, tc := range []struct {
		sni string
		ok  bool
	}{{"github.com", true}, {"gitlab.com", false}} {
		c, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: s.pool(), ServerName: tc.sni})
		if err == nil {
			_, err = fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", tc.sni)
			if err == nil {
				_, err = http.ReadResponse(bufioReader(c), nil)
			}
			c.Close()
		}
		if (err == nil) != tc.ok {
			t.Fatalf("SNI %s: %v", tc.sni, err)
		}
	}
}

// TestServeTLSEndsWithContext: ServeTLS returns when its context ends, even with a kept-alive client
// or a websocket open (newSetup's cleanup waits for every ServeTLS; this makes one still busy).
func TestServeTLSEndsWithContext(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false)
	c, br := s.raw(t)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: x\r\n\r\n", s.hostPort())
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
}

func TestNewErrors(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dial := func(context.Context, string, uint16) (net.Conn, error) { return nil, errors.New("no") }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Dial: dial}, "CA is required"},
		{Config{CA: ca}, "Dial is required"},
		{Config{CA: ca, Dial: dial, Rules: []Rule{{Host: "a b", Source: "network.http[3]"}}}, "network.http[3]"},
		{Config{CA: ca, Dial: dial, Hosts: []string{"*"}}, "want a name"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want %q", err, tc.want)
		}
	}
	i, err := New(Config{CA: ca, Dial: dial, Rules: gitRules, Hosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"github.com": true, "GitHub.com.": true, "api.example.com": true, "gitlab.com": false, "x.github.com": false} {
		if i.Wants(name) != want {
			t.Errorf("Wants(%q) = %v", name, !want)
		}
	}
}

// TestHeadersStripped: hop-by-hop and proxy headers the sandbox sends do not reach the upstream; an
// ordinary header beside them does (the control).
func TestHeadersStripped(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false)
	c, br := s.raw(t)
	fmt.Fprintf(c, "GET /h HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"+
		"Forwarded: for=10.0.0.1\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Host: evil.example\r\nConnection: X-Hop\r\nX-Hop: 1\r\nX-Kept: yes\r\n\r\n", s.hostPort())
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	reqs := up.requests()
	h := reqs[len(reqs)-1].Header
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Hop"} {
		if v := h.Values(k); len(v) > 0 {
			t.Errorf("upstream got %s: %q", k, v)
		}
	}
	if h.Get("X-Kept") != "yes" {
		t.Fatalf("an ordinary header was lost: %v", h)
	}
}

// TestDialFailure: when the gateway's dialer refuses (a private address, say), the client gets a 502
// saying why, and the event records the error.
func TestDialFailure(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "github.com", false, func(c *Config) {
		c.Dial = func(context.Context, string, uint16) (net.Conn, error) {
			return nil, errors.New("proxy: resolves to a private address (10.0.0.1)")
		}
	})
	resp, body := get(t, s.client(false), newRequest(t, "GET", s.url("/x"), nil))
	if resp.StatusCode != 502 || !strings.Contains(body, "private address") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if ev := s.rec.last(t, "GET", "/x"); !strings.Contains(ev.Detail["error"], "private address") || ev.Detail["status"] != "502" {
		t.Fatalf("event %+v", ev)
	}
	if len(up.requests()) != 0 {
		t.Fatal("the upstream was reached")
	}
}
