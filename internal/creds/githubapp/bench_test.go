package githubapp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/creds/githubapp/fakegithub"
)

// BenchmarkTokenCached measures Token when a fresh token is cached, the call the gateway makes on every
// request it injects into. It reports the cost as a multiple of a bare mutex round trip plus a clock
// read (x_lock_clock), the least any concurrency-safe expiry check can do.
func BenchmarkTokenCached(b *testing.B) {
	app := fakegithub.NewApp(b, fakegithub.Options{Key: testKey()})
	cfg := config(app, newClock())
	cfg.Now = time.Now
	src := newSourceB(b, cfg)
	ctx := context.Background()
	if _, err := src.Token(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := src.Token(ctx); err != nil {
			b.Fatal(err)
		}
	}
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)

	// The baseline runs as many iterations in the same process, after the timed loop (testing.Benchmark
	// cannot nest inside a running benchmark).
	var mu sync.Mutex
	var t time.Time
	begin := time.Now()
	for range b.N {
		mu.Lock()
		t = time.Now()
		mu.Unlock()
	}
	base := float64(time.Since(begin).Nanoseconds()) / float64(b.N)
	_ = t
	b.ReportMetric(perOp/base, "x_lock_clock")
}
