package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// tlsGet opens a TLS connection to name:port the way a sandboxed program does (its mapped address,
// through the transparent listener), with cfg, sends one request and reads the answer.
func (h *harness) tlsGet(name string, port uint16, cfg *tls.Config) (string, error) {
	c, err := h.dialMapped(name, port)
	if err != nil {
		return "", err
	}
	if cfg.RootCAs == nil && !cfg.InsecureSkipVerify {
		cfg.RootCAs = h.pki.pool
	}
	tc := tls.Client(c, cfg)
	return rawExchange(tc, fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", name, port))
}

// connectTo is curl's --connect-to argument that sends name:port to its transparent listener.
func (h *harness) connectTo(name string, port uint16) string {
	host, lport, _ := net.SplitHostPort(h.transparent(h.mapped(name, port)))
	return fmt.Sprintf("%s:%d:%s:%s", name, port, host, lport)
}

func isAllow(name string, port uint16) func(audit.Event) bool {
	return func(e audit.Event) bool { return e.Name == name && e.Port == port && e.Decision == audit.Allow }
}

func isDeny(name string, port uint16, reason string) func(audit.Event) bool {
	return func(e audit.Event) bool {
		return e.Name == name && e.Port == port && e.Decision == audit.Deny && strings.Contains(e.Reason, reason)
	}
}

// TestTransparentAllowed sends real clients (Go's net/http with HTTP/2, curl, openssl s_client, a
// raw TCP client) through the transparent path to the tests' own upstreams, and checks the answers
// and the audit events.
func TestTransparentAllowed(t *testing.T) {
	h := newHarness(t)
	tlsUp, plainUp, echoUp := h.httpsUpstream(), h.httpUpstream(), h.echoUpstream("")
	for _, p := range []uint16{tlsUp.port, plainUp.port, echoUp.port} {
		h.pol.allow("api.test", p, loopback)
	}
	runAllowed(t, h, []allowedCase{
		{
			name: "Go net/http over TLS", port: tlsUp.port,
			run: func(t *testing.T) (string, error) {
				_, body, err := get(h.transparentClient(nil), fmt.Sprintf("https://api.test:%d/x", tlsUp.port), "")
				return body, err
			},
			want: "hello api.test", detail: map[string]string{"proto": "tls", "sni": "api.test", "via": "transparent",
				"alpn": "h2,http/1.1"},
		},
		{
			name: "Go net/http plain HTTP, query not logged", port: plainUp.port,
			run: func(t *testing.T) (string, error) {
				_, body, err := get(h.transparentClient(nil), fmt.Sprintf("http://api.test:%d/p?token=secret", plainUp.port), "")
				return body, err
			},
			want: "hello api.test", detail: map[string]string{"proto": "http", "method": "GET", "path": "/p",
				"http_host": fmt.Sprintf("api.test:%d", plainUp.port)},
		},
		{
			name: "curl https", port: tlsUp.port,
			run: func(t *testing.T) (string, error) {
				return runTool(t, "", "curl", "-sS", "--max-time", "10", "--cacert", h.pki.caFile,
					"--connect-to", h.connectTo("api.test", tlsUp.port), fmt.Sprintf("https://api.test:%d/", tlsUp.port))
			},
			want: "hello api.test", detail: map[string]string{"proto": "tls", "sni": "api.test", "alpn": "h2,http/1.1"},
		},
		{
			name: "curl http with a body", port: plainUp.port,
			run: func(t *testing.T) (string, error) {
				return runTool(t, "", "curl", "-sS", "--max-time", "10", "--data-binary", "0123456789",
					"--connect-to", h.connectTo("api.test", plainUp.port), fmt.Sprintf("http://api.test:%d/post", plainUp.port))
			},
			want: "POST /post body=10", detail: map[string]string{"proto": "http", "method": "POST"},
		},
		{
			name: "openssl s_client", port: tlsUp.port,
			run: func(t *testing.T) (string, error) {
				return runTool(t, "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n", "openssl", "s_client",
					"-quiet", "-ign_eof", "-connect", h.transparent(h.mapped("api.test", tlsUp.port)), "-servername", "api.test",
					"-CAfile", h.pki.caFile, "-verify_return_error")
			},
			want: "hello api.test", detail: map[string]string{"proto": "tls", "sni": "api.test"},
		},
		{
			name: "raw TCP", port: echoUp.port,
			run: func(t *testing.T) (string, error) {
				c, err := h.dialMapped("api.test", echoUp.port)
				if err != nil {
					return "", err
				}
				return rawExchange(c, "ping\x00binary\n")
			},
			want: "ping\x00binary\n", detail: map[string]string{"proto": "tcp", "upstream": fmt.Sprintf("127.0.0.1:%d", echoUp.port)},
		},
	})
}

// attack is one way through the gateway that must fail, with the allowed variant that must succeed
// through the same gateway (so the test shows the check, not a broken path, stopped it).
type attack struct {
	name string
	// setup configures policy and resolver, and returns the upstream's name and port.
	setup   func(h *harness) (string, uint16)
	attack  func(t *testing.T, h *harness, name string, port uint16) (string, error)
	allowed func(t *testing.T, h *harness, name string, port uint16) (string, error)
	// want is in the allowed variant's output; reason in the attack's audit event (empty: no event
	// for the name is expected, e.g. an unmapped address).
	want, reason string
	// check runs after both, for what else must hold (the upstream never saw the attack).
	check func(t *testing.T, h *harness)
}

func runAttacks(t *testing.T, attacks []attack) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			h := newHarness(t)
			name, port := a.setup(h)
			from := h.rec.count()
			out, err := a.attack(t, h, name, port)
			if err == nil {
				t.Fatalf("attack got through: %q", out)
			}
			if a.reason != "" {
				h.rec.waitFor(t, from, "denying "+name, isDeny(name, port, a.reason))
			}
			out, err = a.allowed(t, h, name, port)
			if err != nil || !strings.Contains(out, a.want) {
				t.Fatalf("allowed variant failed: %q, %v", out, err)
			}
			if a.check != nil {
				a.check(t, h)
			}
		})
	}
}

// withUpstream returns a setup that starts an upstream of the given kind for name, pinned to
// loopback, and also allows the names in also on the same port.
func withUpstream(kind, name string, also ...string) func(h *harness) (string, uint16) {
	return func(h *harness) (string, uint16) {
		var u *upstream
		switch kind {
		case "https":
			u = h.httpsUpstream()
		case "http":
			u = h.httpUpstream()
		default:
			u = h.echoUpstream("")
		}
		for _, n := range append([]string{name}, also...) {
			h.pol.allow(n, u.port, loopback)
		}
		return name, u.port
	}
}

func httpVia(host string) func(t *testing.T, h *harness, name string, port uint16) (string, error) {
	return func(t *testing.T, h *harness, name string, port uint16) (string, error) {
		if host != "" {
			host = strings.ReplaceAll(host, "PORT", fmt.Sprint(port))
		}
		code, body, err := get(h.transparentClient(nil), fmt.Sprintf("http://%s:%d/", name, port), host)
		if err == nil && code != 200 {
			return body, fmt.Errorf("status %d: %s", code, body)
		}
		return body, err
	}
}

func rawVia(req string) func(t *testing.T, h *harness, name string, port uint16) (string, error) {
	return func(t *testing.T, h *harness, name string, port uint16) (string, error) {
		c, err := h.dialMapped(name, port)
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

func tlsVia(tweak func(*tls.Config)) func(t *testing.T, h *harness, name string, port uint16) (string, error) {
	return func(t *testing.T, h *harness, name string, port uint16) (string, error) {
		cfg := &tls.Config{ServerName: name}
		if tweak != nil {
			tweak(cfg)
		}
		return h.tlsGet(name, port, cfg)
	}
}

// resolved sets up a name the policy allows without pinning, whose resolver answers addr, with an
// HTTP upstream reachable at publicAddr through the test dialer.
func resolved(name string, addr netip.Addr) func(h *harness) (string, uint16) {
	return resolvedKind("http", name, addr)
}

func resolvedKind(kind, name string, addr netip.Addr) func(h *harness) (string, uint16) {
	return func(h *harness) (string, uint16) {
		u := h.httpUpstream()
		if kind == "https" {
			u = h.httpsUpstream()
		}
		h.pol.allow(name, u.port, netip.Addr{})
		h.setResolve(name, addr)
		h.publicRoute(u.port)
		return name, u.port
	}
}

func neverDialed(addr string) func(t *testing.T, h *harness) {
	return func(t *testing.T, h *harness) {
		for _, d := range h.dialedAddrs() {
			if strings.HasPrefix(d, addr+":") {
				t.Errorf("gateway dialed %s", d)
			}
		}
	}
}

// TestTransparentAttacks is the attack table of the transparent path.
func TestTransparentAttacks(t *testing.T) {
	runAttacks(t, []attack{
		{
			name:    "SNI names another allowed host (domain fronting)",
			setup:   withUpstream("https", "api.test", "evil.test"),
			attack:  tlsVia(func(c *tls.Config) { c.ServerName = "evil.test" }),
			allowed: tlsVia(nil),
			want:    "hello api.test", reason: reasonSNIMismatch,
		},
		{
			name:    "TLS without SNI",
			setup:   withUpstream("https", "api.test"),
			attack:  tlsVia(func(c *tls.Config) { c.ServerName, c.InsecureSkipVerify = "", true }),
			allowed: tlsVia(func(c *tls.Config) { c.InsecureSkipVerify = true }),
			want:    "hello api.test", reason: reasonNoSNI,
		},
		{
			name:  "ECH hides the name",
			setup: withUpstream("https", "api.test"),
			attack: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				return tlsVia(func(c *tls.Config) {
					c.MinVersion, c.EncryptedClientHelloConfigList = tls.VersionTLS13, echConfigList(t, name)
				})(t, h, name, port)
			},
			allowed: tlsVia(func(c *tls.Config) { c.MinVersion = tls.VersionTLS13 }),
			want:    "hello api.test", reason: reasonECH,
		},
		{
			name:    "Host header names another allowed host",
			setup:   withUpstream("http", "api.test", "evil.test"),
			attack:  httpVia("evil.test:PORT"),
			allowed: httpVia(""),
			want:    "hello api.test", reason: reasonHostMismatch,
		},
		{
			name:    "absolute URI names another host",
			setup:   withUpstream("http", "api.test", "evil.test"),
			attack:  rawVia("GET http://evil.test:PORT/ HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			allowed: rawVia("GET http://api.test:PORT/ HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test", reason: reasonURIMismatch,
		},
		{
			name:  "later request on a kept-alive connection names another host",
			setup: withUpstream("http", "api.test", "evil.test"),
			attack: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				return keepAlive(h, name, port, "evil.test")
			},
			allowed: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				return keepAlive(h, name, port, "api.test")
			},
			want: "hello api.test", reason: reasonHostMismatch,
		},
		{
			name:    "request smuggling: Content-Length and Transfer-Encoding",
			setup:   withUpstream("http", "api.test"),
			attack:  rawVia("POST / HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
			allowed: rawVia("POST / HTTP/1.1\r\nHost: api.test:PORT\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
			want:    "hello api.test", reason: reasonBadRequest,
		},
		{
			name:    "leading blank line before the request line",
			setup:   withUpstream("http", "api.test", "evil.test"),
			attack:  rawVia("\r\nGET / HTTP/1.1\r\nHost: evil.test:PORT\r\n\r\n"),
			allowed: rawVia("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test", reason: reasonBadRequest,
		},
		{
			name:    "lower-case HTTP version (a lenient server's HTTP)",
			setup:   withUpstream("http", "api.test", "evil.test"),
			attack:  rawVia("GET / http/1.1\r\nHost: evil.test:PORT\r\n\r\n"),
			allowed: rawVia("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test", reason: reasonBadRequest,
		},
		{
			name:    "cleartext HTTP/2 (no Host header to check)",
			setup:   withUpstream("http", "api.test"),
			attack:  rawVia("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
			allowed: rawVia("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test", reason: reasonBadRequest,
		},
		{
			name:    "upgrade on plain HTTP",
			setup:   withUpstream("http", "api.test"),
			attack:  rawVia("GET / HTTP/1.1\r\nHost: api.test:PORT\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
			allowed: rawVia("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n"),
			want:    "hello api.test", reason: reasonUpgrade,
		},
		{
			name:  "raw IP address the DNS never handed out",
			setup: withUpstream("https", "api.test"),
			attack: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				_, body, err := get(h.transparentClient(nil), fmt.Sprintf("https://127.0.0.1:%d/", port), "")
				return body, err
			},
			allowed: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				_, body, err := get(h.transparentClient(nil), fmt.Sprintf("https://%s:%d/", name, port), "")
				return body, err
			},
			want: "hello api.test",
			check: func(t *testing.T, h *harness) {
				h.rec.waitFor(t, 0, "for the unmapped address", func(e audit.Event) bool {
					return e.Reason == reasonUnmapped && e.Name == "" && e.Detail["addr"] == "127.0.0.1"
				})
			},
		},
		{
			name:  "metadata service address",
			setup: withUpstream("http", "api.test"),
			attack: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				c, err := net.Dial("tcp", h.transparent(netip.MustParseAddrPort("169.254.169.254:80")))
				if err != nil {
					return "", err
				}
				code, body, err := rawHTTP(c, "GET /latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n")
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d", code)
				}
				return body, err
			},
			allowed: httpVia(""),
			want:    "hello api.test",
			check:   neverDialed("169.254.169.254"),
		},
		{
			name:   "allowed name that resolves to the metadata address",
			setup:  resolved("meta.test", netip.MustParseAddr("169.254.169.254")),
			attack: httpVia(""),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.setResolve(n, publicAddr)
				return httpVia("")(t, h, n, p)
			},
			want: "hello meta.test", reason: "link-local address (169.254.169.254)",
			check: neverDialed("169.254.169.254"),
		},
		{
			name:   "allowed name that resolves to loopback",
			setup:  resolved("loop.test", loopback),
			attack: httpVia(""),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.pol.allow(n, p, loopback) // pinned by network.hosts: now loopback is intended
				return httpVia("")(t, h, n, p)
			},
			want: "hello loop.test", reason: "loopback address (127.0.0.1)",
		},
		{
			name:   "allowed name that resolves to a private address",
			setup:  resolved("loop.test", netip.MustParseAddr("192.168.1.1")),
			attack: httpVia(""),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.setResolve(n, publicAddr)
				return httpVia("")(t, h, n, p)
			},
			want: "hello loop.test", reason: "private address (192.168.1.1)",
			check: neverDialed("192.168.1.1"),
		},
		{
			name:   "allowed name that resolves to this host's own address",
			setup:  resolved("own.test", ownAddr),
			attack: httpVia(""),
			allowed: func(t *testing.T, h *harness, n string, p uint16) (string, error) {
				h.setResolve(n, publicAddr)
				return httpVia("")(t, h, n, p)
			},
			want: "hello own.test", reason: "this host's own address",
			check: neverDialed(ownAddr.String()),
		},
		{
			name:  "relayed CONNECT through an allowed name that leads to the proxy itself",
			setup: func(h *harness) (string, uint16) { return withUpstream("https", "api.test")(h) },
			attack: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				_, pport := mustSplit(h.proxy)
				h.pol.allow("gw.test", pport, loopback)
				c, err := h.dialMapped("gw.test", pport)
				if err != nil {
					return "", err
				}
				code, body, err := rawHTTP(c, fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: gw.test:%d\r\n\r\n", name, port, pport))
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d", code)
				}
				return body, err
			},
			allowed: func(t *testing.T, h *harness, name string, port uint16) (string, error) {
				_, body, err := get(h.proxyClient(nil), fmt.Sprintf("https://%s:%d/", name, port), "")
				return body, err
			},
			want: "hello api.test",
			check: func(t *testing.T, h *harness) {
				h.rec.waitFor(t, 0, "for the relayed CONNECT", func(e audit.Event) bool {
					return e.Name == "gw.test" && e.Decision == audit.Deny && e.Reason == reasonNestedProxy
				})
			},
		},
	})
}

func mustSplit(addr string) (string, uint16) {
	ap := netip.MustParseAddrPort(addr)
	return ap.Addr().String(), ap.Port()
}

// keepAlive sends two requests on one connection, the second with Host host once the first is
// answered, and returns both answers (an error for one that is not 200 OK).
func keepAlive(h *harness, name string, port uint16, host string) (string, error) {
	c, err := h.dialMapped(name, port)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var out string
	for i, hh := range []string{name, host} {
		if _, err := fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", i, hh, port); err != nil {
			return out, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out += string(b) + "\n"
		if err != nil {
			return out, err
		}
		if resp.StatusCode != http.StatusOK {
			return out, fmt.Errorf("request %d: %s", i, resp.Status)
		}
	}
	return out, nil
}

// TestTransparentKeepAliveSecondRequest checks that on the refused kept-alive connection the
// upstream answered the first request and never saw the second.
func TestTransparentKeepAliveSecondRequest(t *testing.T) {
	h := newHarness(t)
	u := h.httpUpstream()
	h.pol.allow("api.test", u.port, loopback)
	h.pol.allow("evil.test", u.port, loopback)
	out, err := keepAlive(h, "api.test", u.port, "evil.test")
	if err == nil || !strings.Contains(out, fmt.Sprintf("hello api.test:%d GET /0", u.port)) {
		t.Fatalf("want the first answer and then a 403: %q, %v", out, err)
	}
	h.rec.waitFor(t, 0, "refusing the second request", func(e audit.Event) bool {
		return e.Reason == reasonHostMismatch && strings.Contains(e.Detail["refused_request"], "evil.test")
	})
	if seen := u.seen(); !slices.Equal(seen, []string{fmt.Sprintf("api.test:%d", u.port)}) {
		t.Errorf("upstream saw %q", seen)
	}
}

// TestTransparentPolicyDenial checks what a user sees for a name the policy does not allow: a 403
// naming host, port and the fix for plain HTTP, and a reset for TLS and TCP; and a notification for
// every refusal either way (telling the human once per host and port is the gateway's notifier's job,
// tested there). Allowing the name then lets the same probes through.
func TestTransparentPolicyDenial(t *testing.T) {
	h := newHarness(t)
	tlsUp, plainUp, echoUp := h.httpsUpstream(), h.httpUpstream(), h.echoUpstream("")

	code, body, err := get(h.transparentClient(nil), fmt.Sprintf("http://denied.test:%d/", plainUp.port), "")
	wantBody := fmt.Sprintf("cordon: blocked denied.test:%d (not in network.allow)\nto allow: add \"denied.test:%d\" to network.allow\n",
		plainUp.port, plainUp.port)
	if err != nil || code != 403 || body != wantBody {
		t.Fatalf("plain HTTP: %d %q %v; want 403 %q", code, body, err, wantBody)
	}
	for range 3 {
		if out, err := h.tlsGet("denied.test", tlsUp.port, &tls.Config{ServerName: "denied.test"}); err == nil {
			t.Fatalf("TLS to a denied name: %q", out)
		}
		c, err := h.dialMapped("denied.test", echoUp.port)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := rawExchange(c, "ping\n"); err == nil && out != "" {
			t.Fatalf("TCP to a denied name: %q", out)
		}
	}
	h.rec.waitFor(t, 0, "TLS denial", isDeny("denied.test", tlsUp.port, "not in network.allow"))
	h.rec.waitFor(t, 0, "TCP denial", isDeny("denied.test", echoUp.port, "not in network.allow"))
	want := []string{fmt.Sprintf("denied.test:%d not in network.allow", plainUp.port)}
	for range 3 {
		want = append(want,
			fmt.Sprintf("denied.test:%d not in network.allow", tlsUp.port),
			fmt.Sprintf("denied.test:%d not in network.allow", echoUp.port))
	}
	got := h.notifications()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("notifications %q, want %q", got, want)
	}

	for _, p := range []uint16{tlsUp.port, plainUp.port, echoUp.port} {
		h.pol.allow("denied.test", p, loopback)
	}
	if _, body, err := get(h.transparentClient(nil), fmt.Sprintf("http://denied.test:%d/", plainUp.port), ""); err != nil || !strings.HasPrefix(body, "hello") {
		t.Errorf("allowed plain HTTP: %q %v", body, err)
	}
	if out, err := h.tlsGet("denied.test", tlsUp.port, &tls.Config{ServerName: "denied.test"}); err != nil || !strings.Contains(out, "hello") {
		t.Errorf("allowed TLS: %q %v", out, err)
	}
	c, _ := h.dialMapped("denied.test", echoUp.port)
	if out, err := rawExchange(c, "ping\n"); err != nil || out != "ping\n" {
		t.Errorf("allowed TCP: %q %v", out, err)
	}
}

// TestTransparentServerSpeaksFirst checks a protocol where the server talks first (SMTP, MySQL): an
// allowed connection gets the greeting at once, without waiting for the client, and the client's
// reply is relayed; a denied one is reset after SniffTimeout.
func TestTransparentServerSpeaksFirst(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SniffTimeout = 200 * time.Millisecond })
	u := h.echoUpstream("220 hello\r\n")
	h.pol.allow("api.test", u.port, loopback)
	c, err := h.dialMapped("api.test", u.port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	greeting := make([]byte, 11)
	start := time.Now()
	if _, err := io.ReadFull(c, greeting); err != nil || string(greeting) != "220 hello\r\n" {
		t.Fatalf("greeting %q, %v", greeting, err)
	}
	if out, err := rawExchange(c, "EHLO me\r\n"); err != nil || out != "EHLO me\r\n" {
		t.Fatalf("reply %q, %v", out, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("greeting took %v", d)
	}

	d, err := h.dialMapped("denied.test", u.port)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_ = d.SetDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	if n, err := d.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("denied server-first connection: read %d, %v", n, err)
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 3*time.Second {
		t.Errorf("reset after %v, want about the 200ms sniff timeout", el)
	}
}

// TestTransparentHalfClose checks that each direction's end is passed on as a half-close: the client
// shuts its sending side, the upstream reads to EOF and only then answers.
func TestTransparentHalfClose(t *testing.T) {
	h := newHarness(t)
	ln := listen(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c) // until the client's half-close arrives
		fmt.Fprintf(c, "got %d bytes", n)
	}()
	port := portOf(ln.Addr())
	h.pol.allow("api.test", port, loopback)
	c, err := h.dialMapped("api.test", port)
	if err != nil {
		t.Fatal(err)
	}
	out, err := rawExchange(c, strings.Repeat("\x00", 100000))
	if err != nil || out != "got 100000 bytes" {
		t.Fatalf("got %q, %v", out, err)
	}
	e := h.rec.waitFor(t, 0, "allow", isAllow("api.test", port))
	if e.BytesOut != 100000 || e.BytesIn != int64(len(out)) {
		t.Errorf("bytes out %d in %d", e.BytesOut, e.BytesIn)
	}
}

// TestTransparentStops checks that stopping the gateway closes connections it is relaying and
// returns from Transparent, leaving no file descriptor behind.
func TestTransparentStops(t *testing.T) {
	h := newHarness(t)
	u := h.echoUpstream("")
	h.pol.allow("api.test", u.port, loopback)
	ctx, cancel := context.WithCancel(context.Background())
	ln := served(t)
	before := openFDs(t)
	h.mu.Lock()
	h.dsts[ln.Addr().String()] = h.mapped("api.test", u.port)
	h.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- h.g.Transparent(ctx, ln) }()
	var conns []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "x\x00"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Transparent: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Transparent did not return")
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection still open after stop: %d %v", n, err)
		}
		c.Close()
	}
	if n := h.rec.count(); n != 20 {
		t.Errorf("%d events for 20 connections, want one each", n)
	}
	// The listener and every relayed connection are gone (the upstream's side closes as it sees EOF).
	// The test's echo upstream copies with io.Copy, whose splice pipes sit in a sync.Pool until a
	// collection finalises them (the gateway's own relays keep none): collect first.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.GC(); openFDs(t) >= before; runtime.GC() {
		if time.Now().After(deadline) {
			t.Fatalf("%d file descriptors open, %d before the gateway started", openFDs(t), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

// TestTransparentClientResetIsNotARefusal checks that a plain-HTTP client that resets its kept-alive
// connection after an answer (as one does that closes with part of the answer unread) leaves an
// allowed event with the error, not a refusal, while a malformed second head on the same kind of
// connection is still refused.
func TestTransparentClientResetIsNotARefusal(t *testing.T) {
	h := newHarness(t)
	u := h.httpUpstream()
	h.pol.allow("api.test", u.port, loopback)
	for _, tc := range []struct {
		name, second string
		decision     audit.Decision
		reason       string
	}{
		{"reset", "", audit.Allow, ""},
		{"malformed", "GET / HTTP/1.1\nHost: api.test\n\n", audit.Deny, reasonBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := h.rec.count()
			c, err := h.dialMapped("api.test", u.port)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", u.port); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if tc.second != "" {
				if _, err := io.WriteString(c, tc.second); err != nil {
					t.Fatal(err)
				}
				_, _ = io.ReadAll(c)
			}
			reset(c)
			ev := h.rec.waitFor(t, from, "for the connection", func(e audit.Event) bool { return e.Name == "api.test" })
			if ev.Decision != tc.decision || ev.Reason != tc.reason {
				t.Errorf("event %s %q (error %q), want %s %q", ev.Decision, ev.Reason, ev.Detail["error"], tc.decision, tc.reason)
			}
		})
	}
}

// TestIdleHandlersEndWithTheGateway: a handler goroutine that waits for another connection after
// serving one (it keeps its grown stack for the next) serves the next connection, and ends as soon
// as the gateway stops, so Transparent returns at once rather than after the handler's idle time.
func TestIdleHandlersEndWithTheGateway(t *testing.T) {
	up := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
	})}
	go func() { _ = srv.Serve(up) }()
	t.Cleanup(func() { _ = srv.Close() })
	mapped := netip.MustParseAddr("10.88.0.1")
	g, err := New(Config{
		Policy: benchPolicy{}, Names: benchNames{mapped}, Recorder: &countRecorder{},
		LookupNetIP: func(context.Context, string) ([]netip.Addr, error) { return nil, nil },
		OrigDst:     func(net.Conn) (netip.AddrPort, error) { return netip.AddrPortFrom(mapped, portOf(up.Addr())), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	ln := served(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Transparent(ctx, ln) }()
	for i := range 3 { // the second and third go to the first's handler, idle by then
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("HEAD / HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.HasPrefix(b, []byte("HTTP/1.1 200")) {
			t.Fatalf("connection %d: %q, %v", i, b, err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the last handler is idle
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil || time.Since(start) > idleHandler/2 {
			t.Errorf("Transparent returned %v after %s, want nil at once", err, time.Since(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Transparent did not return after its context ended")
	}
}
