package intercept

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

type countRecorder struct{ n atomic.Int64 }

func (r *countRecorder) Record(audit.Event) { r.n.Add(1) }

// benchClients returns a client talking TLS to the upstream directly and one going through the
// interceptor, both kept-alive, both HTTP/2 if h2 (the interceptor then speaks HTTP/2 on both sides).
func benchClients(b *testing.B, h2 bool, opts ...option) (direct, via *http.Client, s *setup) {
	up := newUpstream(b, nil, false)
	opts = append([]option{withRules(Rule{Host: "github.com", Allow: []Access{{Methods: []string{"GET"}, Paths: []string{"/big", "/small/*"}}}, Source: "bench"}),
		func(c *Config) { c.Recorder = &countRecorder{} }}, opts...)
	s = newSetup(b, up, "github.com", false, opts...)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: up.pool()},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.addr)
		},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	direct = &http.Client{Transport: tr}
	via = s.client(h2)
	b.Cleanup(func() { tr.CloseIdleConnections(); via.CloseIdleConnections() })
	return direct, via, s
}

// fetch GETs url and reads the body, returning how long it took.
func fetch(b *testing.B, c *http.Client, url string, buf []byte) time.Duration {
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.CopyBuffer(io.Discard, resp.Body, buf)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return time.Since(start)
}

// BenchmarkThroughput downloads 64 MiB over one kept-alive HTTPS connection, directly and through the
// interceptor, in each iteration, and reports both throughputs and their ratio (target: at least 0.5).
func BenchmarkThroughput(b *testing.B) {
	const size = 64 << 20
	for _, h2 := range []bool{false, true} {
		b.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(b *testing.B) {
			direct, via, s := benchClients(b, h2)
			path := fmt.Sprintf("/big?n=%d", size)
			directURL, viaURL := s.url(path), s.url(path)
			buf := make([]byte, 256<<10)
			fetch(b, direct, directURL, buf) // warm up: connections, leaf
			fetch(b, via, viaURL, buf)
			var dDirect, dVia time.Duration
			for b.Loop() {
				dDirect += fetch(b, direct, directURL, buf)
				dVia += fetch(b, via, viaURL, buf)
			}
			mb := float64(size) / (1 << 20) * float64(b.N)
			b.ReportMetric(mb/dDirect.Seconds(), "direct-MiB/s")
			b.ReportMetric(mb/dVia.Seconds(), "intercepted-MiB/s")
			b.ReportMetric(dDirect.Seconds()/dVia.Seconds(), "x-of-direct")
		})
	}
}

// BenchmarkThroughputRedacted is BenchmarkThroughput with two credential values to search every
// answer for (Config.Redactions), as on a host a credential was sent to: the intercepted figure
// against direct shows what the search costs on top of interception. Placeholders are as long as
// their values (as creds makes them), so the answer keeps its Content-Length.
func BenchmarkThroughputRedacted(b *testing.B) {
	const size = 64 << 20
	reds := []redact.Pair{{Secret: "ghs_REALREALREALREALREALREALREALREAL1234", Replacement: "ghs_PLACEHOLDERPLACEHOLDERPLACEHOLDER123"},
		{Secret: "eC1hY2Nlc3MtdG9rZW46Z2hzX1JFQUxSRUFM", Replacement: "eC1hY2Nlc3MtdG9rZW46Z2hzX1BMQUNFSE9M"}}
	for _, h2 := range []bool{false, true} {
		b.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(b *testing.B) {
			direct, via, s := benchClients(b, h2, func(c *Config) {
				c.Redactions = func(string) []redact.Pair { return reds }
			})
			path := fmt.Sprintf("/big?n=%d", size)
			buf := make([]byte, 256<<10)
			fetch(b, direct, s.url(path), buf)
			fetch(b, via, s.url(path), buf)
			var dDirect, dVia time.Duration
			for b.Loop() {
				dDirect += fetch(b, direct, s.url(path), buf)
				dVia += fetch(b, via, s.url(path), buf)
			}
			b.ReportMetric(dDirect.Seconds()/dVia.Seconds(), "x-of-direct")
		})
	}
}

// BenchmarkRequests makes small GETs one after another on a kept-alive connection, alternating direct
// and intercepted, and reports requests per second of each, their ratio, and the median latency the
// interceptor adds (target: under 1 ms).
func BenchmarkRequests(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(b *testing.B) {
			direct, via, s := benchClients(b, h2)
			url := s.url("/small/x")
			buf := make([]byte, 32<<10)
			fetch(b, direct, url, buf)
			fetch(b, via, url, buf)
			var ds, vs []time.Duration
			for b.Loop() {
				ds = append(ds, fetch(b, direct, url, buf))
				vs = append(vs, fetch(b, via, url, buf))
			}
			var sumD, sumV time.Duration
			for i := range ds {
				sumD += ds[i]
				sumV += vs[i]
			}
			slices.Sort(ds)
			slices.Sort(vs)
			n := float64(len(ds))
			b.ReportMetric(n/sumD.Seconds(), "direct-req/s")
			b.ReportMetric(n/sumV.Seconds(), "intercepted-req/s")
			b.ReportMetric(sumD.Seconds()/sumV.Seconds(), "x-of-direct")
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-direct-µs")
			b.ReportMetric(float64(vs[len(vs)/2].Microseconds()), "p50-intercepted-µs")
			b.ReportMetric(float64((vs[len(vs)/2] - ds[len(ds)/2]).Microseconds()), "p50-added-µs")
		})
	}
}

// BenchmarkLeaf measures minting a leaf (the first connection to a name) against a cache hit.
func BenchmarkLeaf(b *testing.B) {
	ca, err := NewCA()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("mint", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := ca.Leaf(fmt.Sprintf("h%d.example.com", i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := ca.Leaf("github.com"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
