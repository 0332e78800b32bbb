package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
)

// benchGateway is a gateway with nothing but what the hot path needs: a policy that allows one name
// pinned to loopback, a one-entry name map, a recorder that counts. It returns the transparent
// listener's address and the mapped destination's port (the upstream's).
type benchPolicy struct{}

func (benchPolicy) Decide(host string, port uint16) egress.Decision {
	return egress.Decision{Allow: true, Rule: "bench", Upstream: loopback}
}
func (benchPolicy) Known(string) bool { return true }

type benchNames struct{ addr netip.Addr }

func (n benchNames) Assign(string) (netip.Addr, netip.Addr, error) { return n.addr, netip.Addr{}, nil }
func (n benchNames) Lookup(a netip.Addr) (string, bool)            { return "bench.test", a == n.addr }

type countRecorder struct{ n atomic.Int64 }

func (r *countRecorder) Record(audit.Event) { r.n.Add(1) }

func benchGateway(b *testing.B, upstreamPort uint16) string {
	b.Helper()
	return benchGatewayWith(b, upstreamPort, &countRecorder{})
}

// benchGatewayWith is benchGateway recording to rec.
func benchGatewayWith(b *testing.B, upstreamPort uint16, rec audit.Recorder) string {
	b.Helper()
	mapped := netip.MustParseAddr("10.88.0.1")
	g, err := New(Config{
		Policy:      benchPolicy{},
		Names:       benchNames{mapped},
		Recorder:    rec,
		LookupNetIP: func(context.Context, string) ([]netip.Addr, error) { return nil, nil },
		OrigDst: func(net.Conn) (netip.AddrPort, error) {
			return netip.AddrPortFrom(mapped, upstreamPort), nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ln := served(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Transparent(ctx, ln)
	}()
	b.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// sourceServer sends each client as many bytes as the 8-byte big-endian count it asks for.
func sourceServer(b *testing.B) uint16 {
	b.Helper()
	ln := listen(b)
	chunk := make([]byte, 1<<20)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var n [8]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				left := int64(binary.BigEndian.Uint64(n[:]))
				for left > 0 {
					k, err := c.Write(chunk[:min(left, int64(len(chunk)))])
					if err != nil {
						return
					}
					left -= int64(k)
				}
			}()
		}
	}()
	return portOf(ln.Addr())
}

// download asks addr for size bytes and reads them all, returning how long it took.
func download(b *testing.B, addr string, size int64, buf []byte) time.Duration {
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(binary.BigEndian.AppendUint64(nil, uint64(size))); err != nil {
		b.Fatal(err)
	}
	var got int64
	for got < size {
		n, err := c.Read(buf)
		got += int64(n)
		if err != nil {
			b.Fatalf("after %d of %d bytes: %v", got, size, err)
		}
	}
	return time.Since(start)
}

// BenchmarkRelay downloads 256 MiB from a loopback upstream, directly and through the transparent
// path, in each iteration, and reports both throughputs and their ratio (the target is at
// least 0.8 of direct).
func BenchmarkRelay(b *testing.B) {
	const size = 256 << 20
	port := sourceServer(b)
	direct := netip.AddrPortFrom(loopback, port).String()
	via := benchGateway(b, port)
	buf := make([]byte, 256<<10)
	download(b, via, 1<<20, buf) // warm up
	var dDirect, dVia time.Duration
	for b.Loop() {
		dDirect += download(b, direct, size, buf)
		dVia += download(b, via, size, buf)
	}
	mb := float64(size) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/dDirect.Seconds(), "direct-MiB/s")
	b.ReportMetric(mb/dVia.Seconds(), "gateway-MiB/s")
	b.ReportMetric(dDirect.Seconds()/dVia.Seconds(), "x-of-direct")
}

// echoOnce answers each connection's 5 bytes and closes.
func echoServer(b *testing.B) uint16 {
	b.Helper()
	ln := listen(b)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 5)
				if _, err := io.ReadFull(c, buf); err == nil {
					_, _ = c.Write(buf)
				}
			}()
		}
	}()
	return portOf(ln.Addr())
}

func exchange(b *testing.B, addr string) time.Duration {
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Write([]byte("\x00ping")); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	c.Close()
	return d
}

// BenchmarkConnect opens new connections (connect, 5 bytes each way, close) through the transparent
// path, 8 at a time, and reports connections per second, and the median latency added over the same
// exchange made directly and the process's CPU time per exchange both ways (measured one at a time,
// interleaved, so both see the same machine).
func BenchmarkConnect(b *testing.B) {
	port := echoServer(b)
	direct := netip.AddrPortFrom(loopback, port).String()
	via := benchGateway(b, port)
	var direct50, via50 []time.Duration
	var cpuDirect, cpuVia time.Duration
	for range 300 {
		c0 := cpuTime(b)
		direct50 = append(direct50, exchange(b, direct))
		c1 := cpuTime(b)
		via50 = append(via50, exchange(b, via))
		c2 := cpuTime(b)
		cpuDirect, cpuVia = cpuDirect+c1-c0, cpuVia+c2-c1
	}
	slices.Sort(direct50)
	slices.Sort(via50)

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				exchange(b, via)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "conns/s")
	b.ReportMetric(float64(via50[len(via50)/2].Microseconds()), "p50-gateway-µs")
	b.ReportMetric(float64(direct50[len(direct50)/2].Microseconds()), "p50-direct-µs")
	b.ReportMetric(float64((via50[len(via50)/2] - direct50[len(direct50)/2]).Microseconds()), "p50-added-µs")
	// CPU of the whole process (client, upstream and, through the gateway, the gateway) per exchange.
	b.ReportMetric(float64(cpuDirect.Microseconds())/300, "direct-cpu-µs/conn")
	b.ReportMetric(float64(cpuVia.Microseconds())/300, "gateway-cpu-µs/conn")
}

// cpuTime is this process's user plus system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// relayListener relays each connection it accepts to upstream with copy (its 8-byte request up,
// everything after down), like the gateway's relay without its checks.
func relayListener(b *testing.B, upstream string, copy func(dst io.Writer, src net.Conn) (int64, error)) string {
	return acceptRelay(b, upstream, func(c, up *net.TCPConn) {
		go func() { _, _ = io.CopyN(up, c, 8) }()
		_, _ = copy(c, up)
	})
}

// acceptRelay listens on loopback and, for each connection it accepts, dials upstream and runs
// relay between the two, closing both after.
func acceptRelay(b *testing.B, upstream string, relay func(c, up *net.TCPConn)) string {
	ln := listen(b)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				relay(c.(*net.TCPConn), up.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkRelayCopy downloads 256 MiB from a loopback upstream directly, through a relay using
// io.Copy (splice(2) through a 1 MiB pipe), and through the gateway's bufferPool relay, interleaved in
// each iteration, and reports each one's throughput against direct and the process's CPU seconds per
// GiB (upstream and client included: the difference from direct is the relay's cost). This is the
// measurement behind the relay's choice of pooled buffers over splice.
func BenchmarkRelayCopy(b *testing.B) {
	const size = 256 << 20
	port := sourceServer(b)
	var pool bufferPool
	addrs := []string{
		netip.AddrPortFrom(loopback, port).String(),
		"", "",
	}
	addrs[1] = relayListener(b, addrs[0], func(dst io.Writer, src net.Conn) (int64, error) { return io.Copy(dst, src) })
	addrs[2] = relayListener(b, addrs[0], pool.relay)
	names := []string{"direct", "splice", "pool"}
	buf := make([]byte, 256<<10)
	var wall, cpu [3]time.Duration
	for b.Loop() {
		for i, a := range addrs {
			c0 := cpuTime(b)
			wall[i] += download(b, a, size, buf)
			cpu[i] += cpuTime(b) - c0
		}
	}
	gib := float64(size) / (1 << 30) * float64(b.N)
	for i, name := range names {
		if i > 0 {
			b.ReportMetric(wall[0].Seconds()/wall[i].Seconds(), name+"-x-of-direct")
		}
		b.ReportMetric(cpu[i].Seconds()/gib, name+"-cpu-s/GiB")
	}
}

// plainRelay relays each connection it accepts to upstream both ways through 32 KiB buffers (Go's
// splice path hidden, as bench/egress's Go relay does), each direction's end passed on as a
// half-close: a relay with no checks, the floor for BenchmarkConnectHTTP.
func plainRelay(b *testing.B, upstream string) string {
	pipe := func(dst, src *net.TCPConn) {
		buf := make([]byte, 32<<10)
		_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
		_ = dst.CloseWrite()
	}
	return acceptRelay(b, upstream, func(c, up *net.TCPConn) {
		done := make(chan struct{})
		go func() { pipe(up, c); close(done) }()
		pipe(c, up)
		<-done
	})
}

// BenchmarkConnectHTTP is bench/egress's connection test in one process: a new connection per
// request (connect, a HEAD request, read the answer, close), one at a time, to a net/http upstream,
// so that a CPU or allocation profile of the gateway's per-connection work (accept, judge, dial,
// forward, record) can be taken with -cpuprofile and -memprofile. Each iteration makes one connection
// through each contender in turn: direct; a plain Go relay (accept, dial, copy both ways, no checks:
// the floor of any relay written this way); the transparent gateway with a counting recorder; and the
// gateway writing a real audit log. It reports each one's p50 latency and CPU per connection (the
// whole process's: client, relay and upstream), and the gateway's added latency over the relay's.
func BenchmarkConnectHTTP(b *testing.B) {
	ln := listen(b)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	port := portOf(ln.Addr())
	log, err := audit.NewLog(b.TempDir() + "/audit.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = log.Close() })
	contenders := []struct {
		name string
		addr string
	}{
		{"direct", ln.Addr().String()},
		{"relay", plainRelay(b, ln.Addr().String())},
		{"gateway", benchGateway(b, port)},
		{"gateway-log", benchGatewayWith(b, port, log)},
	}
	req := []byte("HEAD / HTTP/1.1\r\nHost: bench.test\r\n\r\n")
	buf := make([]byte, 1024)
	one := func(addr string) (time.Duration, time.Duration) {
		cpu0 := cpuTime(b)
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if n, err := c.Read(buf); err != nil || !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200")) {
			b.Fatalf("answer %q, %v", buf[:n], err)
		}
		d := time.Since(start)
		c.Close()
		return d, cpuTime(b) - cpu0
	}
	for range 50 {
		for _, c := range contenders {
			one(c.addr)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	lat := make([][]time.Duration, len(contenders))
	cpu := make([]time.Duration, len(contenders))
	for range b.N {
		for i, c := range contenders {
			d, u := one(c.addr)
			lat[i] = append(lat[i], d)
			cpu[i] += u
		}
	}
	p50 := make([]float64, len(contenders))
	for i, c := range contenders {
		slices.Sort(lat[i])
		p50[i] = float64(lat[i][len(lat[i])/2].Nanoseconds()) / 1e3
		b.ReportMetric(p50[i], c.name+"-p50-µs")
		b.ReportMetric(float64(cpu[i].Nanoseconds())/1e3/float64(b.N), c.name+"-cpu-µs/conn")
	}
	// What the gateway adds to a connection, against what the plain relay adds: the checks' cost
	// over relaying alone.
	b.ReportMetric((p50[2]-p50[0])/(p50[1]-p50[0]), "gateway-added/relay-added")
	b.ReportMetric((p50[3]-p50[0])/(p50[1]-p50[0]), "gateway-log-added/relay-added")
}
