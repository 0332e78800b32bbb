package inpod

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// TestWatchLeaseAfterRestart: a gateway that starts with a lease file renewed long ago (its sidecar
// restarted after cordon died) finds the lease lapsed at once rather than starting a new one; one
// renewed just now gives it the rest of the lease.
func TestWatchLeaseAfterRestart(t *testing.T) {
	const lease = 2 * time.Second
	for _, tc := range []struct {
		name   string
		age    time.Duration
		before time.Duration // the lapse must come before this
		after  time.Duration // and not before this
	}{
		{"renewed long ago", time.Hour, lease / 2, 0},
		{"renewed just now", 0, 4 * lease, lease / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := filepath.Join(dir, kubepod.LeaseFile)
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			then := time.Now().Add(-tc.age)
			if err := os.Chtimes(f, then, then); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			select {
			case <-watchLease(context.Background(), dir, lease):
				if d := time.Since(start); d < tc.after {
					t.Errorf("lapsed after %s, want %s at least", d, tc.after)
				}
			case <-time.After(tc.before):
				t.Errorf("no lapse within %s", tc.before)
			}
		})
	}
}

// TestLeaseLapsedAtStart: the check a gateway makes before it serves finds a lease renewed a lease
// ago or more lapsed, and neither a fresh one nor a missing one (a first start), nor any with no lease.
func TestLeaseLapsedAtStart(t *testing.T) {
	const lease = 5 * time.Second
	dir := t.TempDir()
	path := filepath.Join(dir, kubepod.LeaseFile)
	if _, ok := leaseLapsed(dir, lease); ok {
		t.Error("a lease never renewed is lapsed at the first start")
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := leaseLapsed(dir, lease); ok {
		t.Error("a lease renewed just now is lapsed")
	}
	old := time.Now().Add(-2 * lease)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if reason, ok := leaseLapsed(dir, lease); !ok || reason == "" {
		t.Error("a lease renewed two leases ago is not lapsed")
	}
	if _, ok := leaseLapsed(dir, 0); ok {
		t.Error("a run without a lease is lapsed")
	}
}
