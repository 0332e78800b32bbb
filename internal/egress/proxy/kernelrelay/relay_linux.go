package kernelrelay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Relay is one gateway's kernel relay: the maps, the verdict program, and the watcher that learns of
// each handed-over socket's end of stream. It has no global state; each gateway makes its own.
type Relay struct {
	// targets holds every handed-over socket, as a redirect target only (no program is attached to
	// it); sources holds the same sockets with the verdict program attached. A socket enters targets
	// before sources, so by the time any segment is judged its peer can receive it: a redirect to a
	// socket not yet in the map would drop the segment.
	targets, sources, peers *ebpf.Map
	prog                    *ebpf.Program

	ep    *os.File // an epoll instance, itself waited on through the runtime's poller
	epRaw syscall.RawConn

	mu      sync.Mutex
	waiting map[int32]chan uint32 // descriptor -> its pipe's event channel
	closed  bool
	done    chan struct{}
}

// maxEntries bounds the sockets handed over at once (two per connection); past it a handover fails
// and the connection stays in user space.
const maxEntries = 1 << 16

// New loads the verdict program and its maps. It fails, saying why, where the kernel or the caller's
// privileges allow no sockmap (the caller then relays in user space).
func New() (*Relay, error) {
	r := &Relay{waiting: map[int32]chan uint32{}, done: make(chan struct{})}
	var err error
	closeAll := func() {
		for _, c := range []interface{ Close() error }{r.targets, r.sources, r.peers, r.prog} {
			if c != nil {
				c.Close()
			}
		}
	}
	if r.targets, r.sources, r.peers, r.prog, err = load(maxEntries); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, errors.New("kernel relay: BPF maps and programs need CAP_BPF and CAP_NET_ADMIN (root)")
		}
		return nil, fmt.Errorf("kernel relay: %w", err)
	}
	if err := progAttach(unix.BPF_PROG_ATTACH, r.sources, r.prog); err != nil {
		closeAll()
		return nil, fmt.Errorf("kernel relay: attaching the verdict program: %w", err)
	}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("kernel relay: epoll: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		closeAll()
		return nil, fmt.Errorf("kernel relay: epoll: %w", err)
	}
	r.ep = os.NewFile(uintptr(fd), "kernelrelay-epoll")
	if r.epRaw, err = r.ep.SyscallConn(); err != nil {
		r.ep.Close()
		closeAll()
		return nil, fmt.Errorf("kernel relay: epoll: %w", err)
	}
	go r.watch()
	return r, nil
}

// Close detaches the program and frees the maps; pipes still open are reset by their own teardown.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.ep.Close() // ends watch
	<-r.done
	err := progAttach(unix.BPF_PROG_DETACH, r.sources, r.prog)
	for _, c := range []interface{ Close() error }{r.sources, r.targets, r.peers, r.prog} {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// progAttach attaches (or detaches) the verdict program to the sources map with bpf(2) itself:
// cilium/ebpf's link package would do the same, but initialises its feature probes (about 4 ms) in
// every cordon process that links it, the sandbox's init included.
func progAttach(cmd uintptr, m *ebpf.Map, p *ebpf.Program) error {
	attr := struct{ target, prog, attachType, flags uint32 }{uint32(m.FD()), uint32(p.FD()), uint32(ebpf.AttachSkSKBVerdict), 0}
	if _, _, e := unix.Syscall(unix.SYS_BPF, cmd, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); e != 0 {
		return e
	}
	return nil
}

// watch reads the epoll instance's events (end of stream, errors on handed-over sockets) and gives
// each to its pipe.
func (r *Relay) watch() {
	defer close(r.done)
	events := make([]unix.EpollEvent, 64)
	for {
		var n int
		var werr error
		err := r.epRaw.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), events, 0)
			if werr == unix.EINTR {
				return false
			}
			return werr != nil || n > 0
		})
		if err != nil || werr != nil {
			return // closed
		}
		r.mu.Lock()
		for _, e := range events[:n] {
			if ch, ok := r.waiting[e.Fd]; ok {
				select {
				case ch <- e.Events:
				default: // the pipe has an event pending and re-reads the socket's state anyway
				}
			}
		}
		r.mu.Unlock()
	}
}

// side is one socket of a pipe.
type side struct {
	c      *net.TCPConn
	rc     syscall.RawConn
	fd     int
	cookie uint64
	sent0  uint64 // bytes written into its stream before the handover
	eof    bool   // its peer's FIN has been passed on to the other side
	// user: the socket could not enter the sources map, its peer's FIN having just arrived; its last
	// bytes stay in its own queue and Wait moves them before passing the FIN on.
	user bool
}

// Pipe is two connections whose bytes the kernel relays to each other.
type Pipe struct {
	r      *Relay
	a, b   side
	ab, ba int64 // bytes moved by user space: before the handover, and a user side's last ones
	events chan uint32
	failed error // the handover's, once it cannot be undone
}

// Splice hands a and b to the kernel: from its return, what arrives on either is sent on the other,
// in order, after whatever the caller wrote to them before. The caller must no longer read or write
// either connection until Wait returns (it may close them, to abort). Bytes already received and not
// read by the caller are relayed too, and counted. An error leaves both connections usable by the
// caller's own relay, every byte in its place.
func (r *Relay) Splice(a, b *net.TCPConn) (*Pipe, error) {
	p := &Pipe{r: r, events: make(chan uint32, 4)}
	if err := p.a.init(a); err != nil {
		return nil, &HandoverError{Err: err}
	}
	if err := p.b.init(b); err != nil {
		return nil, &HandoverError{Err: err}
	}
	// The verdict program sees whole segments: one the caller read in part would be relayed again
	// from its start. Reading each side to empty first leaves only segments nobody has read.
	var err error
	p.ab, err = moveQueued(&p.a, &p.b)
	if err == nil {
		p.ba, err = moveQueued(&p.b, &p.a)
	}
	for _, s := range []*side{&p.a, &p.b} {
		if err == nil {
			s.sent0, err = written(s.fd)
		}
	}
	if err == nil {
		var linked bool
		if linked, err = p.link(); err != nil && linked {
			p.failed = err // Wait reports it, and the caller resets both
			return p, nil
		}
		if err != nil {
			p.unlink()
		}
	}
	if err != nil {
		return nil, &HandoverError{AB: p.ab, BA: p.ba, Err: err}
	}
	return p, nil
}

// HandoverError is Splice's error: the connections stay the caller's, with the bytes Splice already
// moved from a to b (AB) and from b to a (BA), for the caller to count.
type HandoverError struct {
	AB, BA int64
	Err    error
}

func (e *HandoverError) Error() string { return "kernel relay: " + e.Err.Error() }
func (e *HandoverError) Unwrap() error { return e.Err }

// maxQueuedMove bounds the bytes Splice moves itself before the handover; a side that keeps more
// coming is left to the caller's relay (Splice fails), which is never wrong, only slower.
const maxQueuedMove = 4 << 20

// moveQueued reads what from has received, without waiting, and writes it to to, until from has
// nothing more or its stream ended. It returns the bytes moved.
func moveQueued(from, to *side) (int64, error) {
	buf := make([]byte, 64<<10)
	var moved int64
	for {
		var n int
		var rerr error
		if err := from.rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = unix.Read(int(fd), buf)
				if rerr != unix.EINTR {
					return true
				}
			}
		}); err != nil {
			return moved, err
		}
		switch {
		case rerr == unix.EAGAIN:
			return moved, nil
		case rerr != nil:
			return moved, rerr
		case n == 0:
			// The stream ended before the handover: the end is passed on once linked, as any FIN
			// (adding the socket to the epoll set reports it at once).
			return moved, nil
		}
		if _, err := to.c.Write(buf[:n]); err != nil {
			return moved, err
		}
		moved += int64(n)
		if moved > maxQueuedMove {
			return moved, errors.New("too many bytes arriving to hand over")
		}
	}
}

func (s *side) init(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	s.c, s.rc = c, rc
	var serr error
	if err := rc.Control(func(fd uintptr) {
		s.fd = int(fd)
		s.cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	}); err != nil {
		return err
	}
	return serr
}

// link puts both sockets in the maps, in the order that cannot drop or reorder a segment: both as
// targets, then the peer entries, then both as sources (the verdict runs from there), then a kick
// that makes the verdict judge what was queued before it was attached. linked says a's verdict ran:
// after that the pipe cannot be given back to the caller, since bytes may be on their way to b.
func (p *Pipe) link() (linked bool, err error) {
	r := p.r
	r.mu.Lock()
	closed := r.closed
	if !closed {
		r.waiting[int32(p.a.fd)] = p.events
		r.waiting[int32(p.b.fd)] = p.events
	}
	r.mu.Unlock()
	if closed {
		return false, errors.New("relay closed")
	}
	for _, s := range []*side{&p.a, &p.b} {
		if err := r.targets.Update(s.cookie, uint64(s.fd), ebpf.UpdateNoExist); err != nil {
			return false, fmt.Errorf("socket into the map: %w", err)
		}
	}
	if err := r.peers.Update(p.a.cookie, peerValue{Peer: p.b.cookie}, ebpf.UpdateNoExist); err != nil {
		return false, fmt.Errorf("peer entry: %w", err)
	}
	if err := r.peers.Update(p.b.cookie, peerValue{Peer: p.a.cookie}, ebpf.UpdateNoExist); err != nil {
		return false, fmt.Errorf("peer entry: %w", err)
	}
	for _, s := range []*side{&p.a, &p.b} {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLERR | unix.EPOLLHUP | unix.EPOLLET, Fd: int32(s.fd)}
		if err := unix.EpollCtl(int(r.ep.Fd()), unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			return false, fmt.Errorf("epoll: %w", err)
		}
	}
	// Both as sources before either is kicked: a's queued bytes, once judged, can make b's peer
	// answer, even end b, before b is in the map (a sockmap takes only established sockets).
	if err := r.sources.Update(p.a.cookie, uint64(p.a.fd), ebpf.UpdateNoExist); err != nil {
		return false, fmt.Errorf("socket into the map: %w", err)
	}
	if err := r.sources.Update(p.b.cookie, uint64(p.b.fd), ebpf.UpdateNoExist); err != nil {
		// Bytes arriving on a meanwhile may already be on their way to b. A b whose peer has just
		// ended its stream keeps its last bytes in its own queue, for Wait to pass on; anything
		// else ends the pipe.
		if fin, ferr := finReceived(p.b.fd); ferr != nil || !fin {
			return true, fmt.Errorf("socket into the map: %w", err)
		}
		p.b.user = true
	}
	for _, s := range []*side{&p.a, &p.b} {
		if !s.user {
			if err := kick(s.fd); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// kick makes the kernel run the socket's data-ready path now (setting SO_RCVLOWAT does, under the
// socket's lock), so segments queued before the verdict was attached, or the last ones before a FIN,
// are judged before it returns.
func kick(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1); err != nil {
		return fmt.Errorf("SO_RCVLOWAT: %w", err)
	}
	return nil
}

// unlink takes the sockets out of the maps and the epoll set; the kernel restores their usual
// receive path.
func (p *Pipe) unlink() {
	r := p.r
	for _, s := range []*side{&p.a, &p.b} {
		if s.c == nil {
			continue
		}
		_ = unix.EpollCtl(int(r.ep.Fd()), unix.EPOLL_CTL_DEL, s.fd, nil)
		_ = r.sources.Delete(s.cookie)
		_ = r.targets.Delete(s.cookie)
	}
	for _, s := range []*side{&p.a, &p.b} {
		if s.c != nil {
			_ = r.peers.Delete(s.cookie)
		}
	}
	r.mu.Lock()
	delete(r.waiting, int32(p.a.fd))
	delete(r.waiting, int32(p.b.fd))
	r.mu.Unlock()
}

// Wait relays until both directions have ended, each by its FIN (passed on to the other side once
// every byte before it is in that side's send queue), or either side fails (a reset, ctx done: the
// error; the caller then resets both). It returns the bytes relayed from a to b and from b to a, the
// verdict program's counts, and takes the sockets out of the kernel relay.
func (p *Pipe) Wait(ctx context.Context) (ab, ba int64, err error) {
	defer p.unlink()
	err = p.failed
	for err == nil && (!p.a.eof || !p.b.eof) {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case ev := <-p.events:
			err = p.handle(ctx, ev)
		}
	}
	return p.ab + p.count(&p.a), p.ba + p.count(&p.b), err
}

func (p *Pipe) count(s *side) int64 {
	var v peerValue
	if p.r.peers.Lookup(s.cookie, &v) != nil {
		return 0
	}
	return int64(v.Bytes)
}

// handle re-reads both sockets' state after an event: a pending error ends the pipe, a FIN received
// is passed on.
func (p *Pipe) handle(ctx context.Context, _ uint32) error {
	for _, s := range []struct{ from, to *side }{{&p.a, &p.b}, {&p.b, &p.a}} {
		if e, err := unix.GetsockoptInt(s.from.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil {
			return fmt.Errorf("kernel relay: %w", err)
		} else if e != 0 {
			return fmt.Errorf("kernel relay: %w", syscall.Errno(e))
		}
		if s.from.eof {
			continue
		}
		fin, err := finReceived(s.from.fd)
		if err != nil {
			return err
		}
		if !fin {
			continue
		}
		if err := p.passFIN(ctx, s.from, s.to); err != nil {
			return err
		}
	}
	return nil
}

// passFIN passes from's end of stream on to to: once the verdict has judged everything before the FIN
// and every byte it redirected is in to's send queue, to's write side is shut.
func (p *Pipe) passFIN(ctx context.Context, from, to *side) error {
	if from.user {
		n, err := moveQueued(from, to)
		if from == &p.a {
			p.ab += n
		} else {
			p.ba += n
		}
		if err != nil {
			return fmt.Errorf("kernel relay: %w", err)
		}
	} else if err := kick(from.fd); err != nil {
		return err
	}
	want := to.sent0 + uint64(p.count(from))
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		got, err := written(to.fd)
		if err != nil {
			return fmt.Errorf("kernel relay: %w", err)
		}
		if got >= want {
			break
		}
		if e, _ := unix.GetsockoptInt(to.fd, unix.SOL_SOCKET, unix.SO_ERROR); e != 0 {
			return fmt.Errorf("kernel relay: %w", syscall.Errno(e))
		}
		// The kernel sends redirected segments from a work queue, and on to's pace: its peer may be
		// reading slowly. Nothing signals the moment the queue is empty, so look again shortly.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	// ENOTCONN: to is already closed (its peer reset it, which its own event reports, or ended
	// both ways); there is nothing left to pass the end on to.
	if err := unix.Shutdown(to.fd, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
		return fmt.Errorf("kernel relay: shutdown: %w", err)
	}
	from.eof = true
	return nil
}

// written returns the bytes written into a TCP socket's stream so far: those the peer acknowledged
// plus those still queued (sent or not). It reads the acknowledged count before and after the queue
// and retries until they agree, so a concurrent ACK cannot make the sum wrong.
func written(fd int) (uint64, error) {
	for {
		i1, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0, fmt.Errorf("TCP_INFO: %w", err)
		}
		q, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
		if err != nil {
			return 0, fmt.Errorf("SIOCOUTQ: %w", err)
		}
		i2, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return 0, fmt.Errorf("TCP_INFO: %w", err)
		}
		if i1.Bytes_acked == i2.Bytes_acked {
			return i1.Bytes_acked + uint64(q), nil
		}
	}
}

// finReceived reports whether the socket's peer has ended its stream: poll(2) without waiting shows
// the receive side shut (POLLRDHUP) without touching a byte.
func finReceived(fd int) (bool, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		_, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("kernel relay: poll: %w", err)
		}
		return fds[0].Revents&unix.POLLRDHUP != 0, nil
	}
}
