//go:build linux

package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// pipeSize is the capacity asked of each splice pipe, and the most one splice(2) call moves: 1 MiB,
// the default fs.pipe-max-size, as Go's own splice path uses. A pipe's pages are allocated only as
// bytes pass through it, so a large pipe costs memory only while it is full.
const pipeSize = 1 << 20

// maxIdlePipes bounds the pipes kept for reuse between bursts. Beyond it a returned pipe is closed at
// once, so the gateway's descriptors fall back to two per open connection as soon as traffic stops.
const maxIdlePipes = 32

// pipe is the kernel buffer splice(2) moves bytes through between two sockets.
type pipe struct{ r, w int }

// pipePool hands out splice pipes to relays. It exists because io.Copy between two *net.TCPConn,
// although it splices, takes a pipe from the runtime's pool for the whole life of the copy, idle or
// not, and returns it to a sync.Pool that only the garbage collector empties. Held connections then
// cost four descriptors each (six when both directions splice) rather than two, which halves the
// connections the gateway can hold under a given RLIMIT_NOFILE, and the pipes outlive the connections
// until two collections have run. A relay here takes a pipe only when its source has bytes to read
// and gives it back as soon as the pipe is empty and the source has nothing more: idle connections
// hold no pipe at all, and the pool keeps at most maxIdlePipes.
type pipePool struct {
	mu   sync.Mutex
	idle []pipe
}

func (p *pipePool) get() (pipe, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pp := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pp, nil
	}
	p.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return pipe{}, fmt.Errorf("splice pipe: %w", err)
	}
	// A smaller pipe than asked (fs.pipe-max-size lowered, the user's pipe quota spent) still works,
	// with more system calls per byte.
	_, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, pipeSize)
	return pipe{r: fds[0], w: fds[1]}, nil
}

// put returns an empty pipe for reuse, or closes it if enough are idle already.
func (p *pipePool) put(pp pipe) {
	p.mu.Lock()
	if len(p.idle) < maxIdlePipes {
		p.idle = append(p.idle, pp)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	pp.close()
}

// drain closes every idle pipe. Pipes in use are not affected and are closed or pooled by their relay
// when it ends; drain may run at any time.
func (p *pipePool) drain() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, pp := range idle {
		pp.close()
	}
}

func (pp pipe) close() {
	_ = unix.Close(pp.r)
	_ = unix.Close(pp.w)
}

// errNotSpliceable is returned by splice when the connections are not both TCP sockets.
var errNotSpliceable = errors.New("not spliceable")

// relay copies from src to dst until src's end of stream, as io.Copy does, through splice(2) when
// both are *net.TCPConn (bytes never enter user space), and with io.Copy otherwise. It returns the
// bytes written to dst.
func (p *pipePool) relay(dst io.Writer, src net.Conn) (int64, error) {
	n, err := p.splice(dst, src, -1)
	if errors.Is(err, errNotSpliceable) {
		return io.Copy(dst, src)
	}
	return n, err
}

// relayN copies exactly n bytes from src to dst like io.CopyN (io.EOF if src ends first), through
// splice(2) when it can.
func (p *pipePool) relayN(dst io.Writer, src net.Conn, n int64) (int64, error) {
	m, err := p.splice(dst, src, n)
	if errors.Is(err, errNotSpliceable) {
		return io.CopyN(dst, src, n)
	}
	if err == nil && m < n {
		err = io.EOF
	}
	return m, err
}

// splice moves bytes from src to dst until src's end of stream or, if limit >= 0, limit bytes.
func (p *pipePool) splice(dst io.Writer, src net.Conn, limit int64) (written int64, err error) {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if !ok1 || !ok2 {
		return 0, errNotSpliceable
	}
	rc, err := s.SyscallConn()
	if err != nil {
		return 0, errNotSpliceable
	}
	wc, err := d.SyscallConn()
	if err != nil {
		return 0, errNotSpliceable
	}

	var (
		pp     pipe
		held   bool
		inPipe int   // bytes in pp not yet written to dst
		serr   error // the splice(2) error, as opposed to the poller's
	)
	defer func() {
		switch {
		case !held:
		case inPipe == 0:
			p.put(pp)
		default:
			pp.close() // bytes left in it: never hand them to another connection
		}
	}()
	fill := func(fd uintptr) bool {
		if !held {
			if pp, serr = p.get(); serr != nil {
				return true
			}
			held = true
		}
		for {
			max := pipeSize
			if limit >= 0 {
				max = int(min(int64(max), limit-written))
			}
			n, err := unix.Splice(int(fd), nil, pp.w, nil, max, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch err {
			case nil:
				inPipe, serr = int(n), nil
				return true
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				// Nothing to read: give the (empty) pipe back before waiting, so an idle connection
				// holds none.
				p.put(pp)
				held = false
				return false
			}
			serr = err
			return true
		}
	}
	pump := func(fd uintptr) bool {
		for inPipe > 0 {
			n, err := unix.Splice(pp.r, nil, int(fd), nil, inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case n > 0:
				inPipe -= int(n)
				written += n
			case err == unix.EINTR:
			case err == unix.EAGAIN:
				return false // dst's send buffer is full: wait until it can take more
			case err == nil:
				serr = io.ErrShortWrite // the pipe gave nothing though it holds bytes
				return true
			default:
				serr = err
				return true
			}
		}
		return true
	}
	for limit < 0 || written < limit {
		serr = nil
		if err := rc.Read(fill); err != nil {
			return written, fmt.Errorf("read from %s: %w", s.RemoteAddr(), err)
		}
		if serr != nil {
			return written, fmt.Errorf("splice from %s: %w", s.RemoteAddr(), serr)
		}
		if inPipe == 0 {
			return written, nil // end of stream
		}
		if err := wc.Write(pump); err != nil {
			return written, fmt.Errorf("write to %s: %w", d.RemoteAddr(), err)
		}
		if serr != nil {
			return written, fmt.Errorf("splice to %s: %w", d.RemoteAddr(), serr)
		}
	}
	return written, nil
}
