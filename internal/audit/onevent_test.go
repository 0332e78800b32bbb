package audit

import (
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOnEventIsTheLogsStream: the callback receives what the file holds, in order and as a reader
// decodes it: the folded repeats once, with their count, and the log's own notes (a byte cap here);
// nothing reaches it after Close has returned.
func TestOnEventIsTheLogsStream(t *testing.T) {
	clk := newClock()
	var out syncBuffer
	var mu sync.Mutex
	var got []Event
	var closed atomic.Bool
	l := newLog(&out, Options{MaxBytes: 16 << 10, OnEvent: func(e Event) {
		if closed.Load() {
			t.Errorf("OnEvent after Close returned: %+v", e)
		}
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	}}, 0, clk.now)
	allowed := Event{Kind: KindConnect, Name: "api.test", Port: 443, Decision: Allow, Rule: "network.allow[0]: api.test"}
	refused := Event{Kind: KindDNS, Name: "nowhere.test", Decision: Deny, Rule: "default", Reason: "not in network.allow"}
	for i := range 5 {
		allowed.Time = clk.advance(time.Millisecond)
		allowed.Name = "api" + string(rune('a'+i)) + ".test"
		l.Record(allowed)
		refused.Time = clk.advance(time.Millisecond)
		l.Record(refused) // the last four fold into one event
	}
	clk.advance(2 * foldWindow)
	l.expire(false) // the fold is written, before the cap
	for range 200 { // past the cap: suppressed, with a note as it begins and a count at Close
		allowed.Time = clk.advance(time.Millisecond)
		l.Record(allowed)
	}
	err := l.Close()
	closed.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	want := out.events(t)
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("OnEvent received %d events, the log holds %d; first received %+v", len(got), len(want), got[:min(len(got), 3)])
	}
	var folded, notes int
	for _, e := range got {
		if e.Name == "nowhere.test" && e.Count == 4 {
			folded++
		}
		if e.Kind == KindAudit {
			notes++
		}
	}
	if folded != 1 || notes != 2 {
		t.Errorf("received %d folds of 4 and %d notes, want 1 and 2", folded, notes)
	}
	l.Record(refused) // after Close: counted, neither written nor delivered
}

// TestOnEventNeverBlocksRecord: a callback that does not return holds up the writer, not Record:
// past the memory bound events are dropped and counted, as with a stuck file.
func TestOnEventNeverBlocksRecord(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	l := newLog(&syncBuffer{}, Options{OnEvent: func(Event) {
		calls.Add(1)
		<-release
	}}, 0, time.Now)
	e := Event{Kind: KindConnect, Name: string(make([]byte, 200)) + ".example", Decision: Allow}
	const n = 100_000 // ~30 MB of JSON: well past maxPending
	recordAllStuck(t, l, n, func(i int) Event {
		e.Port = uint16(i) // distinct events: none folds
		return e
	}, func() { close(release) })
	if s := l.Summary(); s.Allowed != n || s.Dropped == 0 {
		t.Errorf("Summary = %+v, want %d allowed and some dropped", s, n)
	}
	close(release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if s := l.Summary(); calls.Load()+int64(s.Dropped) != n+1 { // +1: the note about the dropped events
		t.Errorf("delivered %d + dropped %d != %d + 1", calls.Load(), s.Dropped, n)
	}
}
