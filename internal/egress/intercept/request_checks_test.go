package intercept

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// limitedRules is a rule-limited host whose accesses each allow one extra.
var limitedRules = Rule{Host: "api.example.com", Source: "network.http[0]", Allow: []Access{
	{Methods: []string{"GET", "POST"}, Paths: []string{"/ok/*"}},
	{Methods: []string{"GET", "DELETE"}, Paths: []string{"/body/*"}, Body: true},
	{Methods: []string{"GET"}, Paths: []string{"/ws", "/bad101"}, Websocket: true},
	{Methods: []string{"GET"}, Paths: []string{"/ovr/*"}, Headers: []string{"X-HTTP-Method-Override"}},
}}

const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

func wsHead(version, key string) string {
	return "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: " + version + "\r\nSec-WebSocket-Key: " + key + "\r\n"
}

// TestRuleLimitedRequests attacks a rule-limited host over HTTP/1.1 with what passes a method and
// path rule but makes a lenient upstream do more: bodies on GET and DELETE, method-override and
// URL-rewrite headers, upgrades, and path spellings that decode to dots and slashes. Each is refused
// (and never reaches the upstream) unless the access allows it; the allowed forms are the controls.
func TestRuleLimitedRequests(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/", defaultUpstream())
	mux.HandleFunc("/bad101", func(w http.ResponseWriter, r *http.Request) {
		// An upstream that switches to another protocol than the one asked for.
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
	})
	up := newUpstream(t, mux, false)
	s := newSetup(t, up, "api.example.com", false, withRules(limitedRules))
	for _, tc := range []struct {
		name, method, target, head, body string
		status                           int
		has                              string // in the answer's body
		seen                             string // the URI the upstream must have seen; "" none
	}{
		{name: "GET body", method: "GET", target: "/ok/a", head: "Content-Length: 5\r\n", body: "hello", status: 403, has: "add body: true to network.http[0].allow[0]"},
		{name: "GET chunked body", method: "GET", target: "/ok/b", head: "Transfer-Encoding: chunked\r\n", body: "5\r\nhello\r\n0\r\n\r\n", status: 403, has: "request body on GET"},
		{name: "HEAD body", method: "HEAD", target: "/ok/c", head: "Content-Length: 5\r\n", body: "hello", status: 403},
		{name: "GET empty chunked body", method: "GET", target: "/ok/d", head: "Transfer-Encoding: chunked\r\n", body: "0\r\n\r\n", status: 200, seen: "/ok/d"},
		{name: "GET Content-Length 0", method: "GET", target: "/ok/e", head: "Content-Length: 0\r\n", status: 200, seen: "/ok/e"},
		{name: "POST body", method: "POST", target: "/ok/f", head: "Content-Length: 5\r\n", body: "hello", status: 200, seen: "/ok/f"},
		{name: "GET body allowed", method: "GET", target: "/body/a", head: "Content-Length: 5\r\n", body: "hello", status: 200, has: `body="hello"`, seen: "/body/a"},
		{name: "DELETE body allowed", method: "DELETE", target: "/body/b", head: "Content-Length: 5\r\n", body: "hello", status: 200, seen: "/body/b"},
		{name: "method override", method: "GET", target: "/ok/g", head: "X-HTTP-Method-Override: DELETE\r\n", status: 403, has: "add headers: [x-http-method-override] to network.http[0].allow[0]"},
		{name: "method override, underscores", method: "GET", target: "/ok/h", head: "X_HTTP_Method_Override: DELETE\r\n", status: 403},
		{name: "X-HTTP-Method", method: "GET", target: "/ok/i", head: "X-HTTP-Method: DELETE\r\n", status: 403},
		{name: "X-Method-Override", method: "GET", target: "/ok/i2", head: "X-Method-Override: DELETE\r\n", status: 403},
		{name: "X-Original-URL", method: "GET", target: "/ok/j", head: "X-Original-URL: /secret\r\n", status: 403},
		{name: "X-Rewrite-URL", method: "GET", target: "/ok/k", head: "X-Rewrite-URL: /secret\r\n", status: 403},
		{name: "X-Original-Method", method: "GET", target: "/ok/k2", head: "X-Original-Method: DELETE\r\n", status: 403},
		{name: "override allowed", method: "GET", target: "/ovr/a", head: "X-HTTP-Method-Override: PATCH\r\n", status: 200, seen: "/ovr/a"},
		{name: "other override not allowed", method: "GET", target: "/ovr/b", head: "X-Original-URL: /secret\r\n", status: 403},
		{name: "websocket allowed", method: "GET", target: "/ws", head: wsHead("13", wsKey), status: 101, seen: "/ws"},
		{name: "websocket not allowed", method: "GET", target: "/ok/ws", head: wsHead("13", wsKey), status: 403, has: "add websocket: true to network.http[0].allow[0]"},
		{name: "websocket bad key", method: "GET", target: "/ws?key", head: wsHead("13", "short"), status: 400, has: "Sec-WebSocket-Key"},
		{name: "websocket old version", method: "GET", target: "/ws?version", head: wsHead("8", wsKey), status: 400, has: "version"},
		{name: "websocket and h2c", method: "GET", target: "/ws?h2c", head: "Connection: Upgrade\r\nUpgrade: websocket, h2c\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + wsKey + "\r\n", status: 403},
		{name: "upgrade answered with another protocol", method: "GET", target: "/bad101", head: wsHead("13", wsKey), status: 502, seen: "/bad101"},
		{name: "overlong dots", method: "GET", target: "/ok/%c0%ae%c0%ae/secret", status: 403, has: "UTF-8"},
		{name: "overlong slash", method: "GET", target: "/ok/..%c0%af..%c0%afsecret", status: 403},
		{name: "full-width dots", method: "GET", target: "/ok/%ef%bc%8e%ef%bc%8e/secret", status: 403, has: "dot, slash"},
		{name: "full-width slash", method: "GET", target: "/ok/..%ef%bc%8fsecret", status: 403},
		{name: "fraction slash", method: "GET", target: "/ok/..%e2%81%84secret", status: 403},
		{name: "one dot leader", method: "GET", target: "/ok/%e2%80%a4%e2%80%a4/secret", status: 403},
		{name: "full-width backslash", method: "GET", target: "/ok/..%ef%bc%bcsecret", status: 403},
		{name: "encoded backslash", method: "GET", target: "/ok/..%5csecret", status: 403},
		{name: "encoded NUL", method: "GET", target: "/ok/a%00.txt", status: 403},
		{name: "UTF-8 name", method: "GET", target: "/ok/caf%C3%A9", status: 200, seen: "/ok/caf%C3%A9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := s.raw(t)
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n%s", tc.method, tc.target, s.hostPort(), tc.head, tc.body)
			if tc.status == 101 {
				// A websocket keeps its connection: Connection: close is not sent then.
				c, br = s.raw(t)
				fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", tc.method, tc.target, s.hostPort(), tc.head)
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: tc.method})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.has) {
				t.Fatalf("%d %q; want %d with %q", resp.StatusCode, b, tc.status, tc.has)
			}
			if tc.seen == "" && up.sawURI(tc.target) {
				t.Fatalf("the upstream received the refused request %s", tc.target)
			}
			if tc.seen != "" && !up.sawURI(tc.seen) {
				t.Fatalf("the upstream did not receive %s", tc.seen)
			}
			if tc.status == 403 || tc.status == 400 {
				if ev := s.rec.last(t, tc.method, strings.SplitN(tc.target, "?", 2)[0]); ev.Decision != "deny" || ev.Reason == "" {
					t.Fatalf("audit event %+v", ev)
				}
			}
		})
	}
}

// TestRuleLimitedBodyHTTP2: over HTTP/2 a GET's body, of known or unknown length, is refused the same
// way; an unknown-length body that turns out empty is not a body.
func TestRuleLimitedBodyHTTP2(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "api.example.com", false, withRules(limitedRules))
	for _, tc := range []struct {
		path, body string
		known      bool
		status     int
	}{
		{"/ok/h2-known", "hello", true, 403},
		{"/ok/h2-unknown", "hello", false, 403},
		{"/ok/h2-empty", "", false, 200},
		{"/body/h2", "hello", true, 200},
	} {
		var body io.Reader = strings.NewReader(tc.body)
		if !tc.known {
			body = io.MultiReader(body) // a reader whose length the client cannot know
		}
		req, err := http.NewRequest("GET", s.url(tc.path), body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Probe", "1")
		resp, err := s.client(true).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != tc.status {
			t.Errorf("%s: %s %d %q; want HTTP/2 %d", tc.path, resp.Proto, resp.StatusCode, b, tc.status)
		}
		if (tc.status == 200) != up.sawURI(tc.path) {
			t.Errorf("%s: upstream saw it: %v", tc.path, up.sawURI(tc.path))
		}
	}
}

// TestJudgeExtras: the first access that allows the method and path but not an extra is named in the
// denial; another access allowing all of it allows the request; hosts without rules ask nothing.
func TestJudgeExtras(t *testing.T) {
	rs, err := compileRules([]Rule{limitedRules, {Host: "two.example.com", Source: "network.http[1]", Allow: []Access{
		{Methods: []string{"GET"}, Paths: []string{"/x"}},
		{Methods: []string{"GET"}, Paths: []string{"/x"}, Body: true, Websocket: true, Headers: []string{"x-original-url"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, target string
		x                    extras
		allow                bool
		fix                  string
	}{
		{"api.example.com", "GET", "/ok/a", extras{}, true, ""},
		{"api.example.com", "GET", "/ok/a", extras{body: true}, false, "add body: true to network.http[0].allow[0]"},
		{"api.example.com", "GET", "/body/a", extras{body: true}, true, ""},
		{"api.example.com", "GET", "/body/a", extras{body: true, websocket: true}, false, "add websocket: true to network.http[0].allow[1]"},
		{"api.example.com", "GET", "/ovr/a", extras{overrides: []string{"x-http-method-override", "x-original-url"}}, false, "add headers: [x-original-url] to network.http[0].allow[3]"},
		{"api.example.com", "PUT", "/ok/a", extras{}, false, `add {methods: [PUT], paths: ["/ok/a"]} to network.http[0].allow`},
		{"two.example.com", "GET", "/x", extras{body: true, websocket: true, overrides: []string{"x-original-url"}}, true, ""},
		{"free.example.com", "GET", "/x", extras{body: true, websocket: true, overrides: []string{"x-original-url"}}, true, ""},
	} {
		v := rs.judgeExtras(tc.name, tc.method, tc.target, tc.x)
		if v.allow != tc.allow || v.fix != tc.fix {
			t.Errorf("judgeExtras(%s %s %s %+v) = %+v; want allow=%v fix=%q", tc.name, tc.method, tc.target, tc.x, v, tc.allow, tc.fix)
		}
	}
	if _, err := compileRules([]Rule{{Host: "a.example.com", Source: "network.http[2]", Allow: []Access{{Headers: []string{"X-Api-Key"}}}}}); err == nil || !strings.Contains(err.Error(), "network.http[2]: allow[0]: header \"X-Api-Key\"") {
		t.Errorf("a header that is not an override was accepted: %v", err)
	}
}

// TestBodylessMethodBodyOnCredentialHost: a host intercepted for a credential alone (no rule could
// allow it) refuses a body on GET, which an upstream that ignores it would read as a second request;
// a POST's body and a GET without one go on.
func TestBodylessMethodBodyOnCredentialHost(t *testing.T) {
	up := newUpstream(t, nil, false)
	s := newSetup(t, up, "api.example.com", false, func(c *Config) { c.Hosts = []string{"api.example.com"} })
	for _, tc := range []struct {
		method, target, head, body string
		status                     int
	}{
		{"GET", "/smuggle", "Content-Length: 5\r\n", "hello", 400},
		{"DELETE", "/smuggle2", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n", 400},
		{"GET", "/plain", "", "", 200},
		{"POST", "/post", "Content-Length: 5\r\n", "hello", 200},
	} {
		c, br := s.raw(t)
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n%s", tc.method, tc.target, s.hostPort(), tc.head, tc.body)
		resp, err := http.ReadResponse(br, &http.Request{Method: tc.method})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.target, resp.StatusCode, tc.status)
		}
		if seen := up.sawURI(tc.target); seen != (tc.status == 200) {
			t.Errorf("%s %s: the upstream saw it: %v", tc.method, tc.target, seen)
		}
	}
}
