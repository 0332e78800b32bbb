package intercept

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
)

// reasonBadFraming is the audit Reason of a connection the framing gate refused.
const reasonBadFraming = "malformed HTTP request"

// framingGate is an intercepted HTTP/1.x client connection as net/http's server reads it: bytes reach
// the server only once the gateway's strict reader (http1.Framer) has framed them, a whole request
// head at a time, then its body by the framing that head announced. net/http is more lenient than
// that reader (bare LF, obs-fold, Content-Length with Transfer-Encoding, "chunked, identity"...), and
// a server the request is forwarded to might be more lenient still; with the gate in front, nothing
// the strict reader refuses is read by anyone, and net/http and the gateway can never disagree on
// where a request ends. At the first byte the strict reader refuses, the server reads an error (and
// closes without a word of its own), and the gate answers 400 when it closes.
//
// A hijacked connection (a websocket after its 101) is no longer HTTP: passThrough hands on the rest
// unread. Reads are not concurrent (net/http reads a connection from one goroutine at a time).
type framingGate struct {
	net.Conn
	fr    http1.Framer
	buf   []byte // read from the connection and not yet handed on: buf[lo:hi]
	lo    int
	hi    int
	ready int // of buf[lo:hi], framed and free to hand on

	pass atomic.Bool
	mu   sync.Mutex
	// held: Read frames nothing (holdUpgrade); set and cleared under mu, read without it on every
	// Read. deadline is the read deadline last set, and deadlineSet, while held, is closed and
	// replaced at each change of it and at the hold's end, for a read that waits in the hold.
	held        atomic.Bool
	deadline    time.Time
	deadlineSet chan struct{}
	refused     error // the strict reader's refusal (nil: none)
	inHead      bool  // the refusal is of a request head, between requests
	closeOne    sync.Once
	closeErr    error
}

// Initial and largest gate buffer: a head must be whole before it is handed on, and one larger than
// http1.MaxHead is refused.
const (
	gateBuffer    = 16 << 10
	maxGateBuffer = http1.MaxHead + gateBuffer
)

func newFramingGate(c net.Conn) *framingGate {
	return &framingGate{Conn: c, buf: make([]byte, gateBuffer)}
}

// Read hands on framed bytes, reading and framing more as needed. Body bytes, once their length is
// known, are read straight into p.
func (g *framingGate) Read(p []byte) (int, error) {
	for {
		if g.ready > 0 {
			n := copy(p, g.buf[g.lo:g.lo+g.ready])
			g.lo += n
			g.ready -= n
			return n, nil
		}
		if err := g.refusal(); err != nil {
			// A read error net/http takes for the client's (it closes without answering): the
			// gate answers when it closes.
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
		}
		if g.pass.Load() {
			if g.lo < g.hi {
				n := copy(p, g.buf[g.lo:g.hi])
				g.lo += n
				return n, nil
			}
			return g.Conn.Read(p)
		}
		if held, err := g.waitHeld(); held {
			// What the client sends after an upgrade request is neither framed nor handed on until
			// the answer says whether the protocol switched; net/http's pending read ends as it
			// does when it aborts one, at its deadline.
			if err != nil {
				return 0, err
			}
			continue
		}
		if g.lo == g.hi {
			if left := g.fr.InBody(); left > 0 {
				if uint64(len(p)) > left {
					p = p[:left]
				}
				n, err := g.Conn.Read(p)
				g.fr.Skip(n)
				return n, err
			}
		} else {
			head := g.fr.AtHead()
			k, err := g.fr.Next(g.buf[g.lo:g.hi])
			if err != nil {
				g.mu.Lock()
				g.refused, g.inHead = err, head
				g.mu.Unlock()
				continue
			}
			if k > 0 {
				g.ready = k
				continue
			}
		}
		if err := g.fill(); err != nil {
			return 0, err
		}
	}
}

// refusal is the strict reader's refusal, or nil.
func (g *framingGate) refusal() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused
}

// fill reads more of the connection into the buffer, making room first.
func (g *framingGate) fill() error {
	if g.lo == g.hi {
		g.lo, g.hi = 0, 0
	}
	if g.hi == len(g.buf) {
		switch {
		case g.lo > 0:
			g.hi = copy(g.buf, g.buf[g.lo:g.hi])
			g.lo = 0
		case len(g.buf) < maxGateBuffer:
			g.buf = append(g.buf, make([]byte, min(len(g.buf), maxGateBuffer-len(g.buf)))...)
			g.buf = g.buf[:cap(g.buf)]
		default:
			// The Framer refuses a head this large before the buffer fills; a full buffer is a bug.
			return errors.New("intercept: framing buffer full")
		}
	}
	n, err := g.Conn.Read(g.buf[g.hi:])
	g.hi += n
	if n > 0 {
		return nil // an error recurs on the next read
	}
	return err
}

// passThrough stops framing: the connection was hijacked, and what follows is not HTTP.
func (g *framingGate) passThrough() {
	if g != nil {
		g.pass.Store(true)
		g.release()
	}
}

// holdUpgrade is called before an answer that may switch protocols (a websocket's 101) is written.
// net/http flushes a 101 before the hijack that makes the gate pass bytes through, and its
// background read, pending in the gate meanwhile, would frame the client's first websocket frame as
// a request head, refuse it, and have the gate answer 400 into the websocket (seen under load in
// TestWebsocketMessageRelay). While held, what the client sends stays unread by anyone, and a read
// waits until its deadline: net/http aborts its pending read with one, at the hijack (then
// passThrough ends the hold) and at the request's end (release, when the switch failed).
func (g *framingGate) holdUpgrade() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held.Store(true)
}

// release ends a hold: a read waiting in it goes on, and what follows is read as before.
func (g *framingGate) release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held.Load() {
		g.held.Store(false)
		g.signalLocked()
	}
}

// signalLocked wakes the reads waiting in a hold.
func (g *framingGate) signalLocked() {
	if g.deadlineSet != nil {
		close(g.deadlineSet)
	}
	g.deadlineSet = make(chan struct{})
}

// waitHeld reports whether the gate is held; if so it waits until the read deadline passes (err is
// then a timeout) or the hold ends (err is nil: the caller reads on).
func (g *framingGate) waitHeld() (held bool, err error) {
	if !g.held.Load() {
		return false, nil // the common case, without the lock: no upgrade is being answered
	}
	for {
		g.mu.Lock()
		if !g.held.Load() {
			g.mu.Unlock()
			return held, nil
		}
		held = true
		if g.deadlineSet == nil {
			g.deadlineSet = make(chan struct{})
		}
		d, changed := g.deadline, g.deadlineSet
		g.mu.Unlock()
		if !d.IsZero() && !time.Now().Before(d) {
			return true, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
		var expiry <-chan time.Time
		var t *time.Timer
		if !d.IsZero() {
			t = time.NewTimer(time.Until(d))
			expiry = t.C
		}
		select {
		case <-changed:
		case <-expiry:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// SetReadDeadline sets the connection's read deadline, which also bounds a read waiting in a hold.
func (g *framingGate) SetReadDeadline(t time.Time) error {
	err := g.Conn.SetReadDeadline(t)
	g.noteDeadline(t)
	return err
}

// SetDeadline is SetReadDeadline for both directions.
func (g *framingGate) SetDeadline(t time.Time) error {
	err := g.Conn.SetDeadline(t)
	g.noteDeadline(t)
	return err
}

// noteDeadline keeps the read deadline for waitHeld and wakes a read waiting there (only a held
// gate can have one: net/http sets deadlines at every request, which need not cost a channel).
func (g *framingGate) noteDeadline(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deadline = t
	if g.held.Load() {
		g.signalLocked()
	}
}

// Close answers 400 first if the gate refused a request head (net/http has written all it will by
// the time it closes), then closes the connection, waiting a moment for the client to read the
// answer.
func (g *framingGate) Close() error {
	g.closeOne.Do(func() {
		g.mu.Lock()
		refused, inHead := g.refused, g.inHead
		g.mu.Unlock()
		if refused != nil && inHead {
			body := fmt.Sprintf("cordon: refused the request (%s: %v)\n", reasonBadFraming, refused)
			_ = g.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = fmt.Fprintf(g.Conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				len(body), body)
			if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
				_ = g.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				_, _ = io.CopyN(io.Discard, g.Conn, 256<<10)
			}
		}
		g.closeErr = g.Conn.Close()
		// A read waiting in a hold goes on to the closed connection and ends with its error.
		g.release()
	})
	return g.closeErr
}

// CloseWrite half-closes the connection underneath, as net/http does before closing a connection
// it has unread input on.
func (g *framingGate) CloseWrite() error {
	if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// record writes the audit event and the notification of a refusal, if the gate refused anything.
func (g *framingGate) record(i *Interceptor, c *conn) {
	if g == nil {
		return
	}
	g.mu.Lock()
	refused, inHead := g.refused, g.inHead
	g.mu.Unlock()
	if refused == nil {
		return
	}
	ev := audit.Event{
		Time: time.Now(), Kind: audit.KindHTTP, Name: c.name, Port: c.port, Decision: audit.Deny,
		Rule: gatewayRule, Reason: reasonBadFraming,
		Detail: map[string]string{"error": refused.Error()},
	}
	if inHead {
		ev.Detail["status"] = strconv.Itoa(400)
	}
	i.rec.Record(ev)
	if i.notify != nil {
		i.notify(c.name+" framing", fmt.Sprintf("blocked a request to %s://%s (%s: %v)", c.scheme, c.upstream(), reasonBadFraming, refused))
	}
}
