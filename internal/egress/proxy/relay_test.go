package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipeFDs counts this process's descriptors that are pipes.
func pipeFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// waitFDs waits until at most max descriptors are open and returns the last count.
func waitFDs(t *testing.T, max int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := openFDs(t)
		if n <= max || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// buffersSettled returns how many buffers p's relays hold once the last relay that moved bytes has
// had time to find its source empty and give its buffer back (at most a few seconds).
func buffersSettled(p *bufferPool) int {
	deadline := time.Now().Add(5 * time.Second)
	for p.buffersInUse() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return p.buffersInUse()
}

// pingServer answers each connection's 5-byte ping with the same 5 bytes, then reads (with a plain
// buffer, so it holds no pipe of its own) until the client's end of stream and closes. done counts the
// connections it finished.
func pingServer(t testing.TB, done *sync.WaitGroup) uint16 {
	t.Helper()
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer done.Done()
				defer c.Close()
				buf := make([]byte, 5)
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return portOf(ln.Addr())
}

// TestTransparentHoldsManyConnections holds n connections open at once through the transparent
// handler, each after an exchange in both directions (so both relays of each connection have moved
// bytes and are idle), and checks that every one was answered, that the gateway holds no more than
// its two sockets per held connection (no pipe, no buffer per idle relay), and that the descriptors
// are back to where they started once the connections close, without waiting for a collection.
func TestTransparentHoldsManyConnections(t *testing.T) {
	const n = 1000
	h := newHarness(t)
	var served sync.WaitGroup
	served.Add(n)
	port := pingServer(t, &served)
	h.pol.allow("many.test", port, loopback)
	addr := h.transparent(h.mapped("many.test", port))

	base := openFDs(t)
	basePipes := pipeFDs(t)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	ping := []byte("\x00ping") // neither TLS nor HTTP: relayed as plain TCP, spliced both ways
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(ping); err != nil {
			t.Fatalf("connection %d: write: %v", i, err)
		}
		got := make([]byte, len(ping))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, ping) {
			t.Fatalf("connection %d: answer %q, %v", i, got, err)
		}
	}
	held := openFDs(t) - base
	pipes := pipeFDs(t) - basePipes
	bufs := buffersSettled(&h.g.bufs)
	t.Logf("%d connections held: %d more descriptors (%d of them pipes), %d relay buffers", n, held, pipes, bufs)
	// Per connection: the client's socket, the upstream's, and the gateway's two. Anything beyond a
	// small constant is a descriptor held per idle relay.
	if slack := 50; held > 4*n+slack || pipes > 0 {
		t.Errorf("%d held connections cost %d descriptors (%d pipes); want at most %d (4 sockets each, idle relays hold no pipe)",
			n, held, pipes, 4*n+slack)
	}
	if bufs > 0 {
		t.Errorf("%d idle relays hold %d buffers, want none", 2*n, bufs)
	}

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	served.Wait()
	for deadline := time.Now().Add(10 * time.Second); h.rec.count() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	after := waitFDs(t, base)
	t.Logf("after closing: %d descriptors (base %d)", after, base)
	if after > base {
		t.Errorf("%d descriptors remain after closing %d connections (base %d)", after, n, base)
	}
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	var bad []string
	for _, e := range h.rec.events {
		if e.Decision != "allow" || e.Detail["error"] != "" || e.BytesIn != 5 || e.BytesOut != 5 {
			bad = append(bad, fmt.Sprintf("%s %s in=%d out=%d %q", e.Decision, e.Reason, e.BytesIn, e.BytesOut, e.Detail["error"]))
		}
	}
	if len(h.rec.events) != n || len(bad) > 0 {
		t.Errorf("%d events, %d not clean, such as %v", len(h.rec.events), len(bad), bad[:min(len(bad), 3)])
	}
}

// TestIOCopyHoldsPipeUntilGC shows why the relays do not use io.Copy: between two *net.TCPConn it
// splices through a pipe it keeps for the whole copy, even while the connection is idle, and after
// the copy the pipe waits in a sync.Pool until the garbage collector empties it. The same idle
// connections relayed by bufferPool hold neither a pipe nor a buffer. If a Go release changes
// io.Copy's behaviour, this test fails, and the reason for the pool should be measured again.
func TestIOCopyHoldsPipeUntilGC(t *testing.T) {
	const n = 100
	relays := map[string]func(p *bufferPool, dst, src net.Conn) (int64, error){
		"io.Copy": func(_ *bufferPool, dst, src net.Conn) (int64, error) { return io.Copy(dst, src) },
		"pool":    func(p *bufferPool, dst, src net.Conn) (int64, error) { return p.relay(dst, src) },
	}
	for _, name := range []string{"io.Copy", "pool"} {
		t.Run(name, func(t *testing.T) {
			relay := relays[name]
			var pool bufferPool
			ln := listen(t)
			basePipes := pipeFDs(t)
			var wg sync.WaitGroup
			var ends []net.Conn
			for range n {
				// a -> (b relays to c) -> d
				a, b := tcpPair(t, ln)
				c, d := tcpPair(t, ln)
				ends = append(ends, a, b, c, d)
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = relay(&pool, c, b)
				}()
				if _, err := a.Write([]byte("hello")); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 5)
				if _, err := io.ReadFull(d, got); err != nil || string(got) != "hello" {
					t.Fatalf("relayed %q, %v", got, err)
				}
			}
			bufs := buffersSettled(&pool)
			idle := pipeFDs(t) - basePipes
			for _, c := range ends {
				c.Close()
			}
			wg.Wait()
			closed := pipeFDs(t) - basePipes
			// sync.Pool keeps a victim cache for one more cycle, and the pipes are closed by finalizers,
			// which run after the collection that found them: collect until they are gone (or 2 s).
			collected := closed
			for deadline := time.Now().Add(2 * time.Second); collected > 0 && time.Now().Before(deadline); {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
				collected = pipeFDs(t) - basePipes
			}
			t.Logf("%s: with %d idle relays %d pipe descriptors and %d pool buffers; after they ended %d; after garbage collections %d",
				name, n, idle, bufs, closed, collected)
			switch name {
			case "io.Copy":
				if idle < n || closed < n || collected > n/2 {
					t.Errorf("io.Copy no longer keeps a pipe per idle copy until GC (%d, %d, %d pipe descriptors)", idle, closed, collected)
				}
			case "pool":
				if idle != 0 || closed != 0 || bufs != 0 || pool.buffersInUse() != 0 {
					t.Errorf("pool relays hold %d pipe descriptors and %d buffers while idle, %d pipes and %d buffers after ending",
						idle, bufs, closed, pool.buffersInUse())
				}
			}
		})
	}
}

// TestRelayCopies checks relay and relayN against what io.Copy and io.CopyN would deliver: every
// byte of a transfer larger than the large buffer, in order, the half-close passed on by the caller,
// exactly n bytes for relayN with the rest left unread, and io.EOF when the source ends early.
func TestRelayCopies(t *testing.T) {
	ln := listen(t)
	data := make([]byte, 3*largeBuffer+12345)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	for _, tc := range []struct {
		name   string
		limit  int64 // < 0: relay
		send   int
		want   int64
		eof    bool
		unread int
	}{
		{"relay", -1, len(data), int64(len(data)), false, 0},
		{"relayN exact", int64(len(data)) - 100, len(data), int64(len(data)) - 100, false, 100},
		{"relayN short", int64(len(data)), 5000, 5000, true, 0},
		{"relayN zero", 0, 10, 0, false, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool bufferPool
			a, b := tcpPair(t, ln)
			c, d := tcpPair(t, ln)
			defer func() {
				for _, x := range []net.Conn{a, b, c, d} {
					x.Close()
				}
			}()
			go func() {
				_, _ = a.Write(data[:tc.send])
				_ = a.(*net.TCPConn).CloseWrite()
			}()
			got := make(chan []byte, 1)
			go func() {
				all, _ := io.ReadAll(d)
				got <- all
			}()
			var n int64
			var err error
			if tc.limit < 0 {
				n, err = pool.relay(c, b)
			} else {
				n, err = pool.relayN(c, b, tc.limit)
			}
			_ = c.(*net.TCPConn).CloseWrite()
			if tc.eof != errors.Is(err, io.EOF) || !tc.eof && err != nil || n != tc.want {
				t.Fatalf("copied %d, %v; want %d (EOF %v)", n, err, tc.want, tc.eof)
			}
			if out := <-got; !bytes.Equal(out, data[:tc.want]) {
				t.Fatalf("delivered %d bytes, not the %d sent in order", len(out), tc.want)
			}
			rest, _ := io.ReadAll(b)
			if len(rest) != tc.unread {
				t.Errorf("%d bytes left for the next reader, want %d", len(rest), tc.unread)
			}
			if k := pool.buffersInUse(); k != 0 {
				t.Errorf("%d buffers not returned", k)
			}
		})
	}
}

// tcpPair returns both ends of a new loopback TCP connection through ln.
func tcpPair(t testing.TB, ln net.Listener) (net.Conn, net.Conn) {
	t.Helper()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestBufferPoolBoundsLargeBuffers checks that at most maxLargeBuffers large buffers are out at once
// (the rest of the bulk relays get small ones), that the pool keeps no more idle buffers than its
// bounds, and that idle ones are reused.
func TestBufferPoolBoundsLargeBuffers(t *testing.T) {
	var p bufferPool
	var out [][]byte
	large := 0
	for range maxLargeBuffers + 5 {
		b := p.get(true)
		if len(b) == largeBuffer {
			large++
		} else if len(b) != smallBuffer {
			t.Fatalf("buffer of %d bytes", len(b))
		}
		out = append(out, b)
	}
	if large != maxLargeBuffers {
		t.Errorf("%d large buffers out at once, want %d", large, maxLargeBuffers)
	}
	for _, b := range out {
		p.put(b)
	}
	if p.buffersInUse() != 0 || len(p.large) != maxIdleLarge || len(p.small) != 5 {
		t.Errorf("after returning all: %d in use, %d large and %d small idle", p.buffersInUse(), len(p.large), len(p.small))
	}
	if b := p.get(true); len(b) != largeBuffer || len(p.large) != maxIdleLarge-1 {
		t.Errorf("got a %d-byte buffer, %d large ones left idle; want an idle large one reused", len(b), len(p.large))
	}
	p.drain()
	if len(p.large) != 0 || len(p.small) != 0 {
		t.Error("drain left idle buffers")
	}
}
