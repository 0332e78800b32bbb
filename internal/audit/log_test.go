package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestLogRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := NewLog(path)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 16, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e := Event{Kind: KindConnect, Name: fmt.Sprintf("h%d.example", w), Port: 443, Decision: Allow,
					Rule: `network.allow[0] "*.example" ports [443]`, BytesIn: 10, BytesOut: 1, Duration: time.Millisecond}
				if i%4 == 0 {
					e = Event{Kind: KindDNS, Name: "x<y>&z.attacker.example", Decision: Deny, Detail: map[string]string{"qtype": "TXT"}}
				}
				l.Record(e)
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := Summary{Allowed: workers * each * 3 / 4, Denied: workers * each / 4, BytesIn: 10 * workers * each * 3 / 4, BytesOut: workers * each * 3 / 4}
	if got := l.Summary(); got != want {
		t.Errorf("Summary = %+v, want %+v", got, want)
	}
	events, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	// The refused DNS queries, all the same, fold into a few events whose counts add up; every
	// allowed connection keeps its own.
	decisions, lines := 0, 0
	perName := map[string]int{}
	for _, e := range events {
		if e.Time.IsZero() {
			t.Fatal("event without a time")
		}
		decisions += e.Decisions()
		lines++
		perName[e.Name] += e.Decisions()
		if e.Kind == KindDNS && (e.Detail["qtype"] != "TXT" || e.Name != "x<y>&z.attacker.example") {
			t.Fatalf("dns event changed on the way: %+v", e)
		}
		if e.Kind == KindConnect && (e.Duration != time.Millisecond || e.Port != 443) {
			t.Fatalf("connect event changed on the way: %+v", e)
		}
	}
	if decisions != workers*each || lines > workers*each*3/4+10 {
		t.Fatalf("read %d events standing for %d decisions, want %d decisions in about %d events", lines, decisions, workers*each, workers*each*3/4)
	}
	if perName["h3.example"] != each*3/4 || perName["x<y>&z.attacker.example"] != workers*each/4 {
		t.Errorf("h3.example: %d events, want %d; the refused name: %d, want %d", perName["h3.example"], each*3/4,
			perName["x<y>&z.attacker.example"], workers*each/4)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `"x<y>&z.attacker.example"`) || strings.Count(string(raw), "\n") != lines {
		t.Error("the log is not one plain JSON object per line")
	}
	if l.Record(Event{Decision: Allow}); l.Summary().Dropped != 1 {
		t.Error("an event after Close was not counted as dropped")
	}
	if err := l.Close(); err == nil {
		t.Error("second Close succeeded")
	}
}

func TestLogFileMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.jsonl")
	existing := filepath.Join(dir, "existing.jsonl")
	if err := os.WriteFile(existing, []byte(`{"kind":"dns","decision":"allow"}`+"\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fresh, existing} {
		l, err := NewLog(p)
		if err != nil {
			t.Fatal(err)
		}
		l.Record(Event{Kind: KindDNS, Decision: Deny})
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
	if ev, err := Read(existing); err != nil || len(ev) != 2 {
		t.Errorf("appending to an existing log: %d events, %v", len(ev), err)
	}
}

// TestLogRefusesSymlink: a link planted where the log goes must not redirect it to another file. The
// same link is first shown to lead to the target, so the refusal is NewLog's doing.
func TestLogRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "victim")
	if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "audit.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(link); err != nil || string(b) != "precious\n" {
		t.Fatalf("the link does not lead to the target: %q %v", b, err)
	}
	if l, err := NewLog(link); err == nil {
		l.Close()
		t.Fatal("NewLog followed a symbolic link")
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("target changed: %q", b)
	}
	if _, err := NewLog(dir); err == nil {
		t.Error("NewLog accepted a directory")
	}
}

// stuckWriter blocks every Write until released: a disk that has stopped answering.
type stuckWriter struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	<-s.release
	s.mu.Lock()
	s.n += strings.Count(string(p), "\n")
	s.mu.Unlock()
	return len(p), nil
}

// TestRecordNeverBlocks: with the file stuck, Record still returns at once; past the memory bound
// events are dropped and counted, the summary stays exact, and the log says how many it lost.
func TestRecordNeverBlocks(t *testing.T) {
	w := &stuckWriter{release: make(chan struct{})}
	l := newLog(w, Options{}, 0, time.Now)
	e := Event{Kind: KindConnect, Name: strings.Repeat("a", 200) + ".example", Decision: Allow, BytesOut: 1}
	const n = 100_000 // ~30 MB of JSON: well past maxPending
	recordAllStuck(t, l, n, func(int) Event { return e }, func() { close(w.release) })
	sum := l.Summary()
	if sum.Allowed != n || sum.BytesOut != n || sum.Dropped == 0 {
		t.Errorf("Summary = %+v, want %d allowed and some dropped", sum, n)
	}
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if w.n+sum.Dropped != n+1 { // +1: the note about the dropped events
		t.Errorf("written %d + dropped %d != %d + 1", w.n, sum.Dropped, n)
	}
}

// recordAllStuck records event(i) for i up to n while what Record must not wait for (the file,
// the OnEvent callback) stays stuck. A Record that waited would never return; the bound is generous
// (not a timing: the -race build takes some 10 s) and turns that hang into a failure, after unstick.
func recordAllStuck(t *testing.T, l *Log, n int, event func(i int) Event, unstick func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			l.Record(event(i))
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		unstick()
		t.Fatalf("%d Records did not return with the log's writer stuck: Record waits for it", n)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLogWriteError(t *testing.T) {
	l := newLog(failingWriter{}, Options{}, 0, time.Now)
	l.Record(Event{Kind: KindDNS, Decision: Deny})
	err := l.Close()
	if err == nil || !strings.Contains(err.Error(), "writing the audit log: disk full") {
		t.Errorf("Close = %v, want the write error", err)
	}
	if s := l.Summary(); s.Denied != 1 || s.Dropped != 1 {
		t.Errorf("Summary = %+v", s)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		events  int
		err     string
	}{
		{"empty", "", 0, ""},
		{"blank lines and unknown fields", `{"kind":"dns","decision":"allow","future":1}` + "\n\n" + `{"kind":"connect","decision":"deny"}` + "\n", 2, ""},
		{"cut off while writing", `{"kind":"dns","decision":"allow"}` + "\n" + `{"kind":"conn`, 1, "t.jsonl:2: "},
		{"not JSON", "hello\n", 0, "t.jsonl:1: "},
		{"line too long", `{"kind":"` + strings.Repeat("a", maxLine) + `"}`, 0, "after 0 events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "t.jsonl")
			if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			ev, err := Read(p)
			if len(ev) != tt.events {
				t.Errorf("%d events, want %d", len(ev), tt.events)
			}
			if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Errorf("err = %v, want %q", err, tt.err)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestSummaryString(t *testing.T) {
	for _, tt := range []struct {
		s    Summary
		want string
	}{
		{Summary{}, "0 allowed, 0 denied, 0 B in, 0 B out"},
		{Summary{Allowed: 12, Denied: 3, BytesIn: 1_234_567, BytesOut: 30_100}, "12 allowed, 3 denied, 1.2 MB in, 30.1 kB out"},
		{Summary{Allowed: 1, Dropped: 2, BytesIn: 999}, "1 allowed, 0 denied, 999 B in, 0 B out (2 events not logged)"},
		{Summary{Allowed: 4, CredentialUses: 3, Misuses: 1}, "4 allowed, 0 denied, 0 B in, 0 B out, credentials injected into 3 requests, 1 requests carried a placeholder where it does not belong"},
		{Summary{Allowed: 2, CredentialUses: 2, Echoes: 1}, "2 allowed, 0 denied, 0 B in, 0 B out, credentials injected into 2 requests, 1 answers echoed a credential (the sandbox got the placeholder)"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

// TestSummaryCountsCredentialsAndNotRequestBytesTwice: a request's bytes are part of its connection's
// event, so only the connection counts them; credential use and misuse are counted from the details.
func TestSummaryCountsCredentialsAndNotRequestBytesTwice(t *testing.T) {
	l := newLog(io.Discard, Options{}, 0, time.Now)
	l.Record(Event{Kind: KindConnect, Decision: Allow, BytesIn: 100, BytesOut: 10})
	l.Record(Event{Kind: KindHTTP, Decision: Allow, BytesIn: 90, BytesOut: 5, Detail: map[string]string{DetailCredentials: "API_KEY", DetailCredentialEchoed: "2"}})
	l.Record(Event{Kind: KindHTTP, Decision: Allow, Detail: map[string]string{DetailCredentialMisuse: "API_KEY in header X"}})
	s := l.Summary()
	if s.BytesIn != 100 || s.BytesOut != 10 || s.CredentialUses != 1 || s.Misuses != 1 || s.Echoes != 1 || s.Allowed != 3 {
		t.Fatalf("summary %+v", s)
	}
	l.Close()
}

// TestCloseSyncsUnlessTheCallerDoes: Close makes the file durable itself, except under CallerSyncs
// (a local run's log, which the run's keep syncs and a removed run deletes); either way every event
// is in the file when Close returns.
func TestCloseSyncsUnlessTheCallerDoes(t *testing.T) {
	for _, callerSyncs := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		l, err := NewLogWith(path, Options{CallerSyncs: callerSyncs})
		if err != nil {
			t.Fatal(err)
		}
		synced := 0
		l.fsync = func(f *os.File) error { synced++; return f.Sync() }
		l.Record(Event{Kind: KindConnect, Decision: Allow, Name: "example.test", Port: 443})
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 1, true: 0}[callerSyncs]; synced != want {
			t.Errorf("CallerSyncs=%v: Close synced the file %d times, want %d", callerSyncs, synced, want)
		}
		evs, err := Read(path)
		if err != nil || len(evs) != 1 || evs[0].Name != "example.test" {
			t.Errorf("CallerSyncs=%v: the log holds %+v (%v), want the one event", callerSyncs, evs, err)
		}
	}
}
