package gateway

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// recordingLookuper records the names it is asked for.
type recordingLookuper struct{ names []string }

func (r *recordingLookuper) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.names = append(r.names, host)
	return nil, nil
}

// TestExactLookupAsksTheRootedName: whatever the resolver, the gateway asks for the name it judged as
// a fully qualified name, so no search list can turn it into another host's name.
func TestExactLookupAsksTheRootedName(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"api.example.test", "api.example.test."},
		{"intranet", "intranet."}, // a single label is where resolvers try the search list first
		{"data-xyz.allowed.test", "data-xyz.allowed.test."},
		{"already.rooted.test.", "already.rooted.test."},
	} {
		r := &recordingLookuper{}
		if _, err := exactLookup(r)(context.Background(), tc.host); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.names, []string{tc.want}) {
			t.Errorf("%s: asked for %q, want [%q]", tc.host, r.names, tc.want)
		}
	}
}

// recordingDNS is a DNS server on loopback that records every question and answers A queries for the
// names in answers (NXDOMAIN for any other name).
type recordingDNS struct {
	addr netip.AddrPort
	mu   sync.Mutex
	seen []string
}

func newRecordingDNS(t *testing.T, answers map[string]netip.Addr) *recordingDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingDNS{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort()}
	srv := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, q *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			r.mu.Lock()
			r.seen = append(r.seen, qq.Name)
			r.mu.Unlock()
			a, ok := answers[qq.Name]
			switch {
			case !ok:
				m.Rcode = mdns.RcodeNameError
			case qq.Qtype == mdns.TypeA:
				m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: qq.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 5}, A: a.AsSlice()})
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return r
}

func (r *recordingDNS) questions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// TestUpstreamResolverAsksOnlyTheJudgedName: through network.dns.upstream, with Go's real resolver, the
// server sees the allowed name and nothing else, also when that name does not exist (the case in which
// a resolver goes on to the search list) and for a single label. The end-to-end test
// TestResolutionIgnoresSearchList puts a search list in place; this one runs with the host's own.
func TestUpstreamResolverAsksOnlyTheJudgedName(t *testing.T) {
	want := netip.MustParseAddr("127.0.0.7")
	dns := newRecordingDNS(t, map[string]netip.Addr{"svc.test.": want})
	lookup := exactLookup(upstreamResolver([]netip.AddrPort{dns.addr}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := lookup(ctx, "svc.test")
	if err != nil || !slices.Contains(got, want) {
		t.Fatalf("lookup(svc.test) = %v, %v; want %v", got, err, want)
	}
	for _, missing := range []string{"gone.test", "intranet"} {
		if _, err := lookup(ctx, missing); err == nil {
			t.Errorf("lookup(%s) succeeded for a name the server does not have", missing)
		}
	}
	for _, q := range dns.questions() {
		if q != "svc.test." && q != "gone.test." && q != "intranet." {
			t.Errorf("the resolver asked for %q, a name the gateway never judged", q)
		}
	}
}
