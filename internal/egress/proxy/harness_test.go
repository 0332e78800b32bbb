package proxy

import (
	"bufio"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testpki"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
)

// Addresses the tests' fake resolver hands out as "public" (TEST-NET-3, which the gateway may dial)
// and the test dialer then sends to a loopback upstream; and one that counts as this host's own.
var (
	publicAddr = netip.MustParseAddr("203.0.113.10")
	ownAddr    = netip.MustParseAddr("203.0.113.99")
	loopback   = netip.MustParseAddr("127.0.0.1")
)

// testPolicy allows exactly the name:port pairs it was told, with the Decision it was given.
type testPolicy struct {
	mu    sync.Mutex
	rules map[string]egress.Decision
}

func (p *testPolicy) allow(name string, port uint16, pin netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules[fmt.Sprintf("%s:%d", name, port)] = egress.Decision{Allow: true,
		Rule: fmt.Sprintf("network.allow[%d]", len(p.rules)), Upstream: pin}
}

func (p *testPolicy) Decide(host string, port uint16) egress.Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.rules[fmt.Sprintf("%s:%d", host, port)]; ok {
		return d
	}
	return egress.Decision{Rule: "default", Reason: "not in network.allow",
		Fix: fmt.Sprintf(`add "%s:%d" to network.allow`, host, port)}
}

func (p *testPolicy) Known(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.rules {
		if strings.HasPrefix(k, host+":") {
			return true
		}
	}
	return false
}

// testNames is the sandbox DNS's name mapping: 10.88.0.0/16, one address per name.
type testNames struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
}

func (n *testNames) Assign(name string) (netip.Addr, netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byName[name]; ok {
		return a, netip.Addr{}, nil
	}
	i := len(n.byName) + 1
	a := netip.AddrFrom4([4]byte{10, 88, byte(i >> 8), byte(i)})
	n.byName[name], n.byAddr[a] = a, name
	return a, netip.Addr{}, nil
}

func (n *testNames) Lookup(a netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := n.byAddr[a]
	return name, ok
}

// recorder collects audit events.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Record(e audit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// waitFor returns the first event, counted from index from, that matches, waiting for it.
func (r *recorder) waitFor(t testing.TB, from int, what string, match func(audit.Event) bool) audit.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		for _, e := range r.events[min(from, len(r.events)):] {
			if match(e) {
				r.mu.Unlock()
				return e
			}
		}
		all := slices.Clone(r.events)
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no audit event %s; have %+v", what, all)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// harness is one gateway with its fake policy, names, resolver and dialer, an explicit proxy
// listener, and transparent listeners made on demand (one per original destination, which is what
// the test's OrigDst reports for connections to it).
type harness struct {
	t     testing.TB
	pki   *testPKI
	pol   *testPolicy
	names *testNames
	rec   *recorder
	g     *Gateway
	ctx   context.Context
	proxy string // explicit proxy address

	serveTransparent func(net.Listener)

	mu       sync.Mutex
	dsts     map[string]netip.AddrPort // transparent listener address -> original destination
	byDst    map[netip.AddrPort]string
	resolve  map[string][]netip.Addr
	public   map[netip.AddrPort]string // public address the test dialer sends to loopback
	dialed   []string
	notified []string
}

func newHarness(t testing.TB, tweak ...func(*Config)) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		pki:     newPKI(t),
		pol:     &testPolicy{rules: map[string]egress.Decision{}},
		names:   &testNames{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}},
		rec:     &recorder{},
		dsts:    map[string]netip.AddrPort{},
		byDst:   map[netip.AddrPort]string{},
		resolve: map[string][]netip.Addr{},
		public:  map[netip.AddrPort]string{},
	}
	cfg := Config{
		Policy:   h.pol,
		Names:    h.names,
		Recorder: h.rec,
		LookupNetIP: func(ctx context.Context, host string) ([]netip.Addr, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if a, ok := h.resolve[host]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
		OrigDst: func(c net.Conn) (netip.AddrPort, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			dst, ok := h.dsts[c.LocalAddr().String()]
			if !ok {
				return netip.AddrPort{}, errors.New("test: no original destination")
			}
			return dst, nil
		},
		Notify: func(d egress.Decision, name string, port uint16) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.notified = append(h.notified, fmt.Sprintf("%s:%d %s", name, port, d.Reason))
		},
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			h.mu.Lock()
			h.dialed = append(h.dialed, address)
			target, ok := h.public[netip.MustParseAddrPort(address)]
			h.mu.Unlock()
			if !ok {
				target = address
			}
			var d net.Dialer
			return d.DialContext(ctx, network, target)
		},
		LocalAddrs: func() ([]netip.Addr, error) { return []netip.Addr{ownAddr}, nil },
		// Generous: a client that speaks first is classified when its bytes arrive, however late a
		// loaded machine schedules it (a short timeout would reset a slow plain-HTTP client instead
		// of answering 403). Only a silent client to a denied name waits it out, and the test of
		// that (TestTransparentServerSpeaksFirst) sets its own short one.
		SniffTimeout: 10 * time.Second,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.g = g
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	ln := served(t)
	h.proxy = ln.Addr().String()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := g.Explicit(ctx, ln); err != nil {
			t.Errorf("Explicit: %v", err)
		}
	}()
	h.serveTransparent = func(ln net.Listener) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Transparent(ctx, ln); err != nil {
				t.Errorf("Transparent: %v", err)
			}
		}()
	}
	return h
}

// listen opens a loopback listener that the test closes at its end.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln := served(t)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// served opens a loopback listener for the gateway to serve (which closes it when it stops).
func served(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// transparent returns the address of a transparent listener whose connections have dst as their
// original destination, as if nftables had redirected a connection to dst.
func (h *harness) transparent(dst netip.AddrPort) string {
	h.mu.Lock()
	if a, ok := h.byDst[dst]; ok {
		h.mu.Unlock()
		return a
	}
	h.mu.Unlock()
	ln := served(h.t)
	a := ln.Addr().String()
	h.mu.Lock()
	h.dsts[a], h.byDst[dst] = dst, a
	h.mu.Unlock()
	h.serveTransparent(ln)
	return a
}

// mapped is the address the sandbox's DNS hands out for name, with port: where a program inside
// connects to.
func (h *harness) mapped(name string, port uint16) netip.AddrPort {
	a, _, _ := h.names.Assign(name)
	return netip.AddrPortFrom(a, port)
}

// dialMapped connects the way a program in the sandbox does to name:port: to the name's mapped
// address, redirected to the transparent listener.
func (h *harness) dialMapped(name string, port uint16) (net.Conn, error) {
	return net.DialTimeout("tcp", h.transparent(h.mapped(name, port)), 5*time.Second)
}

func (h *harness) setResolve(name string, addrs ...netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resolve[name] = addrs
}

// publicRoute makes the test dialer send connections for publicAddr:port to the loopback upstream
// at 127.0.0.1:port.
func (h *harness) publicRoute(port uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.public[netip.AddrPortFrom(publicAddr, port)] = netip.AddrPortFrom(loopback, port).String()
}

func (h *harness) dialedAddrs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.dialed)
}

func (h *harness) notifications() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.notified)
}

// transparentClient is an http.Client that reaches every host as a sandboxed program does, through
// the transparent listener; tlsName, if set, overrides the SNI.
func (h *harness) transparentClient(tweak func(*tls.Config)) *http.Client {
	cfg := &tls.Config{RootCAs: h.pki.pool}
	if tweak != nil {
		tweak(cfg)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			ForceAttemptHTTP2: true,
			TLSClientConfig:   cfg,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, port, err := splitHostPort(addr)
				if err != nil {
					return nil, err
				}
				var dst netip.AddrPort
				if ip, err := netip.ParseAddr(host); err == nil {
					dst = netip.AddrPortFrom(ip, port) // a raw IP: no name was resolved
				} else {
					dst = h.mapped(host, port)
				}
				var d net.Dialer
				return d.DialContext(ctx, "tcp", h.transparent(dst))
			},
		},
	}
}

// proxyClient is an http.Client that uses the explicit proxy.
func (h *harness) proxyClient(tweak func(*tls.Config)) *http.Client {
	cfg := &tls.Config{RootCAs: h.pki.pool}
	if tweak != nil {
		tweak(cfg)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   cfg,
			Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: h.proxy}),
		},
	}
}

func splitHostPort(addr string) (string, uint16, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err == nil {
		return ap.Addr().String(), ap.Port(), nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var port uint16
	_, err = fmt.Sscan(p, &port)
	return host, port, err
}

// get fetches url with c and returns the status and body.
func get(c *http.Client, u string, host string) (int, string, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// upstream is a server the tests start on loopback, and the Host headers it saw.
type upstream struct {
	port  uint16
	mu    sync.Mutex
	hosts []string
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.hosts)
}

func (u *upstream) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hosts = append(u.hosts, r.Host)
		u.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s %s %s body=%d", r.Host, r.Method, r.URL.Path, len(body))
	})
}

func portOf(a net.Addr) uint16 { return uint16(a.(*net.TCPAddr).Port) }

// httpsUpstream starts an HTTPS server (HTTP/2 and HTTP/1.1) with the test PKI's certificate.
func (h *harness) httpsUpstream() *upstream {
	u := &upstream{}
	s := httptest.NewUnstartedServer(u.handler())
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{h.pki.leaf}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what the tests expect
	s.StartTLS()
	h.t.Cleanup(s.Close)
	u.port = portOf(s.Listener.Addr())
	return u
}

func (h *harness) httpUpstream() *upstream {
	u := &upstream{}
	s := httptest.NewServer(u.handler())
	h.t.Cleanup(s.Close)
	u.port = portOf(s.Listener.Addr())
	return u
}

// echoUpstream starts a TCP server that sends greeting (if any), then echoes until EOF, then
// half-closes.
func (h *harness) echoUpstream(greeting string) *upstream {
	ln := listen(h.t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if greeting != "" {
					_, _ = io.WriteString(c, greeting)
				}
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return &upstream{port: portOf(ln.Addr())}
}

// rawExchange writes req on c, half-closes a TCP connection, and reads everything back.
func rawExchange(c net.Conn, req string) (string, error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return "", err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// rawHTTP sends one request head on c and reads one response (status, body).
func rawHTTP(c net.Conn, req string) (int, string, error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

func runTool(t *testing.T, stdin string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, needTool(t, name), args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no proxy variables from the caller
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// testPKI is a CA and a leaf certificate for every *.test name the tests use, and 127.0.0.1.
type testPKI struct {
	pool   *x509.CertPool
	caFile string
	leaf   tls.Certificate
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	ca := testpki.NewCA(t, "cordon proxy test CA")
	return &testPKI{pool: ca.Pool, caFile: ca.WriteFile(t, ""), leaf: ca.Leaf(t, "api.test", "evil.test", "denied.test", "loop.test", "meta.test", "public.test", "own.test", "gw.test", "127.0.0.1")}
}

// echConfigList is an ECHConfigList with the given public name, for a client that hides its real
// server name.
func echConfigList(t testing.TB, publicName string) []byte {
	t.Helper()
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.PublicKey().Bytes()
	body := []byte{1}
	body = binary.BigEndian.AppendUint16(body, 0x0020)
	body = binary.BigEndian.AppendUint16(body, uint16(len(pub)))
	body = append(body, pub...)
	body = append(body, 0, 4, 0, 1, 0, 1, 32, byte(len(publicName)))
	body = append(body, publicName...)
	body = append(body, 0, 0)
	cfg := binary.BigEndian.AppendUint16(nil, 0xfe0d)
	cfg = binary.BigEndian.AppendUint16(cfg, uint16(len(body)))
	cfg = append(cfg, body...)
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(cfg))), cfg...)
}

// allowedCase is a client reaching api.test through the gateway: what it runs, the answer it must
// get, and the details its audit event must hold.
type allowedCase struct {
	name   string
	port   uint16
	run    func(t *testing.T) (string, error)
	want   string
	detail map[string]string
}

// runAllowed runs each case and checks its answer and its one allowing event: the details asked
// for, bytes both ways, a duration and a rule, and no trace of the request's query (which carries
// "secret" in these tests).
func runAllowed(t *testing.T, h *harness, cases []allowedCase) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			from := h.rec.count()
			out, err := tt.run(t)
			if err != nil || !strings.Contains(out, tt.want) {
				t.Fatalf("got %q, %v; want %q", out, err, tt.want)
			}
			e := h.rec.waitFor(t, from, "allowing api.test", isAllow("api.test", tt.port))
			for k, v := range tt.detail {
				if e.Detail[k] != v {
					t.Errorf("detail %s = %q, want %q (all: %v)", k, e.Detail[k], v, e.Detail)
				}
			}
			if e.BytesIn == 0 || e.BytesOut == 0 || e.Duration <= 0 || e.Rule == "" {
				t.Errorf("event lacks bytes, duration or rule: %+v", e)
			}
			if strings.Contains(fmt.Sprint(e), "secret") {
				t.Errorf("event leaks the query string: %+v", e)
			}
		})
	}
}
