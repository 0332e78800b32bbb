package intercept

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// Timeouts on the sandbox's side of an intercepted connection. Upstream responses have none: a long
// poll or a slow clone is the agent's business.
const (
	handshakeTimeout  = 15 * time.Second
	readHeaderTimeout = 30 * time.Second
	idleTimeout       = 5 * time.Minute
)

// gatewayRule is the audit Rule of refusals the interceptor takes itself rather than a policy rule.
const gatewayRule = "gateway"

// Config is what an Interceptor needs. CA and Dial are required.
type Config struct {
	// CA mints the leaves the sandbox sees.
	CA *CA
	// Rules restrict the HTTP requests to the hosts they name.
	Rules []Rule
	// Git judges the pushes to the hosts they name by the refs they change (git.go), and allows
	// fetches of their repositories whatever Rules say.
	Git []GitRule
	// Hosts are further names to intercept without rules (for credential injection), in the syntax
	// of Rule.Host.
	Hosts []string
	// Inspect are names whose TLS is intercepted only to check each request's Host against the TLS
	// name (network.tls.inspect), in the syntax of Rule.Host. Their other protocols pass as for any
	// host: see OnlyTLS.
	Inspect []string
	// All inspects every name (network.tls.inspect: all), as Inspect does.
	All bool
	// Roots verify the real upstream's certificate; nil means the host's system roots.
	Roots *x509.CertPool
	// Dial connects to the real upstream for name:port. The gateway supplies its checked dialer,
	// which refuses private and metadata addresses; the interceptor never resolves names itself.
	Dial func(ctx context.Context, name string, port uint16) (net.Conn, error)
	// Modify, if set, runs on every allowed request before it goes upstream (credential injection).
	// It may change headers, the query or the body, never where the request goes: the upstream is
	// set by the interceptor, and a changed Host or path (which the rules judged) is refused with 502.
	// r.URL.Scheme says how it goes upstream: "https" over TLS verified against Roots, "http" in
	// cleartext (where a credential must not go). It returns audit details to record (never secret
	// values); an error refuses the request with 403.
	Modify func(r *http.Request, name string) (map[string]string, error)
	// ModifyMessage, if set, runs on every websocket message the sandbox sends to a host Hosts
	// names (credential hosts), after the upgrade: it returns the message to send (real values in
	// place of placeholders where a credential allows the body) and the names of the credentials
	// put in and of those misused (creds.Set.ModifyMessage). Websockets to such hosts are then
	// relayed message by message (wsrelay.go), so a value need not be as long as its placeholder.
	ModifyMessage func(ctx context.Context, name string, msg []byte) ([]byte, []string, []string, error)
	// MessagesFor, if set, reports whether a credential bound to name may go into its websocket
	// messages (creds.Set.InMessages): its websockets are then relayed message by message.
	MessagesFor func(name string) bool
	// Redactions, if set, lists for a host the values that must not reach the sandbox in its answers,
	// each with what replaces it: the credential values Modify sent there, which a host may echo.
	// Header, body, trailer and websocket frames are searched; the request then asks for an
	// unencoded answer, and one in an encoding that cannot be searched (other than gzip) is refused
	// with 502.
	Redactions func(name string) []redact.Pair
	// Budgets, if set, bound the requests to the hosts they name and meter the usage their answers
	// report: a request past a budget is answered 429 in the API's own error format.
	Budgets *budget.Ledger
	// Recorder gets one audit.Event of Kind audit.KindHTTP per request. Nil records nothing.
	Recorder audit.Recorder
	// Notify, if set, gets a one-line account of each refused request ("blocked METHOD URL: reason —
	// to allow: fix") and a key that says which refusals are the same for a human (host, method and
	// rule), so the caller can print each once. It must not block.
	Notify func(key, line string)
	// NotifyUpstream, if set, gets a one-line account of an upstream the interceptor could not use
	// (its certificate not verified against Roots, or not reachable), with a key per host and port,
	// so the caller can print each once: the sandbox only sees 502s, and an agent that retries them
	// quietly leaves the human guessing. It must not block.
	NotifyUpstream func(key, line string)
}

// Interceptor terminates the sandbox's TLS for the names it wants, judges each HTTP request by the
// rules, and forwards the allowed ones over verified TLS. It is safe for concurrent use; one serves
// a whole run.
type Interceptor struct {
	ca    *CA
	rules ruleSet
	git   []gitRule
	hosts []hostPattern
	// inspect and all are Config.Inspect and Config.All.
	inspect []hostPattern
	all     bool
	modify  func(*http.Request, string) (map[string]string, error)
	// modifyMessage is Config.ModifyMessage.
	modifyMessage func(context.Context, string, []byte) ([]byte, []string, []string, error)
	messagesFor   func(string) bool
	// redactions is Config.Redactions.
	redactions func(string) []redact.Pair
	budgets    *budget.Ledger
	rec        audit.Recorder
	notify     func(key, line string)
	notifyUp   func(key, line string)
	tr1        *http.Transport // HTTP/1.1 upstream, for clients that spoke HTTP/1.1
	tr2        *http.Transport // HTTP/2 upstream where offered, for clients that spoke HTTP/2
	proxy      *httputil.ReverseProxy
	errLog     *log.Logger
}

// New checks cfg and builds an Interceptor. Invalid rules are an error naming their Source.
func New(cfg Config) (*Interceptor, error) {
	if cfg.CA == nil {
		return nil, errors.New("intercept: Config.CA is required")
	}
	if cfg.Dial == nil {
		return nil, errors.New("intercept: Config.Dial is required")
	}
	rules, err := compileRules(cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("intercept: %w", err)
	}
	git, err := compileGit(cfg.Git)
	if err != nil {
		return nil, err
	}
	hosts, err := parseHostPatterns(cfg.Hosts)
	if err != nil {
		return nil, err
	}
	inspect, err := parseHostPatterns(cfg.Inspect)
	if err != nil {
		return nil, err
	}
	i := &Interceptor{
		ca:            cfg.CA,
		rules:         rules,
		git:           git,
		hosts:         hosts,
		inspect:       inspect,
		all:           cfg.All,
		modify:        cfg.Modify,
		modifyMessage: cfg.ModifyMessage,
		messagesFor:   cfg.MessagesFor,
		redactions:    cfg.Redactions,
		budgets:       cfg.Budgets,
		rec:           cfg.Recorder,
		notify:        cfg.Notify,
		notifyUp:      cfg.NotifyUpstream,
		errLog:        log.New(io.Discard, "", 0),
	}
	if i.rec == nil {
		i.rec = discard{}
	}
	dial := cfg.Dial
	i.tr2 = &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("intercept: upstream address %q: %w", addr, err)
			}
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("intercept: upstream port %q: %w", p, err)
			}
			c, err := dial(ctx, host, uint16(port))
			if err != nil {
				return nil, err
			}
			return &readBuffered{Conn: c, r: bufio.NewReaderSize(c, readBatch)}, nil
		},
		TLSClientConfig:       &tls.Config{RootCAs: cfg.Roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   handshakeTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   32,
		DisableCompression:    true, // pass the client's Accept-Encoding and the answer through as they are
		// Fewer, larger reads and writes: the relay's cost is mostly syscalls and TLS records.
		ReadBufferSize:  64 << 10,
		WriteBufferSize: 64 << 10,
		HTTP2:           &http.HTTP2Config{MaxReadFrameSize: 1 << 20},
	}
	// The upstream protocol follows the client's: an HTTP/1.1 client's requests (websocket upgrades
	// among them) go out as HTTP/1.1 on connections of their own, which also relays bulk data with
	// less work than HTTP/2's framing and flow control.
	i.tr1 = i.tr2.Clone()
	i.tr1.ForceAttemptHTTP2 = false
	i.tr1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	i.tr1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	i.proxy = &httputil.ReverseProxy{
		Rewrite:   i.rewrite,
		Transport: roundTripper(i.pick),
		// FlushInterval 0: streamed answers (no Content-Length, event streams) are flushed at once,
		// others as buffers fill.
		BufferPool:     newBufferPool(),
		ErrorLog:       i.errLog,
		ModifyResponse: modifyResponse,
		ErrorHandler:   i.errorHandler,
	}
	return i, nil
}

// Close drops the idle upstream connections. Connections being served end with their contexts.
func (i *Interceptor) Close() {
	i.tr1.CloseIdleConnections()
	i.tr2.CloseIdleConnections()
}

// pick sends a request upstream with the transport for the protocol its client spoke.
func (i *Interceptor) pick(r *http.Request) (*http.Response, error) {
	if ex := exchangeOf(r.Context()); ex != nil && ex.h2 {
		return i.tr2.RoundTrip(r)
	}
	return i.tr1.RoundTrip(r)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Wants reports whether connections to name should be intercepted: some rule, Hosts or Inspect
// entry covers it, or Config.All. Every other name passes through as TLS untouched.
func (i *Interceptor) Wants(name string) bool {
	return i.all || i.checks(normalName(name)) || matchesAny(i.inspect, normalName(name))
}

// OnlyTLS reports whether name is intercepted only to inspect its TLS (Config.Inspect or All) and has
// no rules or credentials: a connection to it that is not TLS (ssh, a database protocol) then passes
// as for any host, and plain HTTP is judged request by request by the gateway as for any host. A name
// with rules or a credential must speak TLS or HTTP, since anything else would go around them.
func (i *Interceptor) OnlyTLS(name string) bool {
	return !i.checks(normalName(name)) && i.Wants(name)
}

// checks reports whether the requests to name are checked against rules (HTTP or git) or get a
// credential.
func (i *Interceptor) checks(name string) bool {
	return i.rules.covers(name) || i.gitFor(name) != nil || matchesAny(i.hosts, name)
}

func matchesAny(ps []hostPattern, name string) bool {
	for _, p := range ps {
		if p.matches(name) {
			return true
		}
	}
	return false
}

func parseHostPatterns(hosts []string) ([]hostPattern, error) {
	var out []hostPattern
	for _, h := range hosts {
		hp, err := parseHostPattern(h)
		if err != nil {
			return nil, fmt.Errorf("intercept: %w", err)
		}
		out = append(out, hp)
	}
	return out, nil
}

// ServeTLS takes a client connection whose first bytes are the TLS ClientHello (the caller has already
// checked SNI == name and that the policy allows name:port), terminates TLS with a leaf for name
// (ALPN h2 and http/1.1), and serves HTTP requests on it until the client is done or ctx ends. A
// handshake whose SNI is not name is refused. It closes client, and returns nil when the client
// ended the connection, ctx.Err() when ctx did, or why the handshake failed.
func (i *Interceptor) ServeTLS(ctx context.Context, client net.Conn, name string, port uint16) error {
	name = normalName(name)
	leaf, err := i.ca.Leaf(name)
	if err != nil {
		client.Close()
		return err
	}
	raw := &batchConn{Conn: client}
	tc := tls.Server(raw, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		client.Close()
		return fmt.Errorf("intercept: TLS handshake with the sandbox for %s: %w", name, err)
	}
	if sni := normalName(tc.ConnectionState().ServerName); sni != name {
		client.Close()
		return fmt.Errorf("intercept: the sandbox's SNI %q is not %s", sni, name)
	}
	info := &conn{name: name, port: port, scheme: "https"}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		// net/http finds HTTP/2 by the connection's type: it must see the *tls.Conn itself. HTTP/2
		// batches its frames on its own.
		return i.serve(ctx, tc, info)
	}
	return i.serve(ctx, &batchedTLS{Conn: tc, raw: raw}, info)
}

// ServePlain is ServeTLS for a plain-HTTP connection (port 80 and the like): the same checks and
// rules, forwarded upstream as plain HTTP.
func (i *Interceptor) ServePlain(ctx context.Context, client net.Conn, name string, port uint16) error {
	return i.serve(ctx, client, &conn{name: normalName(name), port: port, scheme: "http"})
}

// conn is what every request on one client connection shares.
type conn struct {
	name   string
	port   uint16
	scheme string
	// gate is the connection's framing gate (HTTP/1.x), nil under HTTP/2.
	gate *framingGate
}

func (c *conn) upstream() string {
	return net.JoinHostPort(c.name, strconv.Itoa(int(c.port)))
}

// serve runs an HTTP server (HTTP/1.1, and HTTP/2 when TLS negotiated it) on the one connection c
// until the connection is closed, a hijacked one (a websocket) is done, or ctx ends.
func (i *Interceptor) serve(ctx context.Context, c net.Conn, info *conn) error {
	var gate *framingGate
	if _, h2 := c.(*tls.Conn); !h2 {
		// HTTP/1.x: net/http reads only what the gateway's strict reader framed (framing.go).
		gate = newFramingGate(c)
		c = gate
		info.gate = gate
	}
	done := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(done) }) }
	var hijacked atomic.Bool
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i.handle(info, w, r)
			if hijacked.Load() {
				finish() // the server forgot the connection when it was hijacked
			}
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateClosed:
				finish()
			case http.StateHijacked:
				hijacked.Store(true)
				gate.passThrough() // a websocket: what follows the 101 is not HTTP
			}
		},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          i.errLog,
	}
	ln := newOneConnListener(c)
	go func() { _ = srv.Serve(ln) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = srv.Close()
	_ = ln.Close()
	c.Close() // a hijacked connection is not the server's to close
	gate.record(i, info)
	return err
}

// discard is the Recorder when none is configured.
type discard struct{}

func (discard) Record(audit.Event) {}

// oneConnListener hands its one connection to http.Server.Serve, then blocks until closed.
type oneConnListener struct {
	c      chan net.Conn
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{c: make(chan net.Conn, 1), addr: c.LocalAddr(), closed: make(chan struct{})}
	l.c <- c
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }

// bufferPool recycles ReverseProxy's copy buffers.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (bp *bufferPool) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }
