package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// answeringInterceptor terminates TLS with the test PKI's leaf (or reads plain HTTP) and answers every
// request itself with what it saw, so the tests can check what reached the interceptor and what did
// not. It also dials the upstream through DialUpstream once per connection, as the real one does.
type answeringInterceptor struct {
	g    *Gateway
	leaf tls.Certificate
	want map[string]bool
	// onlyTLS are the wanted names inspected for TLS alone (network.tls.inspect).
	onlyTLS map[string]bool

	mu     sync.Mutex
	served []string
	dialed []string
}

func (a *answeringInterceptor) Wants(name string) bool { return a.want[name] }

func (a *answeringInterceptor) OnlyTLS(name string) bool { return a.onlyTLS[name] }

func (a *answeringInterceptor) ServeTLS(ctx context.Context, c net.Conn, name string, port uint16) error {
	tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{a.leaf}})
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	return a.answer(ctx, tc, "tls", name, port)
}

func (a *answeringInterceptor) ServePlain(ctx context.Context, c net.Conn, name string, port uint16) error {
	return a.answer(ctx, c, "plain", name, port)
}

func (a *answeringInterceptor) answer(ctx context.Context, c net.Conn, how, name string, port uint16) error {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return err
	}
	dialed := "dial ok"
	if up, err := a.g.DialUpstream(ctx, name, port); err != nil {
		dialed = "dial: " + err.Error()
	} else {
		up.Close()
	}
	line := fmt.Sprintf("%s %s:%d %s %s %s", how, name, port, req.Method, req.Host, req.URL.Path)
	a.mu.Lock()
	a.served = append(a.served, line)
	a.dialed = append(a.dialed, dialed)
	a.mu.Unlock()
	body := line + "\n" + dialed + "\n"
	_, err = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	return err
}

// TestInterceptHook checks the hand-over to an interceptor: the ClientHello and the first request
// head reach it intact, after the same judging as a relayed connection (a mismatched SNI or Host never
// reaches it), protocols it cannot read are refused, and hosts it does not want are relayed as before.
func TestInterceptHook(t *testing.T) {
	ic := &answeringInterceptor{want: map[string]bool{"api.test": true}}
	h := newHarness(t, func(c *Config) { c.Intercept = ic })
	ic.g, ic.leaf = h.g, h.pki.leaf
	up := h.httpsUpstream()
	for _, name := range []string{"api.test", "public.test"} {
		h.pol.allow(name, up.port, loopback)
		h.pol.allow(name, 80, loopback)
	}

	// TLS through the transparent path: the interceptor terminates it and answers.
	got, err := h.tlsGet("api.test", up.port, &tls.Config{ServerName: "api.test"})
	if err != nil || !strings.Contains(got, fmt.Sprintf("tls api.test:%d GET api.test:%d /", up.port, up.port)) || !strings.Contains(got, "dial ok") {
		t.Fatalf("intercepted TLS: %q, %v", got, err)
	}
	// A host it does not want is relayed to the upstream itself.
	if got, err := h.tlsGet("public.test", up.port, &tls.Config{ServerName: "public.test"}); err != nil || strings.Contains(got, "tls public.test") {
		t.Fatalf("relayed TLS: %q, %v", got, err)
	}
	// The SNI must still match the name: the interceptor never sees this one.
	if got, err := h.tlsGet("api.test", up.port, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true}); err == nil {
		t.Fatalf("mismatched SNI reached somebody: %q", got)
	}
	// Plain HTTP through the transparent path, and through the explicit proxy (absolute form).
	c, err := h.dialMapped("api.test", 80)
	if err != nil {
		t.Fatal(err)
	}
	status, body, err := rawHTTP(c, "GET /x HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	if err != nil || status != 200 || !strings.Contains(body, "plain api.test:80 GET api.test /x") {
		t.Fatalf("intercepted HTTP: %d %q %v", status, body, err)
	}
	c, err = net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	status, body, err = rawHTTP(c, "GET http://api.test/y HTTP/1.1\r\nHost: api.test\r\n\r\n")
	if err != nil || status != 200 || !strings.Contains(body, "plain api.test:80 GET api.test /y") {
		t.Fatalf("intercepted proxy request: %d %q %v", status, body, err)
	}
	// CONNECT, then TLS inside the tunnel.
	c, err = net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", up.port, up.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "api.test", RootCAs: h.pki.pool})
	got, err = rawExchange(tc, fmt.Sprintf("GET /z HTTP/1.1\r\nHost: api.test:%d\r\nConnection: close\r\n\r\n", up.port))
	if err != nil || !strings.Contains(got, "/z") {
		t.Fatalf("intercepted CONNECT: %q %v", got, err)
	}
	// Something that is neither TLS nor HTTP is refused for an intercepted host.
	c, err = h.dialMapped("api.test", up.port)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rawExchange(c, "SSH-2.0-OpenSSH_9.2\r\n"); err == nil && got != "" {
		t.Fatalf("raw protocol to an intercepted host got an answer: %q", got)
	}
	h.rec.waitFor(t, 0, "refusal of the raw protocol", isDeny("api.test", up.port, reasonNotHTTP))

	ic.mu.Lock()
	defer ic.mu.Unlock()
	if len(ic.served) != 4 {
		t.Errorf("interceptor served %d connections, want 4: %q", len(ic.served), ic.served)
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestDialUpstreamRefuses checks the interceptor's dialer keeps the relay's rules: the policy must
// allow the name and port, and a name resolving to loopback is refused unless pinned there.
func TestDialUpstreamRefuses(t *testing.T) {
	h := newHarness(t)
	up := h.httpUpstream()
	h.pol.allow("api.test", up.port, loopback) // pinned: may reach loopback
	h.pol.allow("loop.test", up.port, netip.Addr{})
	h.setResolve("loop.test", loopback)
	ctx := context.Background()
	if c, err := h.g.DialUpstream(ctx, "api.test", up.port); err != nil {
		t.Fatalf("allowed, pinned: %v", err)
	} else {
		c.Close()
	}
	for _, tc := range []struct {
		name string
		port uint16
		want string
	}{
		{"denied.test", up.port, "not in network.allow"},
		{"api.test", up.port + 1, "not in network.allow"},
		{"loop.test", up.port, "loopback"},
	} {
		if c, err := h.g.DialUpstream(ctx, tc.name, tc.port); err == nil {
			c.Close()
			t.Errorf("DialUpstream(%s:%d) succeeded", tc.name, tc.port)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DialUpstream(%s:%d): %v, want %q", tc.name, tc.port, err, tc.want)
		}
	}
}

// TestInspectOnlyTLS: a host inspected for SNI/Host agreement alone has its TLS intercepted, on the
// transparent path and in a CONNECT tunnel, while another protocol to it (ssh, whose server speaks
// first) is relayed as for any host instead of being refused.
func TestInspectOnlyTLS(t *testing.T) {
	ic := &answeringInterceptor{want: map[string]bool{"own.test": true}, onlyTLS: map[string]bool{"own.test": true}}
	h := newHarness(t, func(c *Config) { c.Intercept = ic })
	ic.g, ic.leaf = h.g, h.pki.leaf
	tlsUp := h.httpsUpstream()
	sshUp := h.echoUpstream("SSH-2.0-upstream\r\n")
	h.pol.allow("own.test", tlsUp.port, loopback)
	h.pol.allow("own.test", sshUp.port, loopback)

	got, err := h.tlsGet("own.test", tlsUp.port, &tls.Config{ServerName: "own.test"})
	if err != nil || !strings.Contains(got, fmt.Sprintf("tls own.test:%d GET own.test:%d /", tlsUp.port, tlsUp.port)) {
		t.Fatalf("inspected TLS did not reach the interceptor: %q, %v", got, err)
	}
	c, err := h.dialMapped("own.test", sshUp.port)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rawExchange(c, "SSH-2.0-OpenSSH_9.2\r\n"); err != nil || got != "SSH-2.0-upstream\r\nSSH-2.0-OpenSSH_9.2\r\n" {
		t.Fatalf("ssh to an inspected host: %q, %v (want the upstream's greeting and the echo)", got, err)
	}
	c, err = net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT own.test:%d HTTP/1.1\r\nHost: own.test:%d\r\n\r\n", tlsUp.port, tlsUp.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "own.test", RootCAs: h.pki.pool})
	got, err = rawExchange(tc, fmt.Sprintf("GET /z HTTP/1.1\r\nHost: own.test:%d\r\nConnection: close\r\n\r\n", tlsUp.port))
	if err != nil || !strings.Contains(got, "tls own.test") || !strings.Contains(got, "/z") {
		t.Fatalf("inspected TLS in a CONNECT tunnel: %q %v", got, err)
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if len(ic.served) != 2 {
		t.Errorf("interceptor served %d connections, want the 2 TLS ones: %q", len(ic.served), ic.served)
	}
}
