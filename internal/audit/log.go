package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// maxPending bounds the events held in memory while the file is slow: past it, Record drops events
// (counting them) instead of blocking the gateway or growing without limit.
const maxPending = 8 << 20

// maxLine bounds one line when reading a log back, so a corrupt file cannot exhaust memory.
const maxLine = 1 << 20

// Summary is the run's one-line account of its egress: decisions taken each way and bytes relayed.
type Summary struct {
	// Allowed and Denied count events by decision (DNS answers and connections alike).
	Allowed, Denied int
	// BytesIn and BytesOut add up what came from and went to upstreams.
	BytesIn, BytesOut int64
	// Dropped counts events that could not be written (the file was too slow or failing); the
	// summary still includes them.
	Dropped int
	// Echoes counts answers that held a credential value sent to their host (replaced by its
	// placeholder before the sandbox read them).
	Echoes int
	// CredentialUses counts requests a real credential value went into; Misuses, requests that
	// carried a placeholder where its credential is not allowed.
	CredentialUses, Misuses int
}

// String renders the summary for the end of a run: "12 allowed, 3 denied, 1.2 MB in, 30.1 kB out".
func (s Summary) String() string {
	out := fmt.Sprintf("%d allowed, %d denied, %s in, %s out", s.Allowed, s.Denied, byteCount(s.BytesIn), byteCount(s.BytesOut))
	if s.CredentialUses > 0 || s.Misuses > 0 {
		out += fmt.Sprintf(", credentials injected into %d requests", s.CredentialUses)
	}
	if s.Echoes > 0 {
		out += fmt.Sprintf(", %d answers echoed a credential (the sandbox got the placeholder)", s.Echoes)
	}
	if s.Misuses > 0 {
		out += fmt.Sprintf(", %d requests carried a placeholder where it does not belong", s.Misuses)
	}
	if s.Dropped > 0 {
		out += fmt.Sprintf(" (%d events not logged)", s.Dropped)
	}
	return out
}

func byteCount(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// Log is the run's audit log: a Recorder that appends one JSON object per line to a file only its
// owner can read. Record only encodes and queues; a goroutine of the Log's own writes batches, so the
// gateway's hot path never waits on the disk.
type Log struct {
	w    io.Writer
	file *os.File // nil for a Log over a plain writer (tests)

	mu      sync.Mutex
	pending []byte
	sum     Summary
	closed  bool
	err     error // the first write error

	wake chan struct{} // capacity 1: "there is something to write"
	stop chan struct{}
	done chan struct{}
}

// NewLog creates (or appends to) the log at path with mode 0600. It refuses a symbolic link or
// anything but a regular file there, so the log cannot be pointed at another file.
func NewLog(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil {
		// An existing file keeps its mode on open; the log may hold names the user considers private.
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	l := newLog(f)
	l.file = f
	return l, nil
}

func newLog(w io.Writer) *Log {
	l := &Log{w: w, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.writer()
	return l
}

// Record implements Recorder. A zero Time is set to now. Record never waits for the disk; after Close,
// or when maxPending is queued, the event is counted in the Summary but not written.
func (l *Log) Record(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	encErr := enc.Encode(e) // cannot fail for Event's field types; counted as dropped if it ever does

	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Decision {
	case "allow":
		l.sum.Allowed++
	case "deny":
		l.sum.Denied++
	}
	if e.Kind != "http" { // a request's bytes are already counted in its connection's event
		l.sum.BytesIn += e.BytesIn
		l.sum.BytesOut += e.BytesOut
	}
	if e.Detail[DetailCredentials] != "" {
		l.sum.CredentialUses++
	}
	if e.Detail[DetailCredentialMisuse] != "" {
		l.sum.Misuses++
	}
	if e.Detail[DetailCredentialEchoed] != "" {
		l.sum.Echoes++
	}
	if l.closed || encErr != nil || len(l.pending)+buf.Len() > maxPending {
		l.sum.Dropped++
		return
	}
	l.pending = append(l.pending, buf.Bytes()...)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Summary returns the totals of every event recorded so far.
func (l *Log) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sum
}

// writer writes queued events in batches until Close, then writes what is left.
func (l *Log) writer() {
	defer close(l.done)
	var spare []byte
	for {
		select {
		case <-l.wake:
		case <-l.stop:
			l.flush(spare)
			return
		}
		spare = l.flush(spare)
	}
}

// flush swaps the queue for the spare buffer and writes it outside the lock; it returns the written
// buffer emptied, for reuse.
func (l *Log) flush(spare []byte) []byte {
	l.mu.Lock()
	batch := l.pending
	l.pending = spare[:0]
	l.mu.Unlock()
	if len(batch) == 0 {
		return batch
	}
	if _, err := l.w.Write(batch); err != nil {
		l.mu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("writing the audit log: %w", err)
		}
		l.sum.Dropped += bytes.Count(batch, []byte{'\n'})
		l.mu.Unlock()
	}
	if cap(batch) > maxPending {
		return nil
	}
	return batch[:0]
}

// Close writes every queued event, notes in the log how many were dropped, if any, and closes the
// file. It returns the first write error. Events recorded afterwards are counted but not written.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errors.New("audit log already closed")
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done

	l.mu.Lock()
	sum, err := l.sum, l.err
	l.mu.Unlock()
	if sum.Dropped > 0 && err == nil {
		note, _ := json.Marshal(Event{Time: time.Now(), Kind: "audit",
			Reason: fmt.Sprintf("%d events were not logged (the log could not keep up)", sum.Dropped)})
		if _, werr := l.w.Write(append(note, '\n')); werr != nil {
			err = fmt.Errorf("writing the audit log: %w", werr)
		}
	}
	if l.file != nil {
		if serr := l.file.Sync(); serr != nil && err == nil {
			err = fmt.Errorf("syncing the audit log: %w", serr)
		}
		if cerr := l.file.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the audit log: %w", cerr)
		}
	}
	return err
}

// Read returns the events of the log at path, for cordon log. Unknown fields are ignored (a newer
// cordon may add some). On a line that does not parse (such as the last one of a run killed while
// writing) it returns the events before it together with an error naming the line.
func Read(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	return decode(f, path)
}

// decode reads JSON-lines events from r; name is used in errors.
func decode(r io.Reader, path string) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return events, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return events, fmt.Errorf("reading %s after %d events: %w", path, len(events), err)
	}
	return events, nil
}
