//go:build linux

package inpod

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestKeep: the keeper returns nil on SIGTERM and on SIGINT (sent to the test process, which keeps a
// handler of its own meanwhile, so a signal Keep has not yet asked for does not end the test; each
// is sent again until Keep has it), and when its context ends.
func TestKeep(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			// mine sees every signal the loop sends; the loop sends the next only once mine has
			// the last, and returns only once mine has every one, so that none is still on its
			// way when a later test leaves the signal to its default action (which would kill
			// the test binary).
			mine := make(chan os.Signal, 16)
			signal.Notify(mine, sig)
			defer signal.Stop(mine)
			done := make(chan error, 1)
			go func() { done <- Keep(context.Background()) }()
			deadline := time.After(10 * time.Second)
			for returned := false; !returned; {
				if err := syscall.Kill(os.Getpid(), sig); err != nil {
					t.Fatal(err)
				}
				select {
				case <-mine:
				case <-deadline:
					t.Fatal("the signal never arrived")
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
					returned = true
				case <-time.After(20 * time.Millisecond): // Keep may not have been listening yet
				case <-deadline:
					t.Fatal("Keep did not return on the signal")
				}
			}
		})
	}
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Keep(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
