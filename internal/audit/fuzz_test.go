package audit

import (
	"bytes"
	"encoding/json"
	"testing"
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
