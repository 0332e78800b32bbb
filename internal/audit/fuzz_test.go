package audit

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzDecode checks that no log content makes reading panic, that a failure still returns the events
// before the bad line, and that whatever is read encodes and reads back the same.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-02T03:04:05Z","kind":"dns","name":"a.example","decision":"allow","detail":{"qtype":"A"}}` + "\n"))
	f.Add([]byte(`{"kind":"connect","decision":"deny","port":443,"bytes_in":5,"duration":1000}` + "\n" + `{"kind":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := decode(bytes.NewReader(data), "f")
		if err != nil && len(events) > bytes.Count(data, []byte{'\n'}) {
			t.Fatalf("%d events from %d lines", len(events), bytes.Count(data, []byte{'\n'}))
		}
		var buf bytes.Buffer
		for _, e := range events {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatalf("marshal %+v: %v", e, err)
			}
			buf.Write(append(b, '\n'))
		}
		back, err := decode(&buf, "g")
		if err != nil || len(back) != len(events) {
			t.Fatalf("re-read %d of %d events: %v", len(back), len(events), err)
		}
	})
}

// FuzzFold drives the folds and the cap with any sequence of events and clock steps, and checks that
// no decision is lost: what the log's events stand for, plus what it suppressed, is every decision
// recorded, and every line reads back.
func FuzzFold(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 2, 200, 1, 1, 3, 0}, uint16(0))
	f.Add(bytes.Repeat([]byte{0, 0, 7, 3}, 300), uint16(20))
	f.Fuzz(func(t *testing.T, ops []byte, capKiB uint16) {
		kinds := []Kind{KindDNS, KindConnect, KindHTTP}
		decisions := []Decision{Deny, Allow}
		names := []string{"a.evil.test", "b.evil.test", "x.y.evil.test", "evil.test", "", "z.other.test", "q.shop.co.uk", "pkg.test"}
		clk := newClock()
		var out syncBuffer
		l := newLog(&out, Options{MaxBytes: int64(capKiB) << 10}, 0, clk.now)
		n := 0
		for i := 0; i+3 < len(ops); i += 4 {
			e := Event{Kind: kinds[int(ops[i])%len(kinds)], Decision: decisions[int(ops[i+1])%len(decisions)],
				Name: names[int(ops[i+2])%len(names)], Port: uint16(ops[i+2] >> 4), Rule: "r", Time: clk.advance(time.Duration(ops[i+3]) * 10 * time.Millisecond)}
			if ops[i+2]&8 != 0 {
				e.Detail = map[string]string{"qtype": "TXT"}
			}
			l.Record(e)
			n++
			if ops[i+3] == 255 {
				l.expire(false)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		s := l.Summary()
		if got := decisionsIn(out.events(t)) + s.Suppressed + s.Dropped; got != n {
			t.Fatalf("written %d + suppressed %d + dropped %d != %d recorded", decisionsIn(out.events(t)), s.Suppressed, s.Dropped, n)
		}
	})
}
