package dns

import (
	"encoding/binary"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/names"
)

// FuzzHandle feeds raw bytes to the query handler, as a hostile process inside the sandbox can, and
// checks what the server promises: it never panics; it answers only queries, with its own ID and a
// well-formed message that fits the client's limit; it asks the policy only about plain host names;
// and every address it hands out is loopback for local names or maps back to the very name asked,
// which the policy knows.
func FuzzHandle(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"api.example.com.", mdns.TypeA}, {"x.wild.example.", mdns.TypeAAAA}, {"secret.attacker.example.", mdns.TypeTXT}, {"localhost.", mdns.TypeA}} {
		m := new(mdns.Msg)
		m.SetQuestion(q.name, q.qtype)
		b, _ := m.Pack()
		f.Add(b)
	}
	pol := &sloppyPolicy{}
	nm, err := names.New()
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{Policy: pol, Names: nm, Recorder: &events{}, Hostname: "box"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		pol.mu.Lock()
		pol.asked = pol.asked[:0]
		pol.mu.Unlock()
		ev := audit.Event{Detail: map[string]string{}}
		resp, limit := s.answer(raw, &ev)
		pol.mu.Lock()
		for _, h := range pol.asked {
			if c, ok := hostName(h); !ok || c != h {
				t.Fatalf("policy asked about %q", h)
			}
		}
		pol.mu.Unlock()
		if resp == nil {
			if len(raw) >= 12 && raw[2]&0x80 == 0 {
				t.Fatalf("no answer to a query of %d bytes", len(raw))
			}
			return
		}
		if len(raw) < 12 || raw[2]&0x80 != 0 {
			t.Fatal("answered a message that is not a query")
		}
		out, err := pack(resp, limit)
		if err != nil {
			t.Fatalf("pack: %v", err)
		}
		if len(out) > limit {
			t.Fatalf("answer of %d bytes over the limit %d", len(out), limit)
		}
		r := new(mdns.Msg)
		if err := r.Unpack(out); err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
		if r.Id != binary.BigEndian.Uint16(raw) || !r.Response {
			t.Fatalf("answer id %d response %v", r.Id, r.Response)
		}
		if len(r.Answer) > 0 && (len(r.Question) != 1 || ev.Decision != audit.Allow) {
			t.Fatalf("answer records with questions %v, decision %q", r.Question, ev.Decision)
		}
		for _, rr := range r.Answer {
			if rr.Header().Name != r.Question[0].Name {
				t.Fatalf("answer owner %q for question %q", rr.Header().Name, r.Question[0].Name)
			}
			var a netip.Addr
			switch v := rr.(type) {
			case *mdns.A:
				a, _ = netip.AddrFromSlice(v.A)
			case *mdns.AAAA:
				a, _ = netip.AddrFromSlice(v.AAAA)
			default:
				t.Fatalf("answer of type %T", rr)
			}
			host, ok := hostName(r.Question[0].Name)
			if !ok {
				t.Fatalf("answered %q, not a plain host name", r.Question[0].Name)
			}
			if a.Unmap().IsLoopback() {
				continue
			}
			if n, ok := nm.Lookup(a); !ok || n != host || !pol.Known(host) {
				t.Fatalf("answered %v for %q: maps to %q (%v)", a, host, n, ok)
			}
		}
	})
}
