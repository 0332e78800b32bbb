package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// TestExplicitAllowed sends real clients through the forward proxy: Go's net/http with a Proxy
// (CONNECT for https, absolute form for http), curl -x, openssl s_client -proxy, and a raw CONNECT
// carrying plain TCP.
func TestExplicitAllowed(t *testing.T) {
	h := newHarness(t)
	tlsUp, plainUp, echoUp := h.httpsUpstream(), h.httpUpstream(), h.echoUpstream("")
	for _, p := range []uint16{tlsUp.port, plainUp.port, echoUp.port} {
		h.pol.allow("api.test", p, loopback)
	}
	proxyURL := "http://" + h.proxy
	runAllowed(t, h, []allowedCase{
		{
			name: "Go net/http https (CONNECT)", port: tlsUp.port,
			run: func(t *testing.T) (string, error) {
				_, body, err := get(h.proxyClient(nil), fmt.Sprintf("https://api.test:%d/", tlsUp.port), "")
				return body, err
			},
			want: "hello api.test", detail: map[string]string{"via": "proxy", "proto": "tls", "sni": "api.test",
				"method": "CONNECT", "connect": fmt.Sprintf("api.test:%d", tlsUp.port)},
		},
		{
			name: "Go net/http http (absolute form)", port: plainUp.port,
			run: func(t *testing.T) (string, error) {
				_, body, err := get(h.proxyClient(nil), fmt.Sprintf("http://api.test:%d/a/b?k=secret", plainUp.port), "")
				return body, err
			},
			want: "hello api.test", detail: map[string]string{"via": "proxy", "method": "GET", "path": "/a/b"},
		},
		{
			name: "curl -x https", port: tlsUp.port,
			run: func(t *testing.T) (string, error) {
				return runTool(t, "", "curl", "-sS", "--max-time", "10", "-x", proxyURL, "--cacert", h.pki.caFile,
					fmt.Sprintf("https://api.test:%d/", tlsUp.port))
			},
			want: "hello api.test", detail: map[string]string{"sni": "api.test"},
		},
		{
			name: "curl -x http, chunked upload", port: plainUp.port,
			run: func(t *testing.T) (string, error) {
				return runTool(t, strings.Repeat("z", 70000), "curl", "-sS", "--max-time", "10", "-x", proxyURL,
					"-H", "Transfer-Encoding: chunked", "--data-binary", "@-", fmt.Sprintf("http://api.test:%d/up", plainUp.port))
			},
			want: "POST /up body=70000", detail: map[string]string{"method": "POST", "path": "/up"},
		},
		{
			name: "openssl s_client -proxy", port: tlsUp.port,
			run: func(t *testing.T) (string, error) {
				return runTool(t, "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n", "openssl", "s_client", "-quiet",
					"-ign_eof", "-proxy", h.proxy, "-connect", fmt.Sprintf("api.test:%d", tlsUp.port), "-servername", "api.test",
					"-CAfile", h.pki.caFile, "-verify_return_error")
			},
			want: "hello api.test", detail: map[string]string{"sni": "api.test"},
		},
		{
			name: "raw TCP through CONNECT", port: echoUp.port,
			run: func(t *testing.T) (string, error) {
				c, err := connectVia(h.proxy, fmt.Sprintf("api.test:%d", echoUp.port))
				if err != nil {
					return "", err
				}
				return rawExchange(c, "\x00\x01ping")
			},
			want: "\x00\x01ping", detail: map[string]string{"proto": "tcp"},
		},
	})
}

// TestExplicitManyHostsOneClient checks that a client keeping its proxy connection alive still has
// each request judged on its own host: every answer comes from the host asked for, and a denied host
// in between gets its 403 without disturbing the others.
func TestExplicitManyHostsOneClient(t *testing.T) {
	h := newHarness(t)
	u := h.httpUpstream()
	h.pol.allow("api.test", u.port, loopback)
	h.pol.allow("public.test", u.port, loopback)
	c := h.proxyClient(nil)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for i, host := range []string{"api.test", "public.test", "denied.test", "api.test"} {
		code, body, err := get(c, fmt.Sprintf("http://%s:%d/%d", host, u.port, i), "")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("hello %s:%d GET /%d", host, u.port, i)
		if host == "denied.test" {
			want = fmt.Sprintf("cordon: blocked denied.test:%d (not in network.allow)", u.port)
			if code != 403 {
				t.Errorf("status %d for a denied host", code)
			}
		}
		if !strings.HasPrefix(body, want) {
			t.Errorf("request %d: %q, want %q", i, body, want)
		}
	}
}

// connectVia opens a CONNECT tunnel to target through the proxy at addr.
func connectVia(addr, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		c.Close()
		return nil, err
	}
	// Read the answer byte by byte up to the blank line, so no tunnel byte is consumed.
	var head []byte
	one := make([]byte, 1)
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		if _, err := c.Read(one); err != nil {
			c.Close()
			return nil, fmt.Errorf("CONNECT answer %q: %w", head, err)
		}
		head = append(head, one[0])
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 200 ") {
		rest, _ := io.ReadAll(c)
		c.Close()
		return nil, fmt.Errorf("CONNECT refused: %s%s", head, rest)
	}
	return c, nil
}

func proxyGet(tweak func(*tls.Config), scheme, host string) func(t *testing.T, h *harness, name string, port uint16) (string, error) {
	return func(t *testing.T, h *harness, name string, port uint16) (string, error) {
		if host != "" {
			host = strings.ReplaceAll(host, "PORT", fmt.Sprint(port))
		}
		code, body, err := get(h.proxyClient(tweak), fmt.Sprintf("%s://%s:%d/", scheme, name, port), host)
		if err == nil && code != 200 {
			return body, fmt.Errorf("status %d: %s", code, body)
		}
		return body, err
	}
}

func proxyRaw(req string) func(t *testing.T, h *harness, name string, port uint16) (string, error) {
	return func(t *testing.T, h *harness, name string, port uint16) (string, error) {
		c, err := net.Dial("tcp", h.proxy)
		if err != nil {
			return "", err
		}
		code, body, err := rawHTTP(c, strings.ReplaceAll(req, "PORT", fmt.Sprint(port)))
		if err == nil && code != 200 {
			return body, fmt.Errorf("status %d: %s", code, body)
		}
		return body, err
	}
}

// tunnelRaw sends req inside a CONNECT tunnel to name:port.
func tunnelRaw(req string) func(t *testing.T, h *harness, name string, port uint16) (string, error) {
	return func(t *testing.T, h *harness, name string, port uint16) (string, error) {
		c, err := connectVia(h.proxy, fmt.Sprintf("%s:%d", name, port))
		if err != nil {
			return "", err
		}
		code, body, err := rawHTTP(c, strings.ReplaceAll(req, "PORT", fmt.Sprint(port)))
		if err == nil && code != 200 {
			return body, fmt.Errorf("status %d: %s", code, body)
		}
		return body, err
	}
}

// TestExplicitAttacks is the attack table of the forward proxy.
func TestExplicitAttacks(t *testing.T) {
	runAttacks(t, []attack{
		{
			name:  "CONNECT to an IP address",
			setup: withUpstream("https", "api.test"),
			attack: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				return proxyGet(nil, "https", "")(t, h, "127.0.0.1", p)
			},
			allowed: proxyGet(nil, "https", ""),
			want:    "hello api.test",
			check: func(t *testing.T, h *harness) {
				h.rec.waitFor(t, 0, "for the IP literal", func(e audit.Event) bool { return e.Name == "127.0.0.1" && e.Reason == reasonIPLiteral })
			},
		},
		{
			name:    "CONNECT to a number that resolvers read as an address",
			setup:   withUpstream("https", "api.test"),
			attack:  proxyRaw("CONNECT 2130706433:PORT HTTP/1.1\r\nHost: 2130706433:PORT\r\n\r\n"),
			allowed: proxyGet(nil, "https", ""),
			want:    "hello api.test",
		},
		{
			name:    "SNI inside the tunnel names another allowed host",
			setup:   withUpstream("https", "api.test", "evil.test"),
			attack:  proxyGet(func(c *tls.Config) { c.ServerName = "evil.test" }, "https", ""),
			allowed: proxyGet(nil, "https", ""),
			want:    "hello api.test", reason: reasonSNIMismatch,
		},
		{
			name:  "ECH inside the tunnel",
			setup: withUpstream("https", "api.test"),
			attack: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				return proxyGet(func(c *tls.Config) {
					c.MinVersion, c.EncryptedClientHelloConfigList = tls.VersionTLS13, echConfigList(t, n)
				}, "https", "")(t, h, n, p)
			},
			allowed: proxyGet(func(c *tls.Config) { c.MinVersion = tls.VersionTLS13 }, "https", ""),
			want:    "hello api.test", reason: reasonECH,
		},
		{
			name:    "plain HTTP inside the tunnel names another host",
			setup:   withUpstream("http", "api.test", "evil.test"),
			attack:  tunnelRaw("GET / HTTP/1.1\r\nHost: evil.test:PORT\r\n\r\n"),
			allowed: tunnelRaw("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test", reason: reasonHostMismatch,
		},
		{
			name:  "Host header disagrees with the request URI",
			setup: withUpstream("http", "api.test", "evil.test"),
			attack: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				out, err := runTool(t, "", "curl", "-sSf", "--max-time", "10", "-x", "http://"+h.proxy,
					"-H", fmt.Sprintf("Host: evil.test:%d", p), fmt.Sprintf("http://%s:%d/", n, p))
				return out, err
			},
			allowed: proxyGet(nil, "http", ""),
			want:    "hello api.test", reason: reasonHostVsURI,
			check: func(t *testing.T, h *harness) {
				h.rec.waitFor(t, 0, "with the Host", func(e audit.Event) bool { return strings.HasPrefix(e.Detail["http_host"], "evil.test:") })
			},
		},
		{
			name:    "userinfo in the request URI",
			setup:   withUpstream("http", "api.test", "evil.test"),
			attack:  proxyRaw("GET http://api.test:PORT@evil.test:PORT/ HTTP/1.1\r\nHost: evil.test:PORT\r\n\r\n"),
			allowed: proxyRaw("GET http://api.test:PORT/ HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test",
		},
		{
			name:  "name the policy does not allow",
			setup: withUpstream("http", "api.test"),
			attack: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				out, err := runTool(t, "", "curl", "-sS", "--max-time", "10", "-x", "http://"+h.proxy, fmt.Sprintf("http://denied.test:%d/", p))
				want := fmt.Sprintf("cordon: blocked denied.test:%d (not in network.allow)\nto allow: add \"denied.test:%d\" to network.allow\n", p, p)
				if out != want {
					t.Errorf("403 body %q, want %q", out, want)
				}
				if err == nil && strings.HasPrefix(out, "cordon: blocked") {
					err = errors.New("blocked")
				}
				return out, err
			},
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.pol.allow("denied.test", p, loopback)
				return runTool(t, "", "curl", "-sS", "--max-time", "10", "-x", "http://"+h.proxy, fmt.Sprintf("http://denied.test:%d/", p))
			},
			want: "hello denied.test",
		},
		{
			name:   "CONNECT to an allowed name that resolves to loopback",
			setup:  resolvedKind("https", "loop.test", loopback),
			attack: proxyGet(nil, "https", ""),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.pol.allow(n, p, loopback) // pinned by network.hosts
				return proxyGet(nil, "https", "")(t, h, n, p)
			},
			want: "hello loop.test", reason: "loopback address (127.0.0.1)",
		},
		{
			name:   "CONNECT to an allowed name that resolves to the metadata address",
			setup:  resolved("meta.test", netip.MustParseAddr("169.254.169.254")),
			attack: proxyRaw("CONNECT meta.test:PORT HTTP/1.1\r\nHost: meta.test:PORT\r\n\r\n"),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.setResolve(n, publicAddr)
				return proxyGet(nil, "http", "")(t, h, n, p)
			},
			want: "hello meta.test", reason: "link-local address (169.254.169.254)",
			check: neverDialed("169.254.169.254"),
		},
		{
			name:  "relayed CONNECT: a CONNECT to the proxy inside a CONNECT to the proxy",
			setup: withUpstream("https", "api.test"),
			attack: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				_, pport := mustSplit(h.proxy)
				h.pol.allow("gw.test", pport, loopback) // the worst case: the proxy's own address is allowed
				return tunnelRaw(fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: gw.test:%d\r\n\r\n", n, p, pport))(t, h, "gw.test", pport)
			},
			allowed: proxyGet(nil, "https", ""),
			want:    "hello api.test",
			check: func(t *testing.T, h *harness) {
				h.rec.waitFor(t, 0, "for the relayed CONNECT", func(e audit.Event) bool { return e.Name == "gw.test" && e.Reason == reasonNestedProxy })
			},
		},
		{
			name:   "absolute-form request to an allowed name that resolves to loopback",
			setup:  resolved("loop.test", loopback),
			attack: proxyGet(nil, "http", ""),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.pol.allow(n, p, loopback)
				return proxyGet(nil, "http", "")(t, h, n, p)
			},
			want: "hello loop.test", reason: "loopback address (127.0.0.1)",
		},
		{
			name:    "origin-form request to the proxy",
			setup:   withUpstream("http", "api.test"),
			attack:  proxyRaw("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			allowed: proxyRaw("GET http://api.test:PORT/ HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test",
		},
	})
}

// TestExplicitStatuses checks the status codes for requests the proxy does not serve.
func TestExplicitStatuses(t *testing.T) {
	h := newHarness(t)
	for _, tt := range []struct {
		req  string
		code int
	}{
		{"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n", 405},
		{"GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", 405},
		{"GET ftp://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", 405},
		{"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n", 400},
		{"CONNECT api.test HTTP/1.1\r\nHost: api.test\r\n\r\n", 400},
		{"CONNECT api.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", 403},
		{"GET http://api.test/ HTTP/1.1\nHost: api.test\n\n", 400},
	} {
		c, err := net.Dial("tcp", h.proxy)
		if err != nil {
			t.Fatal(err)
		}
		code, body, err := rawHTTP(c, tt.req)
		if err != nil || code != tt.code {
			t.Errorf("%q: %d %q %v, want %d", tt.req, code, body, err, tt.code)
		}
	}
}

// TestExplicitResponseFraming checks that the proxy forwards response bodies by their framing
// (length, chunked, until close, none for HEAD) and closes the client connection after each.
func TestExplicitResponseFraming(t *testing.T) {
	h := newHarness(t)
	ln := listen(t)
	port := portOf(ln.Addr())
	h.pol.allow("api.test", port, loopback)
	held := make(chan struct{})
	defer close(held)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				switch req.URL.Path {
				case "/chunked":
					io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: v\r\n\r\n")
				case "/close":
					io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\nuntil close")
					return // the body ends when this server closes
				case "/continue":
					io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
				default:
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nKeep-Alive: timeout=5\r\n\r\nlength")
				}
				// A server that keeps its connection until the test ends: a proxy that waited for it
				// would take the whole test's time, far past the bound below.
				select {
				case <-held:
				case <-time.After(time.Minute):
				}
			}()
		}
	}()
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/length", "length"},
		{"GET", "/chunked", "hello world"},
		{"GET", "/close", "until close"},
		{"GET", "/continue", "done"},
		{"HEAD", "/length", ""},
	} {
		start := time.Now()
		req, _ := http.NewRequest(tt.method, fmt.Sprintf("http://api.test:%d%s", port, tt.path), nil)
		resp, err := h.proxyClient(nil).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != tt.want || !resp.Close {
			t.Errorf("%s %s: %q %v close=%v, want %q and Connection: close", tt.method, tt.path, b, err, resp.Close, tt.want)
		}
		if d := time.Since(start); d > 10*time.Second && tt.path != "/close" {
			t.Errorf("%s %s took %v: the proxy waited for the server to close", tt.method, tt.path, d)
		}
	}
}
