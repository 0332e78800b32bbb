package redact

import (
	"errors"
	"io"
	"slices"
	"sync"
	"time"
)

// readChunk is how much a Reader reads from its source at a time.
const readChunk = 32 << 10

// ErrClosed is what a Reader's Read returns after Close.
var ErrClosed = errors.New("redact: read after Close")

// Reader returns src with every secret replaced. Of what src has given it always holds back the
// last Hold bytes, whatever they are, so a secret split across reads is still found; they go on
// when more arrives, at the end, or, if idle > 0, idle after the last bytes arrived, whatever came
// of the search (a secret whole by then is replaced, a part of one passes). The release keeps a
// stream that pauses (server-sent events, a websocket answering one message at a time) from
// holding its last bytes until the next message, or for ever; that it depends on the time alone is
// what keeps the held tail from telling the reader whether it began a secret. The price is the
// residual: a value the upstream sends in two parts more than idle apart is not found.
//
// With idle > 0 a goroutine reads src ahead (one chunk at a time) so that the release can happen
// while src blocks; it starts at the first Read, not before, since the caller may still be using
// what reading src changes (httputil.ReverseProxy announces an answer's trailer from res.Trailer,
// which the body's end fills in, before it reads the body: a read ahead from the start raced with
// that). Close stops it once the caller has closed src (which ends a read in progress).
// With idle <= 0 held bytes wait for more input or the end, and Read reads src itself. Errors
// from src are returned once the bytes before them are.
func (r *Replacer) Reader(src io.Reader, idle time.Duration) io.ReadCloser {
	if r == nil {
		return io.NopCloser(src)
	}
	return r.newReader(src, nil, idle)
}

// feeder splits what a source gives into payload and framing.
type feeder interface {
	feed(s *stream, b []byte) error
}

func (r *Replacer) newReader(src io.Reader, f feeder, idle time.Duration) io.ReadCloser {
	if idle <= 0 {
		return &syncReader{s: stream{r: r}, f: f, src: src}
	}
	a := &asyncReader{
		s: stream{r: r}, f: f, idle: idle,
		chunks: make(chan chunk),
		free:   make(chan []byte, 2),
		quit:   make(chan struct{}),
		timer:  time.NewTimer(time.Hour),
	}
	a.timer.Stop()
	a.free <- make([]byte, readChunk)
	a.free <- make([]byte, readChunk)
	a.src = src
	return a
}

// syncReader is a Reader without a release: it reads its source when it has nothing to give.
type syncReader struct {
	s   stream
	f   feeder // nil: all payload
	src io.Reader
	buf []byte // what is read from src for f
	err error  // src's error (or f's), returned once the bytes before it are
}

func (rd *syncReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if rd.f == nil && rd.s.r.sameLength && rd.err == nil && !rd.s.pending() && len(p) >= 2*rd.s.r.maxLen {
		return rd.readInPlace(p)
	}
	for {
		if n := rd.s.copyOut(p); n > 0 {
			return n, nil
		}
		if rd.err != nil {
			return 0, rd.err
		}
		rd.s.compact()
		var err error
		if rd.f == nil {
			rd.s.pay = slices.Grow(rd.s.pay, readChunk)
			var n int
			n, err = rd.src.Read(rd.s.pay[len(rd.s.pay):cap(rd.s.pay)])
			rd.s.pay = rd.s.pay[:len(rd.s.pay)+n]
		} else {
			if rd.buf == nil {
				rd.buf = make([]byte, readChunk)
			}
			n, rerr := rd.src.Read(rd.buf)
			err = rerr
			if ferr := rd.f.feed(&rd.s, rd.buf[:n]); ferr != nil {
				err = ferr
			}
		}
		rd.s.settle(err != nil)
		rd.err = err
	}
}

// readInPlace is Read without a copy of its own, for replacements as long as their secrets (the
// usual case: placeholders imitate their values): the held-back tail and then the source's bytes
// are read into p, secrets are overwritten where they lie, and the new tail is kept back.
func (rd *syncReader) readInPlace(p []byte) (int, error) {
	s := &rd.s
	for {
		k := copy(p, s.pay[s.rel:]) // the held tail, at most Hold bytes: p has room
		done := s.done - s.rel
		n, err := rd.src.Read(p[k:])
		total := k + n
		_, done, rel := s.r.settle(p[:total], done, err != nil)
		s.pay = append(s.pay[:0], p[rel:total]...)
		s.rd, s.rel, s.done = 0, 0, done-rel
		rd.err = err
		switch {
		case rel > 0:
			return rel, nil // an error is returned by the next Read, once the tail is given
		case err != nil:
			return 0, err
		}
	}
}

func (rd *syncReader) Close() error { return nil }

// asyncReader is a Reader with a release: a goroutine reads the source ahead, so that what is held
// back can go idle after it arrived while the source has nothing more.
type asyncReader struct {
	s        stream
	f        feeder
	src      io.Reader // read ahead from the first Read on (started)
	started  bool
	idle     time.Duration
	chunks   chan chunk    // read ahead
	free     chan []byte   // buffers for readAhead to read into
	quit     chan struct{} // closed by Close
	once     sync.Once
	timer    *time.Timer
	deadline time.Time // when what is held goes: idle after the last bytes arrived
	err      error
}

// chunk is one read of the source and when it returned.
type chunk struct {
	b   []byte
	err error
	at  time.Time
}

func (a *asyncReader) readAhead(src io.Reader) {
	for {
		var buf []byte
		select {
		case buf = <-a.free:
		case <-a.quit:
			return
		}
		n, err := src.Read(buf[:cap(buf)])
		select {
		case a.chunks <- chunk{b: buf[:n], err: err, at: time.Now()}:
		case <-a.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

func (a *asyncReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !a.started {
		select {
		case <-a.quit:
			return 0, ErrClosed
		default:
		}
		a.started = true
		go a.readAhead(a.src)
	}
	for {
		if n := a.s.copyOut(p); n > 0 {
			return n, nil
		}
		if a.err != nil {
			return 0, a.err
		}
		if !a.s.held() {
			select {
			case c := <-a.chunks:
				a.take(c)
			case <-a.quit:
				return 0, ErrClosed
			}
			continue
		}
		if wait := time.Until(a.deadline); wait > 0 {
			a.timer.Reset(wait)
			select {
			case c := <-a.chunks:
				a.take(c)
				continue
			case <-a.timer.C:
			case <-a.quit:
				return 0, ErrClosed
			}
		}
		// The deadline has passed. Bytes that arrived before it are taken first; then what is
		// held goes, whatever it is.
		select {
		case c := <-a.chunks:
			if !c.at.Before(a.deadline) {
				a.s.settle(true)
			}
			a.take(c)
		default:
			a.s.settle(true)
		}
	}
}

// take adds a chunk read ahead to the stream and settles it.
func (a *asyncReader) take(c chunk) {
	if len(c.b) > 0 {
		a.deadline = c.at.Add(a.idle)
	}
	a.s.compact()
	err := c.err
	if a.f == nil {
		a.s.payload(c.b)
	} else if ferr := a.f.feed(&a.s, c.b); ferr != nil {
		err = ferr
	}
	a.free <- c.b[:0] // there are two buffers and room for both
	a.s.settle(err != nil)
	a.err = err
}

// Close stops the read-ahead once its read in progress returns (the caller closes the source to
// end it). A Read after Close returns ErrClosed.
func (a *asyncReader) Close() error {
	a.once.Do(func() { close(a.quit) })
	return nil
}
