package intercept

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/fakeapi"
)

// BenchmarkMeteredStream streams a long Anthropic Messages answer (~10 MiB of server-sent events of
// small text deltas, as a model writes them) through two interceptors of the same upstream in the same run, one
// metering the host's usage against a budget and one only intercepting it, alternately, and reports
// both throughputs and their ratio, over the totals and as the median of the per-pair ratios, which a
// burst of other load on the machine disturbs less (target: metered at least 0.95x of unmetered).
func BenchmarkMeteredStream(b *testing.B) {
	const deltas = 1 << 16 // ~64 bytes of text each: a ~10 MiB stream
	// The stream is rendered once by the fake Anthropic API and replayed in 4 KiB flushed writes, so
	// that the upstream's own cost does not hide the meter's.
	rec := httptest.NewRecorder()
	fakeapi.New(fakeapi.Answer{
		Usage:  fakeapi.Usage{Input: 1000, Output: deltas, CacheRead: 500, CacheWrite: 10},
		Text:   strings.Repeat("The quick brown fox jumps over the lazy dog, again and again. ", deltas),
		Deltas: deltas,
	}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(`{"stream":true}`)))
	stream := rec.Body.Bytes()
	replay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for p := stream; len(p) > 0; {
			n := min(len(p), 4<<10)
			w.Write(p[:n])
			w.(http.Flusher).Flush()
			p = p[n:]
		}
	})
	for _, h2 := range []bool{false, true} {
		b.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(b *testing.B) {
			up := newUpstream(b, replay, false)
			hosts := func(c *Config) { c.Hosts, c.Recorder = []string{modelHost}, &countRecorder{} }
			ledger, err := budget.NewLedger([]budget.Spec{{Host: modelHost, API: budget.Anthropic, MaxRequests: 1 << 40,
				MaxCostUSD: 1 << 40, Prices: budget.Prices{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}}}, nil, "bench")
			if err != nil {
				b.Fatal(err)
			}
			plain := newSetup(b, up, modelHost, false, hosts)
			metered := newSetup(b, up, modelHost, false, hosts, func(c *Config) { c.Budgets = ledger })
			pc, mc := plain.client(h2), metered.client(h2)
			b.Cleanup(func() { pc.CloseIdleConnections(); mc.CloseIdleConnections() })
			buf := make([]byte, 256<<10)
			post := func(s *setup, c *http.Client) (time.Duration, int64) {
				start := time.Now()
				resp, err := c.Post(s.url("/v1/messages"), "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("POST /v1/messages (metered %v): %d %v after %d bytes", s == metered, resp.StatusCode, err, n)
				}
				return time.Since(start), n
			}
			post(plain, pc) // warm up: connections, leaves
			post(metered, mc)
			var dPlain, dMetered time.Duration
			var bytes int64
			var ratios []float64 // per pair: a burst of load on the machine hits both of a pair
			for b.Loop() {
				p, n := post(plain, pc)
				dPlain += p
				m, _ := post(metered, mc)
				dMetered += m
				bytes += n
				ratios = append(ratios, p.Seconds()/m.Seconds())
			}
			if got := ledger.Totals()[modelHost]; got.Requests != int64(b.N)+1 || got.Output != int64(deltas)*(int64(b.N)+1) {
				b.Fatalf("metered %+v over %d answers: the meter did not read the stream's usage", got, b.N+1)
			}
			mib := float64(bytes) / (1 << 20)
			b.ReportMetric(mib/dPlain.Seconds(), "intercepted-MiB/s")
			b.ReportMetric(mib/dMetered.Seconds(), "metered-MiB/s")
			b.ReportMetric(dPlain.Seconds()/dMetered.Seconds(), "x-of-intercepted")
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "x-median-pair")
		})
	}
}
