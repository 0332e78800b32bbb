package intercept

import (
	"bufio"
	"io"
	"net"
	"sync"
)

// crypto/tls writes every record (at most 16 KiB) with its own write(2), so relaying a large body
// costs a syscall per record on the sandbox's side. batchConn lets one tls.Conn.Write reach the socket
// in one syscall: the raw connection under the TLS layer buffers while a Write of the layer above is in
// progress (batching is set), and that Write flushes when the TLS layer returns. Writes the TLS layer
// makes on its own (handshake, alerts, key updates) go straight through.
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	batching bool
	buf      []byte
}

// maxBatch bounds what one flush carries; larger Writes flush more than once.
const maxBatch = 256 << 10

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.batching {
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	full := len(c.buf) >= maxBatch
	c.mu.Unlock()
	if full {
		if err := c.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

func (c *batchConn) start() {
	c.mu.Lock()
	c.batching = true
	c.mu.Unlock()
}

func (c *batchConn) stop() error {
	c.mu.Lock()
	c.batching = false
	c.mu.Unlock()
	return c.flush()
}

// batchedTLS is the TLS connection the HTTP server writes to: each of its Writes reaches the socket in
// one syscall (see batchConn).
type batchedTLS struct {
	net.Conn // the *tls.Conn
	raw      *batchConn
	wmu      sync.Mutex
}

func (c *batchedTLS) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.start()
	n, err := c.Conn.Write(p)
	if ferr := c.raw.stop(); err == nil {
		err = ferr
	}
	return n, err
}

// fullReader fills each Read as far as the body allows before returning, for bodies of known length:
// the copy to the sandbox then writes large batches instead of one TLS record at a time. A body of
// unknown length (chunked, streamed events) is left alone, so nothing streamed waits.
type fullReader struct{ io.ReadCloser }

func (r fullReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(r.ReadCloser, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

// CloseWrite half-closes the TLS connection (close_notify), as net/http does before closing a
// connection it still has unread input on.
func (c *batchedTLS) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// readBatch is how much one read(2) from an upstream may take: crypto/tls asks its connection for
// little more than a record at a time, so without a buffer under it a large body costs a syscall per
// 16 KiB record.
const readBatch = 256 << 10

// readBuffered is an upstream connection read through a buffer, so the TLS layer's record-sized reads
// are served from one larger read(2) when the upstream has sent that much.
type readBuffered struct {
	net.Conn
	r *bufio.Reader
}

func (c *readBuffered) Read(p []byte) (int, error) { return c.r.Read(p) }
