//go:build linux

package main

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/probe"
)

// Attacks on the gateway's request side from inside a real sandbox (issue 11, items 1, 4-8): each
// asserts on what the upstream reqRecord, beside a control that shows the same request goes through
// where the policy allows it.

// reqRecorder is an upstream that records every request it receives, whole.
type reqRecorder struct {
	mu   sync.Mutex
	seen []reqRecord
}

type reqRecord struct {
	method, uri, proto string
	header             http.Header
	body               string
}

func (rec *reqRecorder) record(r *http.Request) reqRecord {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	s := reqRecord{method: r.Method, uri: r.RequestURI, proto: r.Proto, header: r.Header.Clone(), body: string(b)}
	rec.mu.Lock()
	rec.seen = append(rec.seen, s)
	rec.mu.Unlock()
	return s
}

func (rec *reqRecorder) requests() []reqRecord {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]reqRecord(nil), rec.seen...)
}

// saw reports whether the upstream received a request whose URI starts with prefix.
func (rec *reqRecorder) saw(prefix string) bool {
	for _, s := range rec.requests() {
		if strings.HasPrefix(s.uri, prefix) {
			return true
		}
	}
	return false
}

// reflecting answers with the request's x-api-key header, honouring Range as a file server does: the
// reflecting URL an agent would use to read a credential's value back.
func reflecting(rec *reqRecorder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := rec.record(r)
		if r.Header.Get("Upgrade") != "" && r.Header.Get("Sec-WebSocket-Key") != "" {
			sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
			_ = brw.Flush()
			return
		}
		content := fmt.Sprintf("UPSTREAM %s %s key=%s body=%d\n", s.method, s.uri, r.Header.Get("x-api-key"), len(s.body))
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(content))
	})
}

// plainUpstream serves handler over plain HTTP on the host's loopback.
func plainUpstream(t *testing.T, handler http.Handler) int {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// curlStatus is a script line that runs curl and prints "NAME CODE".
func curlStatus(name, args string) string {
	return fmt.Sprintf("echo \"%s $(curl -sS -m 10 -o /dev/null -w '%%{http_code}' %s)\"\n", name, args)
}

// codesByName parses "NAME CODE" lines.
func codesByName(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			m[k] = v
		}
	}
	return m
}

// TestCredentialNotSentInCleartext (item 1): a plain-HTTP request carrying the placeholder to the
// credential's host, on a port where TLS is expected, through the transparent path, as an absolute
// URL to the explicit proxy, and inside a CONNECT tunnel, is refused with a 403 that says why; the
// upstream never sees any of them (nor the value in cleartext). Controls: the same request over
// https gets the value; a plain request without the placeholder goes through.
func TestCredentialNotSentInCleartext(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		secret := "sk-ant-api03-" + h.canary + "REALSECRET"
		plain := &reqRecorder{}
		plainPort := plainUpstream(t, reflecting(plain))
		tlsRec := &reqRecorder{}
		tlsPort, caFile := serveTLS(t, h, reflecting(tlsRec), "api.test")
		pol := fmt.Sprintf(`network:
  allow:
    - {host: api.test, ports: [%[1]d, %[2]d]}
  hosts: {api.test: 127.0.0.1}
  tls: {caFile: %[3]q}
credentials:
  - name: API_KEY
    from: {env: CORDON_TEST_API_KEY}
    inject: {host: api.test, header: x-api-key}
`, plainPort, tlsPort, caFile)
		plainURL := fmt.Sprintf("http://api.test:%d", plainPort)
		script := curlStatus("transparent", fmt.Sprintf(`--noproxy '*' -H "x-api-key: $API_KEY" %s/transparent`, plainURL)) +
			curlStatus("explicit", fmt.Sprintf(`-H "x-api-key: $API_KEY" %s/explicit`, plainURL)) +
			curlStatus("tunnel", fmt.Sprintf(`-p -H "x-api-key: $API_KEY" %s/tunnel`, plainURL)) +
			curlStatus("nocred", fmt.Sprintf(`--noproxy '*' -H "x-api-key: none" %s/nocred`, plainURL)) +
			curlStatus("tls", fmt.Sprintf(`--noproxy '*' -H "x-api-key: $API_KEY" https://api.test:%d/tls`, tlsPort)) +
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' -H \"x-api-key: $API_KEY\" %s/message\n", plainURL)
		r := h.sandboxed(pol, script, "CORDON_TEST_API_KEY="+secret)
		got := codesByName(r.stdout)
		for name, want := range map[string]string{"transparent": "403", "explicit": "403", "tunnel": "403", "nocred": "200", "tls": "200"} {
			if got[name] != want {
				t.Errorf("%s: status %q, want %s\n%s", name, got[name], want, r)
			}
		}
		if !strings.Contains(r.stdout, "only over TLS (use https://)") {
			t.Errorf("the refusal does not say the credential goes only over TLS:\n%s", r)
		}
		for _, s := range plain.requests() {
			if strings.Contains(fmt.Sprint(s.header)+s.uri+s.body, "REALSECRET") {
				t.Errorf("the plain-HTTP upstream received the real value: %+v", s)
			}
			if s.uri != "/nocred" {
				t.Errorf("a refused cleartext request reached the upstream: %s %s", s.method, s.uri)
			}
		}
		if !plain.saw("/nocred") {
			t.Errorf("the control without a placeholder did not reach the plain upstream")
		}
		if s := tlsRec.requests(); len(s) != 1 || s[0].header.Get("x-api-key") != secret {
			t.Errorf("the https control did not get the real value: %+v", s)
		}
		log := h.cordon(nil, "", "log", "--json", "last")
		if !strings.Contains(log.stdout, "credential_cleartext") || strings.Contains(log.stdout, "REALSECRET") {
			t.Errorf("the audit log does not record the cleartext attempt (or shows the value):\n%s", log.stdout)
		}
	})
}

// TestCredentialRangeRefused (item 4): a reflecting URL on the bound host, read in Range pieces over
// HTTP/1.1 and HTTP/2 (and with If-Range, and as one multipart answer), is refused before the
// upstream sees the request, with a 403 naming ranges: true; where the credential allows ranges, the
// same request gets its 206 (the control), and a request without Range is answered and redacted.
func TestCredentialRangeRefused(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		secret := "sk-ant-api03-" + h.canary + "REALSECRET"
		rec := &reqRecorder{}
		port, caFile := serveTLS(t, h, reflecting(rec), "api.test", "media.test")
		pol := fmt.Sprintf(`network:
  allow:
    - {host: api.test, ports: [%[1]d]}
    - {host: media.test, ports: [%[1]d]}
  hosts: {api.test: 127.0.0.1, media.test: 127.0.0.1}
  tls: {caFile: %[2]q}
credentials:
  - name: API_KEY
    from: {env: CORDON_TEST_API_KEY}
    inject: {host: api.test, header: x-api-key}
  - name: MEDIA_KEY
    from: {env: CORDON_TEST_API_KEY}
    inject: {host: media.test, header: x-api-key, ranges: true}
`, port, caFile)
		api := fmt.Sprintf("https://api.test:%d", port)
		script := curlStatus("h1", fmt.Sprintf(`--http1.1 --noproxy '*' -H "x-api-key: $API_KEY" -r 20-30 %s/range-h1`, api)) +
			curlStatus("h2", fmt.Sprintf(`--http2 --noproxy '*' -H "x-api-key: $API_KEY" -r 20-30 %s/range-h2`, api)) +
			curlStatus("multipart", fmt.Sprintf(`--noproxy '*' -H "x-api-key: $API_KEY" -r 0-9,20-29,40-49 %s/range-multi`, api)) +
			curlStatus("ifrange", fmt.Sprintf(`--noproxy '*' -H "x-api-key: $API_KEY" -H 'If-Range: "x"' %s/ifrange`, api)) +
			curlStatus("proxy", fmt.Sprintf(`-H "x-api-key: $API_KEY" -r 20-30 %s/range-proxy`, api)) +
			curlStatus("whole", fmt.Sprintf(`--noproxy '*' -H "x-api-key: $API_KEY" %s/whole`, api)) +
			curlStatus("allowed", fmt.Sprintf(`--noproxy '*' -H "x-api-key: $MEDIA_KEY" -r 20-30 https://media.test:%d/allowed`, port)) +
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' -H \"x-api-key: $API_KEY\" -r 20-30 %s/message\n", api)
		r := h.sandboxed(pol, script, "CORDON_TEST_API_KEY="+secret)
		got := codesByName(r.stdout)
		for name, want := range map[string]string{"h1": "403", "h2": "403", "multipart": "403", "ifrange": "403", "proxy": "403", "whole": "200", "allowed": "206"} {
			if got[name] != want {
				t.Errorf("%s: status %q, want %s\n%s", name, got[name], want, r)
			}
		}
		if !strings.Contains(r.stdout, "ranges: true") {
			t.Errorf("the refusal does not name the policy knob:\n%s", r)
		}
		for _, s := range rec.requests() {
			if (s.header.Get("Range") != "" || s.header.Get("If-Range") != "") && s.uri != "/allowed" {
				t.Errorf("a ranged request with an injected credential reached the upstream: %s %v", s.uri, s.header)
			}
		}
		if !rec.saw("/whole") || !rec.saw("/allowed") {
			t.Errorf("the controls did not reach the upstream: %+v", rec.requests())
		}
		// The controls arrived as the agent sent them, with the real value in place of the
		// placeholder: the range where ranges: true allows it, none added where it was not asked.
		for _, s := range rec.requests() {
			want := map[string]string{"/whole": "", "/allowed": "bytes=20-30"}
			wantRange, control := want[s.uri]
			if !control {
				continue
			}
			if got := s.header.Get("x-api-key"); got != secret {
				t.Errorf("%s reached the upstream with x-api-key %q, want the real value", s.uri, got)
			}
			if got := s.header.Get("Range"); got != wantRange {
				t.Errorf("%s reached the upstream with Range %q, want %q", s.uri, got, wantRange)
			}
		}
		if strings.Contains(r.stdout+r.stderr, "REALSECRET") {
			t.Errorf("the agent read the real value:\n%s", r)
		}
	})
}

// TestRuleLimitedHostLenientRequests (items 5-8): on a host whose rules allow GET /allowed/*, the
// spellings and extras a lenient upstream reads as something else are refused and never reach it:
// overlong UTF-8 and full-width dots and slashes, method-override and URL-rewrite headers, a body
// on GET (HTTP/1.1 and HTTP/2), and upgrades where the rule does not say websocket: true (or that
// are not a well-formed websocket handshake). The controls: each extra where its access allows it.
func TestRuleLimitedHostLenientRequests(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		rec := &reqRecorder{}
		port, caFile := serveTLS(t, h, reflecting(rec), "rules.test")
		pol := fmt.Sprintf(`network:
  allow:
    - {host: rules.test, ports: [%[1]d]}
  hosts: {rules.test: 127.0.0.1}
  tls: {caFile: %[2]q}
  http:
    - host: rules.test
      allow:
        - {methods: [GET], paths: ["/allowed/*"]}
        - {methods: [GET], paths: ["/body/*"], body: true}
        - {methods: [GET], paths: ["/ovr/*"], headers: [X-HTTP-Method-Override]}
        - {methods: [GET], paths: ["/ws"], websocket: true}
`, port, caFile)
		u := fmt.Sprintf("https://rules.test:%d", port)
		c := func(name, args, path string) string {
			return curlStatus(name, fmt.Sprintf("--noproxy '*' --path-as-is %s %s%s", args, u, path))
		}
		script := c("overlong-dots", "", "/allowed/%c0%ae%c0%ae/secret") +
			c("overlong-slash", "", "/allowed/..%c0%af..%c0%afsecret") +
			c("fullwidth-dots", "", "/allowed/%ef%bc%8e%ef%bc%8e/secret") +
			c("fullwidth-slash", "", "/allowed/..%ef%bc%8fsecret") +
			c("override", "-H 'X-HTTP-Method-Override: DELETE'", "/allowed/override") +
			c("method", "-H 'X-HTTP-Method: DELETE'", "/allowed/method") +
			c("original-url", "-H 'X-Original-URL: /secret'", "/allowed/original-url") +
			c("rewrite-url", "-H 'X-Rewrite-URL: /secret'", "/allowed/rewrite-url") +
			c("body-h1", "--http1.1 -X GET --data hello", "/allowed/body-h1") +
			c("body-h2", "--http2 -X GET --data hello", "/allowed/body-h2") +
			c("h2c", "--http1.1 -H 'Connection: Upgrade' -H 'Upgrade: h2c'", "/allowed/h2c") +
			c("ok", "", "/allowed/ok") +
			c("ok-utf8", "", "/allowed/caf%C3%A9") +
			c("body-ok", "-X GET --data hello", "/body/ok") +
			c("override-ok", "-H 'X-HTTP-Method-Override: DELETE'", "/ovr/ok") +
			fmt.Sprintf(`python3 - <<'EOF'
import socket, ssl
def ws(name, path, key="dGhlIHNhbXBsZSBub25jZQ==", version="13"):
    s = ssl.create_default_context().wrap_socket(socket.create_connection(("rules.test", %d), timeout=10), server_hostname="rules.test")
    s.sendall(("GET %%s HTTP/1.1\r\nHost: rules.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
               "Sec-WebSocket-Version: %%s\r\nSec-WebSocket-Key: %%s\r\n\r\n" %% (path, version, key)).encode())
    print(name, s.recv(4096).decode().split(" ")[1])
    s.close()
ws("ws-not-allowed", "/allowed/ws")
ws("ws-bad-key", "/ws?bad-key", key="short")
ws("ws-old-version", "/ws?old", version="8")
ws("ws-ok", "/ws")
EOF
`, port, port)
		r := h.sandboxed(pol, script)
		got := codesByName(r.stdout)
		want := map[string]string{
			"overlong-dots": "403", "overlong-slash": "403", "fullwidth-dots": "403", "fullwidth-slash": "403",
			"override": "403", "method": "403", "original-url": "403", "rewrite-url": "403",
			"body-h1": "403", "body-h2": "403", "h2c": "403",
			"ws-not-allowed": "403", "ws-bad-key": "400", "ws-old-version": "400",
			"ok": "200", "ok-utf8": "200", "body-ok": "200", "override-ok": "200", "ws-ok": "101",
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: status %q, want %s\n%s", name, got[name], w, r)
			}
		}
		allowed := map[string]bool{"/allowed/ok": true, "/allowed/caf%C3%A9": true, "/body/ok": true, "/ovr/ok": true, "/ws": true}
		for _, s := range rec.requests() {
			if !allowed[s.uri] {
				t.Errorf("a refused request reached the upstream: %s %s %v", s.method, s.uri, s.header)
			}
		}
		for p := range allowed {
			if !rec.saw(p) {
				t.Errorf("the control %s did not reach the upstream", p)
			}
		}
		for _, s := range rec.requests() {
			if s.uri == "/body/ok" && s.body != "hello" {
				t.Errorf("the allowed GET body did not reach the upstream: %q", s.body)
			}
		}
	})
}

// TestCleartextProbe: cordon verify's cred.cleartext probe sends the placeholder of a credential to
// its host over plain HTTP three ways and passes because the gateway refuses each (the upstream sees
// none); run on the bare host, where nothing refuses, the same probe fails (the upstream answers).
func TestCleartextProbe(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		rec := &reqRecorder{}
		port := plainUpstream(t, reflecting(rec))
		pol := h.policy(fmt.Sprintf(`network:
  allow:
    - {host: cred.test, ports: [%d]}
  hosts: {cred.test: 127.0.0.1}
credentials:
  - name: API_TOKEN
    from: {env: CORDON_VERIFY_TOKEN}
    inject: {host: cred.test, header: x-api-key}
`, port))
		r := h.cordon([]string{"CORDON_VERIFY_TOKEN=sk-ant-api03-" + h.canary}, "", "verify", "--json", "--policy", pol)
		res := statuses(scorecard(t, r))["cred.cleartext"]
		if res.Status != probe.Pass || !strings.Contains(res.Evidence, "refused") || !strings.Contains(res.Evidence, "CONNECT tunnel") {
			t.Errorf("cred.cleartext in the sandbox: %s %s", res.Status, res.Evidence)
		}
		if rec.saw("/cordon-probe-cleartext") {
			t.Errorf("the gateway forwarded the probe's cleartext request: %+v", rec.requests())
		}
		coords := fmt.Sprintf(`{"injected":[{"name":"API_TOKEN","header":"x-api-key","hosts":[{"host":"127.0.0.1","port":%d}]}]}`, port)
		bare := h.plain(fmt.Sprintf("%s probe --json --only cred.cleartext --canaries '%s'", cordonBin, coords), "API_TOKEN=placeholder-"+h.canary)
		if res := statuses(scorecard(t, bare))["cred.cleartext"]; res.Status != probe.Fail {
			t.Errorf("cred.cleartext on the bare host: %s %s", res.Status, res.Evidence)
		}
		if !rec.saw("/cordon-probe-cleartext") {
			t.Errorf("the bare-host probe did not reach the upstream, so it proved nothing")
		}
	})
}
