package kernelrelay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newRelay returns a kernel relay, skipping where one cannot exist (not root) and failing where it
// should (root: CI runs as root, and a kernel relay that silently stopped loading would go unseen).
func newRelay(t *testing.T) *Relay {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the kernel relay needs root (CAP_BPF and CAP_NET_ADMIN); rootless runs keep the user-space relay")
	}
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

// relayed is a client and a server whose gateway-side sockets the kernel relays to each other.
type relayed struct {
	client, server *net.TCPConn
	pipe           *Pipe
	done           chan result
}

type result struct {
	up, down int64 // client to server, server to client
	err      error
}

// start connects client and server through a pipe; before is called before the handover, with the
// gateway's two sockets, to write or queue bytes.
func start(t *testing.T, r *Relay, before func(gwClient, gwServer *net.TCPConn)) *relayed {
	t.Helper()
	client, gwc := tcpPair(t)
	gwu, server := tcpPair(t)
	if before != nil {
		before(gwc, gwu)
	}
	p, err := r.Splice(gwc, gwu)
	if err != nil {
		t.Fatal(err)
	}
	x := &relayed{client: client, server: server, pipe: p, done: make(chan result, 1)}
	go func() {
		up, down, err := p.Wait(context.Background())
		x.done <- result{up, down, err}
	}()
	return x
}

func (x *relayed) wait(t *testing.T) result {
	t.Helper()
	select {
	case r := <-x.done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the pipe did not end")
		return result{}
	}
}

// stream writes n pseudo-random bytes to w (then half-closes it) and returns their hash.
func stream(w *net.TCPConn, n int64, seed uint64) <-chan [32]byte {
	ch := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		src := rand.NewChaCha8([32]byte{byte(seed)})
		buf := make([]byte, 1<<20)
		for left := n; left > 0; {
			k := int(min(left, int64(len(buf))))
			src.Read(buf[:k])
			h.Write(buf[:k])
			if _, err := w.Write(buf[:k]); err != nil {
				break
			}
			left -= int64(k)
		}
		w.CloseWrite()
		ch <- [32]byte(h.Sum(nil))
	}()
	return ch
}

// drain reads r to its end and returns the count and hash.
func drain(r io.Reader) <-chan struct {
	n   int64
	sum [32]byte
	err error
} {
	ch := make(chan struct {
		n   int64
		sum [32]byte
		err error
	}, 1)
	go func() {
		h := sha256.New()
		n, err := io.Copy(h, r)
		ch <- struct {
			n   int64
			sum [32]byte
			err error
		}{n, [32]byte(h.Sum(nil)), err}
	}()
	return ch
}

// TestBothWaysLarge sends 64 MiB each way at once and checks each arrives whole (by hash), each FIN
// is passed on, and the counts are exact.
func TestBothWaysLarge(t *testing.T) {
	r := newRelay(t)
	x := start(t, r, nil)
	const n = 64 << 20
	sentUp, sentDown := stream(x.client, n, 1), stream(x.server, n+7, 2)
	gotUp, gotDown := drain(x.server), drain(x.client)
	u, d := <-gotUp, <-gotDown
	if u.err != nil || d.err != nil {
		t.Fatal(u.err, d.err)
	}
	if u.n != n || u.sum != <-sentUp {
		t.Errorf("client to server: %d bytes, hash match %v", u.n, u.sum == <-sentUp)
	}
	if d.n != n+7 || d.sum != <-sentDown {
		t.Errorf("server to client: %d bytes", d.n)
	}
	res := x.wait(t)
	if res.err != nil || res.up != n || res.down != n+7 {
		t.Errorf("Wait = %d up, %d down, %v; want %d, %d, nil", res.up, res.down, res.err, n, n+7)
	}
}

// TestHalfClose ends one direction while the other keeps flowing, both ways round: the FIN reaches
// the other end after every byte before it, and the open direction still carries bytes after it.
func TestHalfClose(t *testing.T) {
	r := newRelay(t)
	for _, clientFirst := range []bool{true, false} {
		x := start(t, r, nil)
		first, second := x.client, x.server
		if !clientFirst {
			first, second = second, first
		}
		if _, err := first.Write([]byte("last words")); err != nil {
			t.Fatal(err)
		}
		first.CloseWrite()
		got, err := io.ReadAll(second) // ends only at the FIN
		if err != nil || string(got) != "last words" {
			t.Fatalf("before the FIN: %q, %v", got, err)
		}
		select {
		case r := <-x.done:
			t.Fatalf("pipe ended early: %+v %v", r, r.err)
		default:
		}
		// The other direction still flows after the FIN.
		for i := range 3 {
			msg := []byte{'r', 'e', 'p', 'l', 'y', byte('0' + i)}
			if _, err := second.Write(msg); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(first, buf); err != nil || !bytes.Equal(buf, msg) {
				t.Fatalf("after the FIN: %q, %v", buf, err)
			}
		}
		second.CloseWrite()
		if n, err := first.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("second FIN: %d, %v", n, err)
		}
		res := x.wait(t)
		up, down := int64(10), int64(18)
		if !clientFirst {
			up, down = down, up
		}
		if res.err != nil || res.up != up || res.down != down {
			t.Errorf("client first %v: Wait = %d, %d, %v; want %d, %d", clientFirst, res.up, res.down, res.err, up, down)
		}
	}
}

// TestQueuedBeforeHandover: bytes that reached the gateway's sockets before the handover, and were
// never read, are relayed without any further byte arriving to wake the kernel's path, and after what
// the gateway itself wrote first.
func TestQueuedBeforeHandover(t *testing.T) {
	r := newRelay(t)
	client, gwc := tcpPair(t)
	gwu, server := tcpPair(t)
	if _, err := client.Write([]byte("queued")); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte("banner")); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, gwc, 6)
	waitQueued(t, gwu, 6)
	// What the gateway read while judging goes out first.
	if _, err := gwu.Write([]byte("prefix:")); err != nil {
		t.Fatal(err)
	}
	p, err := r.Splice(gwc, gwu)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 13)
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "prefix:queued" {
		t.Fatalf("server got %q, %v", buf, err)
	}
	if _, err := io.ReadFull(client, buf[:6]); err != nil || string(buf[:6]) != "banner" {
		t.Fatalf("client got %q, %v", buf[:6], err)
	}
	client.CloseWrite()
	server.CloseWrite()
	up, down, err := p.Wait(context.Background())
	if err != nil || up != 6 || down != 6 {
		t.Errorf("Wait = %d, %d, %v; want 6, 6 (the prefix is the caller's to count)", up, down, err)
	}
}

// waitQueued waits until c has n unread bytes, as the kernel counts them (FIONREAD).
func waitQueued(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
		var q int
		var qerr error
		if err := rc.Control(func(fd uintptr) { q, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || qerr != nil {
			t.Fatal(err, qerr)
		}
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued, want %d", q, n)
		}
	}
}

// TestReset: a reset on either side ends the pipe with an error, so the caller resets the other.
func TestReset(t *testing.T) {
	r := newRelay(t)
	for _, clientResets := range []bool{true, false} {
		x := start(t, r, nil)
		if _, err := x.client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(x.server, make([]byte, 5)); err != nil {
			t.Fatal(err)
		}
		victim := x.server
		if !clientResets {
			victim = x.client
		}
		victim.SetLinger(0)
		victim.Close()
		res := x.wait(t)
		if !errors.Is(res.err, syscall.ECONNRESET) {
			t.Errorf("client resets %v: Wait error %v, want ECONNRESET", clientResets, res.err)
		}
	}
}

// TestFINWaitsForQueuedBytes: the upstream sends 1 MiB and its FIN while the client reads nothing, so
// when the FIN reaches the gateway most of the bytes are still queued in the kernel on their way to
// the client. The FIN must reach the client after them, not before (which would cut the stream).
func TestFINWaitsForQueuedBytes(t *testing.T) {
	r := newRelay(t)
	x := start(t, r, nil)
	const n = 1 << 20
	sent := stream(x.server, n, 3)
	want := <-sent // the upstream has written everything and its FIN
	got := <-drain(x.client)
	if got.err != nil || got.n != n || got.sum != want {
		t.Fatalf("client read %d of %d bytes (hash match %v), %v", got.n, n, got.sum == want, got.err)
	}
	x.client.CloseWrite()
	if res := x.wait(t); res.err != nil || res.down != n || res.up != 0 {
		t.Errorf("Wait = %d, %d, %v", res.up, res.down, res.err)
	}
}

// TestPartlyReadBeforeHandover: the caller read part of what had arrived (as the gateway's sniffing
// does, through a small buffer) before the handover. The kernel sees whole segments, so without care
// the part already read would be relayed a second time.
func TestPartlyReadBeforeHandover(t *testing.T) {
	r := newRelay(t)
	client, gwc := tcpPair(t)
	gwu, server := tcpPair(t)
	msg := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, gwc, len(msg))
	head := make([]byte, 10)
	if _, err := io.ReadFull(gwc, head); err != nil {
		t.Fatal(err)
	}
	if _, err := gwu.Write(head); err != nil { // the judged bytes, written on by the caller
		t.Fatal(err)
	}
	p, err := r.Splice(gwc, gwu)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		up, down, err := p.Wait(context.Background())
		done <- result{up, down, err}
	}()
	client.CloseWrite()
	got := <-drain(server)
	if got.err != nil || got.n != int64(len(msg)) || got.sum != sha256.Sum256(msg) {
		t.Fatalf("server got %d of %d bytes (hash match %v), %v", got.n, len(msg), got.sum == sha256.Sum256(msg), got.err)
	}
	server.CloseWrite()
	if res := <-done; res.err != nil || res.up != int64(len(msg)-10) || res.down != 0 {
		t.Errorf("Wait = %d, %d, %v; want %d, 0", res.up, res.down, res.err, len(msg)-10)
	}
}
