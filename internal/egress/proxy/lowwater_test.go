package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"golang.org/x/sys/unix"
)

// The tests below lengthen the hold to a second, so that a raised mark can be seen while the relay
// waits, and so that a message held for it shows as one.
const testHold = time.Second

// rcvLowat reads c's SO_RCVLOWAT. The kernel's default reads 0 on an accepted socket and 1 on a
// dialled one; both mean one byte.
func rcvLowat(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatalf("SO_RCVLOWAT: %v", gerr)
	}
	return v
}

// relayedPairs returns two loopback connections for a relay test: the sender writes to a, the
// relay reads b and writes c, the client reads d. They are closed when the test ends.
func relayedPairs(t *testing.T) (a, b, c, d net.Conn) {
	t.Helper()
	ln := listen(t)
	a, b = tcpPair(t, ln)
	c, d = tcpPair(t, ln)
	t.Cleanup(func() {
		for _, x := range []net.Conn{a, b, c, d} {
			x.Close()
		}
	})
	return a, b, c, d
}

// inBackground runs a relay in a goroutine of its own and reports how it ended.
func inBackground(relay func() (int64, error)) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := relay()
		done <- err
	}()
	return done
}

// sendBulk has the relay move a megabyte from a to d, and returns once d has all of it and the
// relay, having found nothing more to read, waits on b with its mark raised (or fails the test).
func sendBulk(t *testing.T, a, b, d net.Conn) {
	t.Helper()
	const bulk = 1 << 20
	go func() { _, _ = a.Write(make([]byte, bulk)) }()
	if _, err := io.ReadFull(d, make([]byte, bulk)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // well within the hold
	if m := rcvLowat(t, b); m <= 1 {
		t.Fatalf("SO_RCVLOWAT is %d after a megabyte in bulk: the relay does not read in batches", m)
	}
}

// within fails the test unless n bytes written to a arrive at d within limit, and reports how long
// they took.
func within(t *testing.T, a, d net.Conn, n int, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := a.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	arrived := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(d, make([]byte, n))
		arrived <- err
	}()
	select {
	case err := <-arrived:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(limit):
		t.Fatalf("%s: %d bytes did not arrive within %v", what, n, limit)
	}
	return time.Since(start)
}

// TestRelayNBatchHoldIsBounded attacks the batching with a sender that pauses mid-body: bytes sent
// while the relay waits for a batch must reach the client after the hold, not when the sender
// resumes (which, if it waits for an answer first, is never).
func TestRelayNBatchHoldIsBounded(t *testing.T) {
	a, b, c, d := relayedPairs(t)
	pool := bufferPool{hold: testHold}
	const trickle = 1000
	relayed := inBackground(func() (int64, error) { return pool.relayN(c, b, 1<<20+trickle+1<<20) })
	sendBulk(t, a, b, d)
	took := within(t, a, d, trickle, 5*testHold, "sent while a batch was awaited")
	t.Logf("%d bytes sent while a batch was awaited arrived after %v (hold %v)", trickle, took, testHold)
	go func() { _, _ = a.Write(make([]byte, 1<<20)) }()
	go func() { _, _ = io.Copy(io.Discard, d) }()
	if err := <-relayed; err != nil {
		t.Fatal(err)
	}
}

// TestRelayNTailNotHeld checks that a body's last bytes are relayed at once even when they come
// after a pause: the mark is never above what the body has left.
func TestRelayNTailNotHeld(t *testing.T) {
	a, b, c, d := relayedPairs(t)
	pool := bufferPool{hold: testHold}
	const tail = 1000
	relayed := inBackground(func() (int64, error) { return pool.relayN(c, b, 1<<20+tail) })
	sendBulk(t, a, b, d)
	within(t, a, d, tail, testHold/2, "the body's tail")
	if err := <-relayed; err != nil {
		t.Fatal(err)
	}
	if m := rcvLowat(t, b); m > 1 {
		t.Errorf("SO_RCVLOWAT is %d after the body: the next head would wait for that many bytes", m)
	}
}

// TestRelayRestoresMarkWhenStopped stops a relay while it waits with a raised mark, as the gateway
// does to judge a client's bytes or to hand a connection to the kernel: whoever reads the socket
// next must get bytes as they come.
func TestRelayRestoresMarkWhenStopped(t *testing.T) {
	a, b, c, d := relayedPairs(t)
	pool := bufferPool{hold: testHold}
	stopped := inBackground(func() (int64, error) { return pool.relay(c, b) })
	sendBulk(t, a, b, d)
	_ = b.SetReadDeadline(time.Now())
	<-stopped
	_ = b.SetReadDeadline(time.Time{})
	if m := rcvLowat(t, b); m > 1 {
		t.Errorf("SO_RCVLOWAT is %d after the relay stopped", m)
	}
	within(t, a, b, 10, testHold/2, "read from the socket after the relay stopped")
}

// TestRelayBatchesThenTurnsInteractive follows a passed-through stream (no length known) from a
// bulk transfer to small messages: the first message after the bulk is held for the hold at most,
// and the next ones are relayed at once, since a message the hold had to end says the flow is no
// longer bulk.
func TestRelayBatchesThenTurnsInteractive(t *testing.T) {
	a, b, c, d := relayedPairs(t)
	pool := bufferPool{hold: testHold}
	go func() { _, _ = pool.relay(c, b) }()
	sendBulk(t, a, b, d)
	within(t, a, d, 100, 3*testHold, "the first message after the bulk")
	for i := range 3 {
		within(t, a, d, 100, testHold/2, fmt.Sprintf("message %d, the flow now interactive", i+2))
	}
	if m := rcvLowat(t, b); m > 1 {
		t.Errorf("SO_RCVLOWAT is %d with small messages flowing, want 1", m)
	}
}

// TestForwardBatchedBodiesKeepAlive runs the batching through the gateway's HTTP forwarder on one
// kept-alive connection: an 8 MiB upload, then an 8 MiB answer whose upstream sends half of it,
// then a trickle while the gateway waits for a batch, then pauses; then a small answer. Every byte
// must arrive in order, the trickle long before the pause ends (a batch awaited without bound would
// hold it), and the small answer at once (a mark left raised after the body would hold it).
func TestForwardBatchedBodiesKeepAlive(t *testing.T) {
	h := newHarness(t)
	const size, pause = 8 << 20, 3 * time.Second
	pattern := func(i int) byte { return byte(i*7 + i>>13) }
	body := make([]byte, size)
	for i := range body {
		body[i] = pattern(i)
	}
	ln := listen(t)
	port := portOf(ln.Addr())
	h.pol.allow("bulk.test", port, loopback)
	upload := make(chan bool, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		got, _ := io.ReadAll(req.Body)
		upload <- bytes.Equal(got, body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		// Half, a moment for the gateway to catch up and wait for more, a trickle that fits in
		// no batch, the pause, the rest.
		const trickle = 1000
		_, _ = c.Write(body[:size/2])
		time.Sleep(100 * time.Millisecond)
		_, _ = c.Write(body[size/2 : size/2+trickle])
		time.Sleep(pause)
		_, _ = c.Write(body[size/2+trickle:])
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}()

	c, err := h.dialMapped("bulk.test", port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * pause))
	fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: bulk.test:%d\r\nContent-Length: %d\r\n\r\n", port, size)
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	if !<-upload {
		t.Fatal("the upstream got the upload altered")
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	first := make([]byte, size/2+1000)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > pause/3 {
		t.Errorf("what the upstream sent before its pause took %v to arrive (the pause is %v)", took, pause)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(first, rest...), body) {
		t.Fatalf("the answer arrived altered (%d bytes)", len(first)+len(rest))
	}
	fmt.Fprintf(c, "GET /small HTTP/1.1\r\nHost: bulk.test:%d\r\n\r\n", port)
	start = time.Now()
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	small, _ := io.ReadAll(resp.Body)
	if took := time.Since(start); string(small) != "ok" || took > pause/3 {
		t.Errorf("the small answer after the bodies: %q after %v", small, took)
	}
	c.Close()
	e := h.rec.waitFor(t, 0, "the connection", func(e audit.Event) bool { return e.Kind == audit.KindConnect && e.Decision == audit.Allow })
	if e.Detail["requests"] != "2" || e.BytesOut < size || e.BytesIn < size {
		t.Errorf("event: %s requests, %d bytes out, %d in; want 2 and at least %d each way", e.Detail["requests"], e.BytesOut, e.BytesIn, size)
	}
}
