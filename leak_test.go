package cordon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestNoGoroutineOutlivesARun: in-process runs (with and without the gateway, ended by the command,
// by Kill, by Wait's context and by Close alone) leave no goroutine behind: the gateway's servers,
// the stream relays, the record's sync and the box's own waiters all end with the run.
func TestNoGoroutineOutlivesARun(t *testing.T) {
	netPol := func() *cordon.Policy {
		p := cordon.DefaultPolicy()
		p.Network = &policy.Network{}
		return p
	}
	tests := []struct {
		name string
		pol  *cordon.Policy
		cmd  []string
		end  func(t *testing.T, r *cordon.Run)
	}{
		{"exits", nil, []string{"true"}, func(t *testing.T, r *cordon.Run) {
			if exit, err := r.Wait(context.Background()); err != nil || exit.Code != 0 {
				t.Fatalf("Wait = %+v, %v; want exit 0", exit, err)
			}
		}},
		{"exits with the gateway", netPol(), []string{"true"}, func(t *testing.T, r *cordon.Run) {
			exit, err := r.Wait(context.Background())
			if err != nil || exit.Code != 0 || exit.Network == nil {
				t.Fatalf("Wait = %+v, %v; want exit 0 and a network summary", exit, err)
			}
		}},
		{"killed", netPol(), []string{"sleep", "60"}, func(t *testing.T, r *cordon.Run) {
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			if exit, _ := r.Wait(context.Background()); exit.Code == 0 {
				t.Fatalf("a killed run exited 0")
			}
		}},
		{"wait's context ends", nil, []string{"sleep", "60"}, func(t *testing.T, r *cordon.Run) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if _, err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait = %v, want the context's error", err)
			}
		}},
		{"closed while running", netPol(), []string{"sleep", "60"}, func(t *testing.T, r *cordon.Run) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			r := startOrSkip(t, context.Background(), config(t, tc.pol, tc.cmd...))
			tc.end(t, r)
			if err := r.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := r.Signal(os.Interrupt); err != nil {
				t.Fatalf("Signal after the end: %v", err)
			}
		})
	}
}

// TestStartCancelledUndoes: a start whose context ends before the command runs returns the
// context's error and leaves no run behind and no goroutine.
func TestStartCancelledUndoes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := config(t, nil, "true")
	if _, err := cordon.Start(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with an ended context = %v, want context.Canceled", err)
	}
	runs, err := cordon.Store{Dir: cfg.StateDir}.List()
	if err != nil || len(runs) != 0 {
		t.Fatalf("runs after a cancelled start: %d, %v; want none", len(runs), err)
	}
}

// TestStartCancelledWhilePreparing: a context that ends while a credential's command is still
// running (the window in which a Ctrl-C used to kill cordon before its deferred revoke) stops the
// start promptly, leaves no run and no goroutine, and is the error Start returns.
func TestStartCancelledWhilePreparing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	pol := cordon.DefaultPolicy()
	pol.Network = &policy.Network{}
	// The credential's command says, through a FIFO, that it runs (the run is preparing its
	// credentials), and the test cancels then: never before, never after.
	fifo := filepath.Join(t.TempDir(), "preparing")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	pol.Credentials = []policy.Credential{{
		Name: "TOKEN", From: policy.Source{Command: []string{"sh", "-c", `echo preparing > "$0"; exec sleep 30`, fifo}},
		Inject: policy.Inject{Hosts: []string{"api.test"}, Header: "X-Token"},
	}}
	cfg := config(t, pol, "true")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if b, err := os.ReadFile(fifo); err == nil && len(b) > 0 {
			cancel()
		}
	}()
	began := time.Now()
	_, err := cordon.Start(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want context.Canceled", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("Start took %v after its context ended", d)
	}
	runs, err := cordon.Store{Dir: cfg.StateDir}.List()
	if err != nil || len(runs) != 0 {
		t.Fatalf("runs after a cancelled start: %d, %v; want none", len(runs), err)
	}
}
