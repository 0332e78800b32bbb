package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAndReads: under -race, readers beside a writer are no race, and every write
// is kept whole and in order.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s := b.String(); strings.ReplaceAll(s, "ab", "") != "" { // a write seen in part
					t.Errorf("a read saw %q", s)
					return
				}
				_ = b.Bytes()
			}
		}()
	}
	for range 1000 {
		b.Write([]byte("ab"))
	}
	close(stop)
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 1000) {
		t.Fatalf("got %d bytes, want 2000 in order", len(got))
	}
	c := b.Bytes()
	c[0] = 'x'
	if b.String()[0] != 'a' {
		t.Fatal("Bytes gave the buffer's own bytes, not a copy")
	}
}
