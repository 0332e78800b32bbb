package cordon_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// startOrSkip starts cfg, skipping the test when this host cannot build a sandbox at all (no user
// namespaces for an unprivileged caller, say): what is tested here is the run's lifecycle, not the
// host.
func startOrSkip(t *testing.T, ctx context.Context, cfg cordon.Config) *cordon.Run {
	t.Helper()
	run, err := cordon.Start(ctx, cfg)
	var se *cordon.SetupError
	if errors.As(err, &se) && os.Getuid() != 0 {
		t.Skipf("this host cannot sandbox an unprivileged caller: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return run
}

// config is a run of command in a fresh project and state directory.
func config(t *testing.T, pol *cordon.Policy, command ...string) cordon.Config {
	return cordon.Config{Policy: pol, Workspace: t.TempDir(), Command: command, StateDir: t.TempDir()}
}

// TestWarningsAreValues: what the run warns about reaches the callback as it happens and
// Run.Warnings afterwards, typed, and nothing is printed.
func TestWarningsAreValues(t *testing.T) {
	pol := cordon.DefaultPolicy()
	pol.Filesystem.ReadOnly = append(pol.Filesystem.ReadOnly, "/nonexistent-cordon-test-path")
	var mu sync.Mutex
	var seen []cordon.Warning
	cfg := config(t, pol, "true")
	cfg.OnWarning = func(w cordon.Warning) {
		mu.Lock()
		seen = append(seen, w)
		mu.Unlock()
	}
	r := startOrSkip(t, context.Background(), cfg)
	defer r.Close()
	if _, err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range r.Warnings() {
		if w.Kind == cordon.WarningDegraded && strings.Contains(w.Message, "/nonexistent-cordon-test-path is not mounted") {
			found = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !found || len(seen) != len(r.Warnings()) {
		t.Fatalf("warnings: callback %v, Warnings %v; want the unmounted path in both", seen, r.Warnings())
	}
}

// TestStartRefuses: what Start refuses before anything is prepared.
func TestStartRefuses(t *testing.T) {
	tests := []struct {
		name string
		cfg  cordon.Config
		want string
	}{
		{"no command", cordon.Config{Workspace: t.TempDir()}, "no command"},
		{"unknown isolation", cordon.Config{Workspace: t.TempDir(), Command: []string{"true"}, Isolation: "vm"}, `isolation "vm" is not known`},
		{"system directory", cordon.Config{Workspace: "/usr", Command: []string{"true"}}, "refusing to expose a system directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.StateDir = t.TempDir()
			_, err := cordon.Start(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestEventsAndBlockedWarnings: a refused name is in the run's events, typed, and reached the caller
// as a WarningBlocked while the run ran; the finished run reads the same events.
func TestEventsAndBlockedWarnings(t *testing.T) {
	pol := cordon.DefaultPolicy()
	pol.Network = &policy.Network{}
	cfg := config(t, pol, "sh", "-c", "getent hosts evil.test; true")
	r := startOrSkip(t, context.Background(), cfg)
	defer r.Close()
	exit, err := r.Wait(context.Background())
	if err != nil || exit.Network == nil {
		t.Fatalf("Wait = %+v, %v", exit, err)
	}
	refused := func(evs []cordon.Event) bool {
		return slices.ContainsFunc(evs, func(e cordon.Event) bool {
			return e.Kind == cordon.EventDNS && e.Decision == cordon.Deny && e.Name == "evil.test" && e.Count >= 1
		})
	}
	evs, err := r.Events()
	if err != nil || !refused(evs) {
		t.Fatalf("Events = %+v, %v; want the refused DNS name", evs, err)
	}
	if !slices.ContainsFunc(r.Warnings(), func(w cordon.Warning) bool {
		return w.Kind == cordon.WarningBlocked && strings.Contains(w.Message, "evil.test")
	}) {
		t.Fatalf("Warnings = %v; want the blocked name", r.Warnings())
	}
	f, err := r.Finished()
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := f.Events(); err != nil || !refused(evs) {
		t.Fatalf("FinishedRun.Events = %+v, %v", evs, err)
	}
}
