package proxy

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

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
	relayed := make(chan error, 1)
	go func() {
		_, err := pool.relayN(c, b, 1<<20+trickle+1<<20)
		relayed <- err
	}()
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
	relayed := make(chan error, 1)
	go func() {
		_, err := pool.relayN(c, b, 1<<20+tail)
		relayed <- err
	}()
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
	stopped := make(chan error, 1)
	go func() {
		_, err := pool.relay(c, b)
		stopped <- err
	}()
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
