package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxPending bounds the events held in memory while the file is slow: past it, Record drops events
// (counting them) instead of blocking the gateway or growing without limit.
const maxPending = 8 << 20

// maxLine bounds one line when reading a log back, so a corrupt file cannot exhaust memory.
const maxLine = 1 << 20

// DefaultMaxBytes is the size a run's audit log may reach when nothing smaller is asked for: a few
// hundred thousand events of a few hundred bytes (with repeats folded, days of a busy agent), and
// no more disk than a run's state can spare.
const DefaultMaxBytes = 64 << 20

// reserve is the part of the byte cap kept for the log's own records: the note that it is full,
// the count of what it suppressed and the count of what it dropped.
const reserve = 4 << 10

// Summary is the run's one-line account of its egress: decisions taken each way and bytes relayed.
type Summary struct {
	// Allowed and Denied count events by decision (DNS answers and connections alike).
	Allowed, Denied int
	// BytesIn and BytesOut add up what came from and went to upstreams.
	BytesIn, BytesOut int64
	// Dropped counts events that could not be written (the file was too slow or failing); the
	// summary still includes them.
	Dropped int
	// Suppressed counts decisions not written because the log reached its byte cap; the summary
	// still includes them.
	Suppressed int
	// Echoes counts answers that held a credential value sent to their host (replaced by its
	// placeholder before the sandbox read them).
	Echoes int
	// CredentialUses counts requests a real credential value went into; Misuses, requests that
	// carried a placeholder where its credential is not allowed.
	CredentialUses, Misuses int
	// AgentSignatures counts signatures the sandbox's ssh-agent made; AgentRefusals, its requests
	// refused (a key the policy does not list, an add, a remove, a lock). Neither is in Allowed or
	// Denied, which count network decisions.
	AgentSignatures, AgentRefusals int
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
	if s.AgentSignatures > 0 || s.AgentRefusals > 0 {
		out += fmt.Sprintf(", ssh-agent: %d signatures, %d requests refused", s.AgentSignatures, s.AgentRefusals)
	}
	if s.Dropped > 0 {
		out += fmt.Sprintf(" (%d events not logged)", s.Dropped)
	}
	if s.Suppressed > 0 {
		out += fmt.Sprintf(" (%d events not logged: the audit log reached its size limit)", s.Suppressed)
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
// owner can read. Record only folds or encodes and queues; a goroutine of the Log's own writes
// batches, so the gateway's hot path never waits on the disk. The log is bounded whatever the agent
// does: repeated decisions fold into one event (fold.go), and past its byte cap the log writes
// nothing more but counts, and ends with one record of what it suppressed.
type Log struct {
	w    io.Writer
	file *os.File // nil for a Log over a plain writer (tests)
	max  int64    // the byte cap
	now  func() time.Time
	// onEvent is Options.OnEvent; only the writer (and Close, once the writer is done) calls it.
	onEvent func(Event)
	// callerSyncs is Options.CallerSyncs; fsync is (*os.File).Sync, what Close calls otherwise.
	callerSyncs bool
	fsync       func(*os.File) error

	mu         sync.Mutex
	pending    []byte
	size       int64 // bytes in the file and queued for it
	folds      folder
	sum        Summary
	suppressed map[Kind]int // by kind
	capped     bool
	closed     bool
	err        error // the first write error

	wake chan struct{} // capacity 1: "there is something to write"
	stop chan struct{}
	done chan struct{}
}

// Options adjusts a Log.
type Options struct {
	// MaxBytes caps the log file, what it held before included; 0 means DefaultMaxBytes. A cap
	// below 16 KiB is raised to it: the log's own records need room.
	MaxBytes int64
	// OnEvent, when set, receives every event the log writes, in the log's order and as a reader of
	// the file would decode it: a fold arrives once, with its count, when the fold is written; the
	// log's own notes (KindAudit) arrive too. It is called on the log's writer goroutine right after
	// each batch is written (the closing notes from Close), never after Close has returned. Record
	// never waits for it, so a slow callback cannot slow the gateway's decisions; but it holds up
	// the writer, and past maxPending queued the log drops events (counted in Summary.Dropped) as it
	// does for a slow disk, so it must not block for long.
	OnEvent func(Event)
	// GroupReadable makes the file 0640 instead of 0600: for a log that a reader of the writer's
	// group collects (the Kubernetes pod's keeper).
	GroupReadable bool
	// CallerSyncs leaves the file's durability to the caller: Close writes the last records and
	// closes it without an fsync. A local run's log lives in the run's directory, which is removed
	// when the run changed nothing and made durable as a whole when it is kept; an fsync at Close
	// is a disk flush for a file about to be deleted in the first case and a second one in the
	// other.
	CallerSyncs bool
}

// NewLog creates (or appends to) the log at path with mode 0600 and the default options.
func NewLog(path string) (*Log, error) { return NewLogWith(path, Options{}) }

// NewLogWith creates (or appends to) the log at path with mode 0600. It refuses a symbolic link or
// anything but a regular file there, so the log cannot be pointed at another file.
func NewLogWith(path string, opts Options) (*Log, error) {
	mode := os.FileMode(0o600)
	if opts.GroupReadable {
		mode = 0o640
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil {
		// An existing file keeps its mode on open; the log may hold names the user considers private.
		err = f.Chmod(mode)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	l := newLog(f, opts, fi.Size(), time.Now)
	l.file, l.callerSyncs, l.fsync = f, opts.CallerSyncs, (*os.File).Sync
	return l, nil
}

// newLog starts a Log over w, which already holds size bytes, with opts and now as the clock that
// times the folds.
func newLog(w io.Writer, opts Options, size int64, now func() time.Time) *Log {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	l := &Log{w: w, max: max(limit, 4*reserve), size: size, now: now, onEvent: opts.OnEvent, folds: newFolder(),
		suppressed: map[Kind]int{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.writer()
	return l
}

// Record implements Recorder. A zero Time is set to now. Record never waits for the disk. Every
// event is counted in the Summary; it is written unless it folds into another (fold.go), the log
// has reached its cap, maxPending is queued, or the log is closed.
func (l *Log) Record(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.mu.Lock()
	l.countLocked(&e)
	if l.closed {
		l.sum.Dropped++
		l.mu.Unlock()
		return
	}
	if l.capped {
		l.suppressLocked(e.Kind, 1)
		l.mu.Unlock()
		return
	}
	folded := l.folds.add(&e, l.now(), l.emitLocked)
	l.mu.Unlock()
	if folded {
		return
	}
	line, err := encode(e) // outside the lock: the hot path's only real work
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || err != nil { // err cannot happen for Event's field types; counted if it ever does
		l.sum.Dropped++
		return
	}
	l.queueLocked(line, e.Kind, 1)
}

// countLocked adds e to the Summary: one network decision per Record.
func (l *Log) countLocked(e *Event) { l.sum.add(e, 1) }

// add counts e as n network decisions (one as it is recorded; a fold's count when read back from a
// file: SummarizeFile) and its credential details once.
func (s *Summary) add(e *Event, n int) {
	if e.Kind == KindSSHAgent {
		if e.Decision == Allow {
			s.AgentSignatures += e.Decisions()
		} else {
			s.AgentRefusals += e.Decisions()
		}
		return
	}
	switch e.Decision {
	case Allow:
		s.Allowed += n
	case Deny:
		s.Denied += n
	}
	if e.Kind != KindHTTP { // a request's bytes are already counted in its connection's event
		s.BytesIn += e.BytesIn
		s.BytesOut += e.BytesOut
	}
	if e.Detail[DetailCredentials] != "" {
		s.CredentialUses++
	}
	if e.Detail[DetailCredentialMisuse] != "" {
		s.Misuses++
	}
	if e.Detail[DetailCredentialEchoed] != "" {
		s.Echoes++
	}
}

// emitLocked queues a fold's event: the repeats it counted are written (or suppressed) only now.
func (l *Log) emitLocked(e Event) {
	line, err := encode(e)
	if err != nil {
		l.sum.Dropped += e.Decisions()
		return
	}
	l.queueLocked(line, e.Kind, e.Decisions())
}

// queueLocked queues line, which stands for n decisions of kind, unless the cap or maxPending is
// reached. The first line the cap refuses closes the log to events: a note says so at once (for
// whoever reads the log while the run goes on), and Close adds the count.
func (l *Log) queueLocked(line []byte, kind Kind, n int) {
	if l.capped || l.size+int64(len(line)) > l.max-reserve {
		l.suppressLocked(kind, n)
		return
	}
	if len(l.pending)+len(line) > maxPending {
		l.sum.Dropped += n
		return
	}
	l.appendLocked(line)
}

// appendLocked queues line for the writer.
func (l *Log) appendLocked(line []byte) {
	l.pending = append(l.pending, line...)
	l.size += int64(len(line))
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// suppressLocked counts n decisions of kind that the cap keeps out of the log.
func (l *Log) suppressLocked(kind Kind, n int) {
	l.sum.Suppressed += n
	l.suppressed[kind] += n
	if l.capped {
		return
	}
	l.capped = true
	note, err := encode(Event{Time: time.Now(), Kind: KindAudit,
		Reason: fmt.Sprintf("the audit log reached its limit of %s: further events are counted, not written", byteCount(l.max))})
	if err == nil {
		l.appendLocked(note) // within the reserve
	}
}

// suppressedRecord is the log's last line when the cap suppressed events: how many, by kind.
func (l *Log) suppressedRecord() Event {
	kinds := slices.Sorted(maps.Keys(l.suppressed))
	detail := make(map[string]string, len(kinds))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		detail[string(k)] = strconv.Itoa(l.suppressed[k])
		parts = append(parts, fmt.Sprintf("%s %d", k, l.suppressed[k]))
	}
	return Event{Time: time.Now(), Kind: KindAudit, Count: l.sum.Suppressed, Detail: detail,
		Reason: fmt.Sprintf("%d events suppressed: the audit log reached its limit of %s (%s)", l.sum.Suppressed, byteCount(l.max), strings.Join(parts, ", "))}
}

// encode is e as one line of the log.
func encode(e Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Summary returns the totals of every event recorded so far.
func (l *Log) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sum
}

// writer writes queued events in batches until Close, then writes what is left. Once a window it
// has the folds whose window is over written.
func (l *Log) writer() {
	defer close(l.done)
	tick := time.NewTicker(foldWindow)
	defer tick.Stop()
	var spare []byte
	for {
		select {
		case <-l.wake:
		case <-tick.C:
			l.expire(false)
		case <-l.stop:
			l.flush(spare)
			return
		}
		spare = l.flush(spare)
	}
}

// expire queues the folds whose window is over, or with all every fold that counted repeats.
func (l *Log) expire(all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.folds.expire(l.now(), all, l.emitLocked)
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
	l.deliver(batch)
	if cap(batch) > maxPending {
		return nil
	}
	return batch[:0]
}

// deliver hands the events of lines, just written (or lost to a write error, which Summary counts),
// to Options.OnEvent. They are decoded from the lines, not kept from Record, so that the callback
// sees exactly the log's stream and no map a recorder might still hold.
func (l *Log) deliver(lines []byte) {
	if l.onEvent == nil || len(lines) == 0 {
		return
	}
	events, _ := decode(bytes.NewReader(lines), "") // the log's own encoding: it always decodes
	for _, e := range events {
		l.onEvent(e)
	}
}

// Close writes the folds' counts and every queued event, notes in the log how many events the cap
// suppressed and how many were dropped, if any, and closes the file. It returns the first write
// error. Events recorded afterwards are counted but not written.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errors.New("audit log already closed")
	}
	l.closed = true
	l.folds.expire(l.now(), true, l.emitLocked)
	l.mu.Unlock()
	close(l.stop)
	<-l.done

	l.mu.Lock()
	sum, err := l.sum, l.err
	var notes []byte
	if sum.Suppressed > 0 {
		if line, eerr := encode(l.suppressedRecord()); eerr == nil {
			notes = append(notes, line...)
		}
	}
	l.mu.Unlock()
	if sum.Dropped > 0 {
		if line, eerr := encode(Event{Time: time.Now(), Kind: KindAudit, Count: sum.Dropped,
			Reason: fmt.Sprintf("%d events were not logged (the log could not keep up)", sum.Dropped)}); eerr == nil {
			notes = append(notes, line...)
		}
	}
	if len(notes) > 0 && err == nil {
		if _, werr := l.w.Write(notes); werr != nil {
			err = fmt.Errorf("writing the audit log: %w", werr)
		}
		l.deliver(notes) // the writer is done: this goroutine is the only caller now
	}
	if l.file != nil {
		if !l.callerSyncs {
			if serr := l.fsync(l.file); serr != nil && err == nil {
				err = fmt.Errorf("syncing the audit log: %w", serr)
			}
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
