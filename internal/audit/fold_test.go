package audit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

// clock is a settable time for the folds' windows; tests move it instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// syncBuffer is the buffer the Log's writer and the test share.
type syncBuffer struct{ syncbuf.Buffer }

// events decodes what the log wrote, failing the test on a bad line.
func (s *syncBuffer) events(t *testing.T) []Event {
	t.Helper()
	ev, err := decode(bytes.NewReader(s.Bytes()), "log")
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// decisionsIn adds up the decisions the log's events stand for, its own records aside.
func decisionsIn(events []Event) (n int) {
	for _, e := range events {
		if e.Kind != KindAudit {
			n += e.Decisions()
		}
	}
	return n
}

func tunnelQuery(i int) Event {
	return Event{Kind: KindDNS, Name: fmt.Sprintf("%08x.t.evil.test", i*7919), Decision: Deny, Rule: "default",
		Reason: "not in network.allow", Detail: map[string]string{"qtype": "TXT", "transport": "udp", "rcode": "NXDOMAIN"}}
}

// TestFoldTunnel: a DNS tunnel's stream of refused names, 10 000 queries over 10 s, folds into about
// one event a second whose counts add up exactly; the first query is written as it is.
func TestFoldTunnel(t *testing.T) {
	clk := newClock()
	var out syncBuffer
	l := newLog(&out, Options{}, 0, clk.now)
	const n = 10_000
	for i := range n {
		e := tunnelQuery(i)
		e.Time = clk.advance(time.Millisecond)
		l.Record(e)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	events := out.events(t)
	if got := decisionsIn(events); got != n {
		t.Fatalf("the events stand for %d decisions, want %d", got, n)
	}
	if len(events) > 15 {
		t.Fatalf("%d events for one tunnel over 10 s, want about 11", len(events))
	}
	if events[0].Count != 0 || events[0].Name != tunnelQuery(0).Name {
		t.Errorf("the first query is not its own event: %+v", events[0])
	}
	for _, e := range events[1:] {
		if e.Count < 2 || e.Group != "evil.test" || len(e.Names) != maxNames || e.Detail["qtype"] != "TXT" || e.Last.Before(e.Time) {
			t.Errorf("folded event %+v", e)
		}
	}
	if s := l.Summary(); s.Denied != n || s.Suppressed != 0 || s.Dropped != 0 {
		t.Errorf("Summary = %+v", s)
	}
}

// TestFoldSameName: repeats of one name fold without a group; a repeat after a quiet window is
// written as it is again.
func TestFoldSameName(t *testing.T) {
	clk := newClock()
	var out syncBuffer
	l := newLog(&out, Options{}, 0, clk.now)
	e := Event{Kind: KindDNS, Name: "nowhere.test", Decision: Deny, Rule: "default", Reason: "not in network.allow"}
	for range 5 {
		e.Time = clk.advance(time.Millisecond)
		l.Record(e)
	}
	l.expire(false) // within the window: nothing yet
	clk.advance(2 * foldWindow)
	l.expire(false) // the window is over: the four repeats are written
	clk.advance(2 * foldWindow)
	l.expire(false) // a quiet window: the fold is forgotten
	e.Time = clk.now()
	l.Record(e)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	events := out.events(t)
	var counts []int
	for _, e := range events {
		counts = append(counts, e.Count)
		if e.Group != "" || e.Names != nil || e.Name != "nowhere.test" {
			t.Errorf("event %+v", e)
		}
	}
	if fmt.Sprint(counts) != "[0 4 0]" {
		t.Errorf("counts %v, want [0 4 0]", counts)
	}
}

// TestFoldManyDomains: refusals spread over a thousand domains within a minute get maxGroups events
// of their own, and the rest fold by the rule.
func TestFoldManyDomains(t *testing.T) {
	clk := newClock()
	var out syncBuffer
	l := newLog(&out, Options{}, 0, clk.now)
	const n = 1000
	for i := range n {
		l.Record(Event{Time: clk.advance(time.Millisecond), Kind: KindDNS, Name: fmt.Sprintf("x.d%d.test", i), Decision: Deny,
			Rule: "default", Reason: "not in network.allow"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	events := out.events(t)
	if got := decisionsIn(events); got != n {
		t.Fatalf("the events stand for %d decisions, want %d", got, n)
	}
	coarse := 0
	for _, e := range events {
		if e.Group == anyName {
			coarse += e.Count
		}
	}
	if len(events) > maxGroups+3 || coarse != n-maxGroups {
		t.Errorf("%d events, %d folded by rule; want about %d events and %d", len(events), coarse, maxGroups+1, n-maxGroups)
	}
}

// TestFoldable: what folds and what keeps its own event.
func TestFoldable(t *testing.T) {
	for _, tt := range []struct {
		name  string
		e     Event
		group string // "-" means not foldable
	}{
		{"refused DNS name", Event{Kind: KindDNS, Name: "a.b.evil.test", Decision: Deny}, "evil.test"},
		{"refused connection", Event{Kind: KindConnect, Name: "x.evil.test", Port: 443, Decision: Deny}, "evil.test"},
		{"refused request", Event{Kind: KindHTTP, Name: "api.example", Decision: Deny, Detail: map[string]string{"path": "/x"}}, "api.example"},
		{"refused malformed query", Event{Kind: KindDNS, Decision: Deny, Reason: "malformed query"}, ""},
		{"allowed DNS answer", Event{Kind: KindDNS, Name: "a.b.example", Decision: Allow}, "a.b.example"},
		{"allowed connection", Event{Kind: KindConnect, Name: "a.example", Decision: Allow}, "-"},
		{"allowed request", Event{Kind: KindHTTP, Name: "a.example", Decision: Allow}, "-"},
		{"credential used", Event{Kind: KindHTTP, Name: "a.example", Decision: Deny, Detail: map[string]string{DetailCredentials: "K"}}, "-"},
		{"credential misused", Event{Kind: KindHTTP, Name: "a.example", Decision: Deny, Detail: map[string]string{DetailCredentialMisuse: "K"}}, "-"},
		{"any credential detail", Event{Kind: KindHTTP, Name: "a.example", Decision: Deny, Detail: map[string]string{"credential_other": "K"}}, "-"},
	} {
		k, ok := foldable(&tt.e)
		if ok != (tt.group != "-") || ok && k.group != tt.group {
			t.Errorf("%s: foldable = %v, group %q; want group %q", tt.name, ok, k.group, tt.group)
		}
	}
}

func TestDomain(t *testing.T) {
	for name, want := range map[string]string{
		"":                   "",
		"localhost":          "localhost",
		"evil.test":          "evil.test",
		"evil.test.":         "evil.test",
		"a.b.c.evil.test":    "evil.test",
		"x.shop.co.uk":       "shop.co.uk",
		"co.uk":              "co.uk",
		"a.example.com":      "example.com",
		"deadbeef.t.evil.io": "evil.io",
	} {
		if got := Domain(name); got != want {
			t.Errorf("Domain(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestLogCap: past its byte cap the log writes nothing more, counts, and ends with one record of what
// it suppressed, by kind; written and suppressed add up to every decision.
func TestLogCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	const limit = 64 << 10
	l, err := NewLogWith(path, Options{MaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000 // allowed connections never fold: ~1 MB of JSON
	for i := range n {
		l.Record(Event{Kind: KindConnect, Name: fmt.Sprintf("h%d.example", i), Port: 443, Decision: Allow, Rule: "network.allow[0]", BytesIn: 1})
		if i%10 == 0 {
			l.Record(tunnelQuery(i))
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > limit {
		t.Errorf("the log holds %d bytes, past its cap of %d", fi.Size(), limit)
	}
	events, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	s := l.Summary()
	if last.Kind != KindAudit || last.Count != s.Suppressed || s.Suppressed == 0 || !strings.Contains(last.Reason, "events suppressed") ||
		last.Detail["connect"] == "" || last.Detail["dns"] == "" {
		t.Fatalf("last record %+v, summary %+v", last, s)
	}
	if got := decisionsIn(events) + s.Suppressed; got != n+n/10 {
		t.Errorf("written %d + suppressed %d != %d", decisionsIn(events), s.Suppressed, n+n/10)
	}
	notes := 0
	for _, e := range events {
		if e.Kind == KindAudit {
			notes++
		}
	}
	if notes != 2 || s.Allowed != n || !strings.Contains(s.String(), "reached its size limit") {
		t.Errorf("%d notes (want the one when full and the count), summary %q", notes, s)
	}

	// A log that already holds its cap writes nothing more of the next run's events.
	l, err = NewLogWith(path, Options{MaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Kind: KindConnect, Decision: Allow})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(path); after.Size() > limit+2*reserve || l.Summary().Suppressed != 1 {
		t.Errorf("appending past the cap: %d bytes, summary %+v", after.Size(), l.Summary())
	}
}

// TestFoldCostsNoAllocation: a repeat that folds costs a map lookup, not an allocation.
func TestFoldCostsNoAllocation(t *testing.T) {
	clk := newClock()
	l := newLog(&syncBuffer{}, Options{}, 0, clk.now)
	defer l.Close()
	e := tunnelQuery(1)
	e.Time = clk.now()
	l.Record(e)
	l.Record(e)
	if a := testing.AllocsPerRun(1000, func() { l.Record(e) }); a > 0 {
		t.Errorf("a folded Record allocates %.1f times", a)
	}
}
