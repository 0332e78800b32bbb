package cordon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// TestLazySyncFailedIsNotDurable: a lazy sync that ran and failed must not count as having made the
// record durable, or finish would sync only meta.json (SyncMeta) and never the run's directory entry.
func TestLazySyncFailedIsNotDurable(t *testing.T) {
	rec := &runstate.Run{Dir: filepath.Join(t.TempDir(), "gone"), Meta: runstate.Meta{ID: "x"}}
	s := startLazySync(rec)
	synced(t, s)
	durable, err := s.stop()
	if err == nil {
		t.Fatal("Sync of a missing run directory succeeded: the test tests nothing")
	}
	if durable {
		t.Fatalf("stop = durable after a failed sync (%v)", err)
	}

	ok := startLazySync(&runstate.Run{Dir: t.TempDir(), Meta: runstate.Meta{ID: "y"}})
	synced(t, ok)
	if durable, err = ok.stop(); !durable || err != nil {
		t.Fatalf("stop after a sync that succeeded = %v, %v; want durable", durable, err)
	}
}

// synced waits until s's timer has fired and its sync ended (its result is in the buffered channel),
// so that stop takes that result rather than cancelling the timer.
func synced(t *testing.T, s *lazySync) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(s.done) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lazy sync did not run")
		}
	}
}
