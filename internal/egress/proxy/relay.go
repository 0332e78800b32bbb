package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Relay buffer sizes. A connection starts with a small buffer and moves to a large one once a read
// fills the small one (a bulk transfer). Measured on loopback (BenchmarkRelayCopy), a relay copying
// through 4 MiB buffers costs about a third less CPU per byte than splice(2) through a 1 MiB pipe,
// most likely because it wakes up less often and the kernel builds a few large segments from each
// write rather than many page-sized fragments.
const (
	smallBuffer = 64 << 10
	largeBuffer = 4 << 20
	// maxLargeBuffers bounds the large buffers in use at once (64 MiB); past it, bulk transfers use
	// small buffers, so memory stays bounded however many connections stream at once.
	maxLargeBuffers = 16
	// maxIdleSmall and maxIdleLarge bound the buffers kept for reuse between bursts.
	maxIdleSmall = 64
	maxIdleLarge = 4
)

// bufferPool hands out relay buffers. A relay takes a buffer only when its source has bytes to read
// and gives it back as soon as they are written and the source has nothing more, so an idle
// connection holds no buffer and costs only its two sockets. (io.Copy between two *net.TCPConn would
// splice through a pipe it holds for the whole copy, idle or not: two more descriptors per direction
// and connection, which halved the connections the gateway could hold under its RLIMIT_NOFILE, and
// the pipes then wait in a sync.Pool until the garbage collector closes them.)
type bufferPool struct {
	mu         sync.Mutex
	small      [][]byte
	large      [][]byte
	largeInUse int
	inUse      int // buffers of either size handed out and not returned, for tests
	// hold is how long a relay may wait for a batch of a bulk flow (see lowWater): batchHold if
	// zero; a test lengthens it to see the hold.
	hold time.Duration
}

// get returns a buffer, a large one if large is asked and fewer than maxLargeBuffers are in use.
func (p *bufferPool) get(large bool) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse++
	if large && p.largeInUse < maxLargeBuffers {
		p.largeInUse++
		if n := len(p.large); n > 0 {
			b := p.large[n-1]
			p.large = p.large[:n-1]
			return b
		}
		return make([]byte, largeBuffer)
	}
	if n := len(p.small); n > 0 {
		b := p.small[n-1]
		p.small = p.small[:n-1]
		return b
	}
	return make([]byte, smallBuffer)
}

// put takes back a buffer from get, keeping it for reuse or leaving it to the garbage collector.
func (p *bufferPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse--
	if len(b) == largeBuffer {
		p.largeInUse--
		if len(p.large) < maxIdleLarge {
			p.large = append(p.large, b)
		}
		return
	}
	if len(p.small) < maxIdleSmall {
		p.small = append(p.small, b)
	}
}

// drain drops the idle buffers; buffers in use go back to the pool when their relay ends.
func (p *bufferPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.small, p.large = nil, nil
}

// buffersInUse reports how many buffers relays hold.
func (p *bufferPool) buffersInUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse
}

// errNotRaw is returned by copyRaw when a connection has no descriptor to read or write directly.
var errNotRaw = errors.New("not a raw socket")

// rawConn is a socket the relay reads and writes through its descriptor.
type rawConn interface {
	net.Conn
	syscall.Conn
}

// rawSocket is a TCP or unix socket (a fixture service's) that the relay may read and write
// around net.Conn; any wrapping type is not.
func rawSocket(c any) (rawConn, bool) {
	switch c := c.(type) {
	case *net.TCPConn:
		return c, true
	case *net.UnixConn:
		return c, true
	}
	return nil, false
}

// relay copies from src to dst until src's end of stream, as io.Copy does, with a pooled buffer
// held only while bytes are in flight (see bufferPool). It returns the bytes written to dst.
func (p *bufferPool) relay(dst io.Writer, src net.Conn) (int64, error) {
	n, err := p.copyRaw(dst, src, -1)
	if errors.Is(err, errNotRaw) {
		return io.Copy(dst, src)
	}
	return n, err
}

// relayN copies exactly n bytes from src to dst like io.CopyN (io.EOF if src ends first), the way
// relay does.
func (p *bufferPool) relayN(dst io.Writer, src net.Conn, n int64) (int64, error) {
	m, err := p.copyRaw(dst, src, n)
	if errors.Is(err, errNotRaw) {
		return io.CopyN(dst, src, n)
	}
	if err == nil && m < n {
		err = io.EOF
	}
	return m, err
}

// copyRaw moves bytes from src to dst until src's end of stream or, if limit >= 0, limit bytes,
// reading and writing the sockets' descriptors through the runtime's poller (syscall.RawConn), so
// that it can tell "nothing to read now" from "wait for it" and hand its buffer back in between.
func (p *bufferPool) copyRaw(dst io.Writer, src net.Conn, limit int64) (written int64, err error) {
	// Only plain TCP sockets: a connection type that wraps its socket (TLS, a buffered reader) must
	// not be read or written around.
	sc, ok1 := rawSocket(src)
	dc, ok2 := rawSocket(dst)
	if !ok1 || !ok2 {
		return 0, errNotRaw
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, errNotRaw
	}
	wc, err := dc.SyscallConn()
	if err != nil {
		return 0, errNotRaw
	}

	var (
		buf   []byte
		large bool  // this connection has filled a small buffer: a bulk transfer
		n     int   // bytes in buf not yet written
		serr  error // the read(2) or write(2) error, as opposed to the poller's
	)
	// A TCP source is read in batches while it flows in bulk (see lowWater).
	var lw *lowWater
	if _, tcp := src.(*net.TCPConn); tcp {
		lw = newLowWater(rc, cmp.Or(p.hold, batchHold))
	}
	defer func() {
		if buf != nil {
			p.put(buf)
		}
		if lw != nil {
			lw.done()
		}
	}()
	fill := func(fd uintptr) bool {
		if lw != nil {
			lw.woke()
		}
		if buf == nil {
			buf = p.get(large)
		}
		want := buf
		if limit >= 0 {
			want = buf[:min(int64(len(buf)), limit-written)]
		}
		for {
			k, err := syscall.Read(int(fd), want)
			switch err {
			case nil:
				n = k
				if k == len(buf) {
					large = true
				}
				if lw != nil && k > 0 {
					left := int64(-1)
					if limit >= 0 {
						left = limit - written - int64(k)
					}
					lw.read(fd, k, k == len(want), left)
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				// Nothing to read: give the (empty) buffer back before waiting, so that an idle
				// connection holds none.
				p.put(buf)
				buf = nil
				if lw != nil {
					lw.waiting()
				}
				return false
			}
			serr = err
			return true
		}
	}
	off := 0
	drain := func(fd uintptr) bool {
		for off < n {
			k, err := syscall.Write(int(fd), buf[off:n])
			switch {
			case err == nil:
				off += k
				written += int64(k)
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return false // dst's send buffer is full: wait until it takes more
			default:
				serr = err
				return true
			}
		}
		return true
	}
	for limit < 0 || written < limit {
		n, serr = 0, nil
		if err := rc.Read(fill); err != nil {
			return written, fmt.Errorf("read from %s: %w", src.RemoteAddr(), err)
		}
		if serr != nil {
			return written, fmt.Errorf("read from %s: %w", src.RemoteAddr(), serr)
		}
		if n == 0 {
			return written, nil // end of stream
		}
		off = 0
		if err := wc.Write(drain); err != nil {
			return written, fmt.Errorf("write to %s: %w", dc.RemoteAddr(), err)
		}
		if serr != nil {
			return written, fmt.Errorf("write to %s: %w", dc.RemoteAddr(), serr)
		}
	}
	return written, nil
}
