package proxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rcvLowat reads c's SO_RCVLOWAT.
func rcvLowat(c net.Conn) (int, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) }); err != nil {
		return 0, err
	}
	return v, gerr
}

// mustRcvLowat is rcvLowat for the test's goroutine.
func mustRcvLowat(t *testing.T, c net.Conn) int {
	t.Helper()
	v, err := rcvLowat(c)
	if err != nil {
		t.Fatalf("SO_RCVLOWAT: %v", err)
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

// TestRelayNBatchesAndRestores checks that a bulk body of known length is read with a raised
// receive low-water mark, and that the relay leaves the mark at one byte when the body is done, so
// that the next response head on a kept-alive connection is read as soon as it arrives.
func TestRelayNBatchesAndRestores(t *testing.T) {
	a, b, c, d := relayedPairs(t)
	const size = 64 << 20
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB, a sender's write
	raised := make(chan int, 1)
	go func() {
		most := 1
		defer func() { raised <- most }()
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := a.Write(chunk); err != nil {
				return
			}
			if sent%(4<<20) == 0 {
				if v, err := rcvLowat(b); err == nil {
					most = max(most, v)
				}
			}
		}
	}()
	go func() { _, _ = io.Copy(io.Discard, d) }()
	var pool bufferPool
	n, err := pool.relayN(c, b, size)
	if err != nil || n != size {
		t.Fatalf("relayed %d, %v; want %d", n, err, size)
	}
	if m := <-raised; m <= 1 {
		t.Errorf("the source's SO_RCVLOWAT stayed %d during a %d MiB body: its reads were not batched", m, size>>20)
	}
	if m := mustRcvLowat(t, b); m != 1 {
		t.Errorf("SO_RCVLOWAT is %d after the body: the next head would wait for that many bytes", m)
	}
	// The next answer on the connection, 10 bytes, is read at once.
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 10)
		_, err := io.ReadFull(b, buf)
		got <- err
	}()
	if _, err := a.Write([]byte("HTTP/1.1 2")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("10 bytes after the body were not read in 5 s")
	}
}

// TestRelayNBatchHoldIsBounded attacks the batching with a sender that pauses mid-body: a few bytes
// sent while the relay waits for a batch must reach the client after about the hold, not when the
// sender resumes (or never, if it waits for an answer first).
func TestRelayNBatchHoldIsBounded(t *testing.T) {
	a, b, c, d := relayedPairs(t)
	// The hold is lengthened so that the trickle surely arrives within it (the mark is checked just
	// before), and the pause is longer than the hold: the trickle must arrive in between.
	const first, trickle, hold, pause = 1 << 20, 1000, time.Second, 5 * time.Second
	size := int64(first + trickle + 1<<20)
	pool := bufferPool{hold: hold}
	relayed := make(chan error, 1)
	go func() {
		_, err := pool.relayN(c, b, size)
		relayed <- err
	}()
	if _, err := a.Write(make([]byte, first)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(d, make([]byte, first)); err != nil {
		t.Fatal(err)
	}
	// The relay has read the first megabyte in bulk and now waits for more with a raised mark.
	time.Sleep(50 * time.Millisecond)
	if m := mustRcvLowat(t, b); m <= trickle {
		t.Fatalf("SO_RCVLOWAT is %d while the relay waits: no batch to hold the %d bytes back, so this test would show nothing", m, trickle)
	}
	start := time.Now()
	if _, err := a.Write(make([]byte, trickle)); err != nil {
		t.Fatal(err)
	}
	arrived := make(chan time.Duration, 1)
	go func() {
		if _, err := io.ReadFull(d, make([]byte, trickle)); err == nil {
			arrived <- time.Since(start)
		}
	}()
	select {
	case took := <-arrived:
		t.Logf("%d bytes sent while a batch was awaited arrived after %v (hold %v)", trickle, took, hold)
	case <-time.After(pause):
		t.Fatalf("%d bytes sent while a batch was awaited did not arrive in %v: the hold is not bounded", trickle, pause)
	}
	if _, err := a.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, d) }()
	if err := <-relayed; err != nil {
		t.Fatal(err)
	}
}
