// Package gateway assembles cordon's egress gateway for one sandbox: it serves, from outside, the
// sockets the box made inside its network (where the box's rules send every TCP connection and DNS
// query) with the DNS server and the transparent and explicit proxies, recording every decision in the
// run's audit log. It is the only piece that knows all the others; each of them is usable and tested
// on its own. It takes the sockets as plain listeners (sandbox.Listeners), so it knows nothing of how
// a backend made them.
package gateway

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/egress/dns"
	"github.com/cordon-sandbox/cordon/internal/egress/gitpush"
	"github.com/cordon-sandbox/cordon/internal/egress/intercept"
	"github.com/cordon-sandbox/cordon/internal/egress/names"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy"
	"github.com/cordon-sandbox/cordon/internal/javatrust"
	"github.com/cordon-sandbox/cordon/internal/origdst"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/redact"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Ports are where the gateway listens inside the sandbox. DNS is on 53 because resolvers assume it;
// the others are conventional and only ever seen on the sandbox's own loopback.
func Ports() sandbox.EgressPorts {
	return sandbox.EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 53}
}

// The policy's matcher is the gateway's policy as it is (egress.Decision is policy.Decision).
var _ egress.Policy = (*policy.NetMatcher)(nil)

// Config is what one sandbox's gateway needs.
type Config struct {
	// Network is the policy's network section; it must not be nil (no section means no gateway).
	Network *policy.Network
	// Presets expands network.presets; nil refuses any preset.
	Presets policy.PresetSource
	// Hostname is the sandbox's host name, which its DNS answers with loopback.
	Hostname string
	// AuditPath is the run's audit log (JSON lines).
	AuditPath string
	// AuditGroupReadable makes the audit log readable by the gateway's group (audit.Options).
	AuditGroupReadable bool
	// AuditCallerSyncs leaves the audit log's fsync to the caller (audit.Options.CallerSyncs):
	// Close writes and closes it without one.
	AuditCallerSyncs bool
	// AuditMaxBytes caps the audit log (the run's share of limits.disk); 0 means audit.DefaultMaxBytes.
	AuditMaxBytes int64
	// OnEvent receives each event as the audit log writes it (audit.Options.OnEvent), never after
	// Close has returned; nil sends them nowhere but the log.
	OnEvent func(audit.Event)
	// Notify receives one line per refused host, for the user's terminal. It must not block.
	Notify func(line string)
	// NotifyUpstream receives one line per allowed host the gateway could not reach or whose
	// certificate it could not verify, for the user's terminal: the sandbox sees only resets and
	// 502s, which agents retry quietly. It must not block.
	NotifyUpstream func(line string)
	// LookupNetIP resolves allowed names outside the sandbox; nil uses the host's resolver (or
	// network.dns.upstream), always asked for the name as a fully qualified one (see exactLookup). A
	// function given here gets the name without a trailing dot and must not apply a search list.
	LookupNetIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// InjectHosts are the host patterns credentials are bound to. They, the hosts of Network.HTTP
	// and Network.Git and those of Network.TLS.Inspect are intercepted: the gateway terminates TLS for them with a
	// per-run CA.
	InjectHosts []string
	// Modify puts credentials into an intercepted request (creds.Set.Modify); nil changes nothing.
	Modify func(r *http.Request, name string) (map[string]string, error)
	// ModifyMessage puts credentials into a websocket message to a credential host
	// (creds.Set.ModifyMessage); nil changes none, and websockets to such hosts are then relayed
	// message by message only when values sent to them must be searched for.
	ModifyMessage func(ctx context.Context, name string, msg []byte) ([]byte, []string, []string, error)
	// MessagesFor reports whether a credential bound to a host may go into its websocket messages
	// (creds.Set.InMessages).
	MessagesFor func(name string) bool
	// Redactions lists the credential values sent to a host, to be put back to their placeholders
	// in its answers (creds.Set.Redactions); nil searches nothing.
	Redactions func(name string) []redact.Pair
	// Budgets bound and meter the requests to the hosts they name (policy budgets), which must be
	// intercepted; nil meters nothing.
	Budgets *budget.Ledger
	// Services are the run's fixture servers (policy services), reached at their unix sockets.
	Services []Service
	// Roots, when set, are the certificate authorities (PEM) upstreams are verified against instead
	// of the host's: a gateway in a Kubernetes pod, whose image has none, is given the roots of the
	// machine that started the run. network.tls.caFile is trusted besides them either way.
	Roots []byte
	// CAFile, when set, is network.tls.caFile's content, read where the policy was (a pod's gateway
	// gets it in its config); Network.TLS.CAFile is then not read. It is checked as the file is.
	CAFile []byte
}

// Credentials is what the gateway uses of a run's credentials (creds.Set has these methods; this
// package does not import creds).
type Credentials interface {
	Hosts() []string
	Modify(r *http.Request, name string) (map[string]string, error)
	ModifyMessage(ctx context.Context, name string, msg []byte) ([]byte, []string, []string, error)
	InMessages(name string) bool
	Redactions(name string) []redact.Pair
}

// WithCredentials binds c's hooks into the configuration (InjectHosts, Modify, ModifyMessage,
// MessagesFor, Redactions), so that every gateway, the local run's and a pod's, wires a run's
// credentials the same way.
func (c *Config) WithCredentials(cr Credentials) {
	c.InjectHosts, c.Modify, c.Redactions = cr.Hosts(), cr.Modify, cr.Redactions
	c.ModifyMessage, c.MessagesFor = cr.ModifyMessage, cr.InMessages
}

// Gateway is one sandbox's gateway: prepared by New before the sandbox starts (so that a policy it
// cannot enforce stops the run before anything runs), serving once Serve hands it the sockets.
type Gateway struct {
	// caFile is the PEM of network.tls.caFile: the gateway verifies upstreams against it, and the
	// sandbox trusts it too (TrustCA), for the hosts that pass through.
	caFile []byte
	// roots are Config.Roots, or nil for the host's.
	roots   *x509.CertPool
	log     *audit.Log
	proxy   *proxy.Gateway
	ic      *intercept.Interceptor
	ca      *intercept.CA
	dns     *dns.Server
	sockets sandbox.Listeners
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	errs []error
}

// New prepares the gateway: the policy matcher (presets expanded), the name mapper, the audit log and
// the handlers. Any error means the run must not start.
func New(cfg Config) (*Gateway, error) {
	if cfg.Network == nil {
		return nil, errors.New("gateway: no network policy")
	}
	netMatcher, err := cfg.Network.Matcher(cfg.Presets)
	if err != nil {
		return nil, fmt.Errorf("gateway: network policy: %w", err)
	}
	matcher := newWithServices(netMatcher, cfg.Services)
	mapper, err := names.New()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	lookup := cfg.LookupNetIP
	if lookup == nil {
		lookup = exactLookup(net.DefaultResolver)
	}
	if len(cfg.Network.DNS.Upstream) > 0 {
		lookup = exactLookup(upstreamResolver(cfg.Network.DNS.Upstream))
	}
	var notices, upstream *notifier
	if cfg.Notify != nil {
		notices = newNotifier(cfg.Notify)
	}
	if cfg.NotifyUpstream != nil {
		upstream = newNotifier(cfg.NotifyUpstream)
	}
	refusedName := func(host, reason string) {
		notices.notifyf(dnsKey(host), func() string {
			line := fmt.Sprintf("blocked the DNS name %s (%s)", host, reason)
			if fix := matcher.Decide(host, 443).Fix; fix != "" {
				line += " — to allow: " + fix
			}
			return line
		})
	}
	for _, h := range cfg.InjectHosts {
		if h[0] != '*' && !matcher.Known(h) {
			return nil, fmt.Errorf("gateway: a credential is bound to %s, which the network policy never allows (add it to network.allow)", h)
		}
	}
	for i, r := range cfg.Network.Git {
		if !matcher.Known(r.Host) {
			return nil, fmt.Errorf("gateway: network.git[%d]: %s is never allowed by the network policy (add it to network.allow)", i, r.Host)
		}
	}
	for i, h := range cfg.Network.TLS.Inspect {
		if !strings.HasPrefix(h, "*.") && !matcher.Known(h) {
			return nil, fmt.Errorf("gateway: network.tls.inspect[%d]: %s is never allowed by the network policy (add it to network.allow)", i, h)
		}
	}
	var caFile []byte
	if cfg.CAFile != nil {
		caFile, err = checkCAPEM("the config's CA file", cfg.CAFile)
	} else {
		caFile, err = readCAFile(cfg.Network.TLS.CAFile)
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	var roots *x509.CertPool
	if cfg.Roots != nil {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(cfg.Roots) {
			return nil, errors.New("gateway: the roots given hold no PEM certificate")
		}
	}
	log, err := audit.NewLogWith(cfg.AuditPath, audit.Options{MaxBytes: cfg.AuditMaxBytes, OnEvent: cfg.OnEvent,
		GroupReadable: cfg.AuditGroupReadable, CallerSyncs: cfg.AuditCallerSyncs})
	if err != nil {
		return nil, fmt.Errorf("gateway: audit log: %w", err)
	}
	g := &Gateway{log: log, caFile: caFile, roots: roots}
	pcfg := proxy.Config{
		Policy: matcher, Names: mapper, Recorder: log, LookupNetIP: lookup,
		OrigDst: origdst.Of, Notify: notices.refusedConn, Unreachable: upstream.unreachable,
		Services: matcher.socket,
	}
	if tls := cfg.Network.TLS; len(cfg.Network.HTTP) > 0 || len(cfg.Network.Git) > 0 || len(cfg.InjectHosts) > 0 || len(tls.Inspect) > 0 || tls.InspectAll {
		if err = g.prepareInterception(cfg, notices, upstream); err == nil {
			pcfg.Intercept = g.ic
		}
	}
	if err == nil {
		g.proxy, err = proxy.New(pcfg)
	}
	if err == nil {
		if g.dns, err = dns.New(dns.Config{Policy: matcher, Names: mapper, Recorder: log, Hostname: cfg.Hostname, Refused: refusedName}); err == nil {
			g.ctx, g.cancel = context.WithCancel(context.Background())
			return g, nil
		}
	}
	log.Close()
	return nil, fmt.Errorf("gateway: %w", err)
}

// prepareInterception makes the run's CA and the interceptor for the hosts with HTTP or git rules or
// credentials, and those network.tls.inspect names (which get no rules: only the checks every
// intercepted request gets, its Host against the TLS name first). Upstreams are verified against the
// host's roots (or Config.Roots) plus network.tls.caFile.
//
// The host's roots alone are left nil, which crypto/tls reads as the host's roots, loaded on the
// first verification: parsing them (x509.SystemCertPool, some 280 certificates from the bundle and
// /etc/ssl/certs) took 16 ms of every intercepting run's start, before any connection needed them.
// Roots that cannot be loaded then fail every verification, as the empty pool did.
func (g *Gateway) prepareInterception(cfg Config, notices, upstream *notifier) error {
	var roots *x509.CertPool
	var err error
	switch {
	case g.roots != nil:
		roots = g.roots.Clone()
	case len(g.caFile) > 0:
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
	}
	if len(g.caFile) > 0 {
		roots.AppendCertsFromPEM(g.caFile)
	}
	if g.ca, err = intercept.NewCA(); err != nil {
		return err
	}
	rules := make([]intercept.Rule, len(cfg.Network.HTTP))
	for i, r := range cfg.Network.HTTP {
		rules[i] = intercept.Rule{Host: r.Host, Source: fmt.Sprintf("network.http[%d]", i)}
		for _, a := range r.Allow {
			rules[i].Allow = append(rules[i].Allow, intercept.Access{Methods: a.Methods, Paths: a.Paths, Body: a.Body, Websocket: a.Websocket, Headers: a.Headers})
		}
	}
	git := make([]intercept.GitRule, len(cfg.Network.Git))
	for i, r := range cfg.Network.Git {
		p := r.Push
		git[i] = intercept.GitRule{Host: r.Host, Repos: r.Repos,
			Push: gitpush.Rule{Branches: p.Branches, Tags: p.Tags, Delete: p.Delete, Options: p.Options, Source: fmt.Sprintf("network.git[%d]", i)}}
	}
	var notify, notifyUp func(key, line string)
	if notices != nil {
		notify = func(key, line string) { notices.notify("http "+key, line) }
	}
	if upstream != nil {
		notifyUp = upstream.notify
	}
	g.ic, err = intercept.New(intercept.Config{
		CA: g.ca, Rules: rules, Git: git, Hosts: cfg.InjectHosts, Inspect: cfg.Network.TLS.Inspect, All: cfg.Network.TLS.InspectAll, Roots: roots, Modify: cfg.Modify, ModifyMessage: cfg.ModifyMessage, MessagesFor: cfg.MessagesFor, Redactions: cfg.Redactions, Recorder: g.log,
		Notify: notify, NotifyUpstream: notifyUp, Budgets: cfg.Budgets,
		// The proxy exists by the time a connection is intercepted.
		Dial: func(ctx context.Context, name string, port uint16) (net.Conn, error) {
			return g.proxy.DialUpstream(ctx, name, port)
		},
	})
	return err
}

// readCAFile reads network.tls.caFile ("" is none): PEM certificates, and nothing else, since the
// sandbox is given the file's content too.
func readCAFile(f string) ([]byte, error) {
	if f == "" {
		return nil, nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("network.tls.caFile: %w", err)
	}
	return checkCAPEM(f, b)
}

// checkCAPEM returns the certificates of b, the content of network.tls.caFile (named f in
// messages), re-encoded; anything but certificates is an error.
func checkCAPEM(f string, b []byte) ([]byte, error) {
	var out []byte
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("network.tls.caFile: %s holds a %s block; only certificates belong there", f, blk.Type)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("network.tls.caFile: %s: %w", f, err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes})...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("network.tls.caFile: %s holds no PEM certificate", f)
	}
	return out, nil
}

// Serve serves the gateway's sockets inside the sandbox (made by the box, whichever backend it is,
// with its rules sending the sandbox's traffic to them) until Close. It takes ownership of them. A set
// without a transparent listener or a DNS socket is refused and closed: the box's traffic would have
// nowhere to go but a socket nobody serves, and the caller must not let the command run.
func (g *Gateway) Serve(sockets sandbox.Listeners) error {
	if len(sockets.Transparent) == 0 || len(sockets.DNSUDP) == 0 {
		sockets.Close()
		return errors.New("gateway: the sandbox's sockets are incomplete")
	}
	g.sockets = sockets
	ctx := g.ctx
	for _, ln := range sockets.Transparent {
		g.serve(func() error { return g.proxy.Transparent(ctx, ln) })
	}
	for _, ln := range sockets.Proxy {
		g.serve(func() error { return g.proxy.Explicit(ctx, ln) })
	}
	for i, pc := range sockets.DNSUDP {
		var l net.Listener
		if i < len(sockets.DNSTCP) {
			l = sockets.DNSTCP[i]
		}
		g.serve(func() error { return g.dns.Serve(ctx, pc, l) })
	}
	return nil
}

// serve runs one server; an error from it is kept for Close. A server that fails stops the whole
// gateway and closes every socket, so egress stops with it rather than limping on half served: the
// gateway fails closed.
func (g *Gateway) serve(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(); err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
			g.cancel()
			g.sockets.Close()
		}
	}()
}

// Done is closed once the gateway stops serving: Close was called, or a server failed (which
// closes every socket; Close then returns its error). A gateway that runs on its own, as a pod's
// sidecar does, exits on it.
func (g *Gateway) Done() <-chan struct{} { return g.ctx.Done() }

// ResolvConf is the sandbox's /etc/resolv.conf: the gateway's DNS on the sandbox's loopback.
func ResolvConf() string {
	return "nameserver 127.0.0.1\noptions edns0 trust-ad\n"
}

// TrustCA is what the sandbox must trust besides the host's roots, as PEM: the run's CA when the
// gateway intercepts (its private key never leaves this process), and the certificates of
// network.tls.caFile, which the gateway trusts for upstreams and which the sandbox needs for the hosts
// that pass through. Nil when there is neither.
func (g *Gateway) TrustCA() []byte {
	var out []byte
	if g.ca != nil {
		out = append(out, g.ca.CertPEM()...)
	}
	return append(out, g.caFile...)
}

// TrustVars are the variables through which runtimes and tools find a CA bundle, each naming the
// sandbox's bundle (the host's roots plus TrustCA), which replaces theirs: OpenSSL and what links it
// (Python, Ruby, .NET, Rust's native-tls), curl, git, pip, requests, the AWS CLI and SDKs, Deno,
// cargo. A policy that sets one itself is merged by the caller (its certificates join TrustCA).
var TrustVars = []string{
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
	"AWS_CA_BUNDLE", "DENO_CERT", "CARGO_HTTP_CAINFO",
}

// ExtraTrustVars are the variables that add certificates to a runtime's own roots rather than
// replace them, each naming TrustCA's certificates alone.
var ExtraTrustVars = []string{"NODE_EXTRA_CA_CERTS"}

// JavaOptions is what JAVA_TOOL_OPTIONS gets for Java to trust what the sandbox trusts: Java reads
// only its own trust store.
func JavaOptions() string {
	return "-Djavax.net.ssl.trustStore=" + sandbox.JavaTrustStorePath +
		" -Djavax.net.ssl.trustStoreType=" + javatrust.StoreType + " -Djavax.net.ssl.trustStorePassword=" + javatrust.Password
}

// Env is what the sandbox's environment needs: the explicit proxy for tools that want one (tools that
// ignore it are covered anyway: their connections are redirected), and, when the sandbox trusts more
// than the host's roots (TrustCA), the variables through which tools find it.
func (g *Gateway) Env() []string {
	p := fmt.Sprintf("http://127.0.0.1:%d", Ports().Proxy)
	noProxy := "localhost,127.0.0.1,::1"
	env := []string{
		"HTTP_PROXY=" + p, "HTTPS_PROXY=" + p, "http_proxy=" + p, "https_proxy=" + p,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
	}
	if g.ca != nil || len(g.caFile) > 0 {
		for _, v := range TrustVars {
			env = append(env, v+"="+sandbox.CABundlePath)
		}
		for _, v := range ExtraTrustVars {
			env = append(env, v+"="+sandbox.TrustedCAPath)
		}
		env = append(env, "JAVA_TOOL_OPTIONS="+JavaOptions())
	}
	return env
}

// Record writes an event of another of the run's boundaries into the gateway's audit log (the
// sandbox's ssh-agent, a fixture service started or removed): one log per run.
func (g *Gateway) Record(ev audit.Event) { g.log.Record(ev) }

// Close stops serving, closes every socket and the audit log, and returns the run's summary.
func (g *Gateway) Close() (audit.Summary, error) {
	g.cancel()
	g.sockets.Close()
	g.wg.Wait()
	if g.ic != nil {
		g.ic.Close()
	}
	err := g.log.Close() // first: closing writes the folded counts, which the cap may suppress
	sum := g.log.Summary()
	g.mu.Lock()
	defer g.mu.Unlock()
	return sum, errors.Join(append(g.errs, err)...)
}
