package cordon_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestUnchangedRunRemoved: a run that changed nothing is gone from its store when Wait returns,
// unless Config.Keep; one that changed something, or whose gateway refused something, is kept,
// and Exit.Kept says why.
func TestUnchangedRunRemoved(t *testing.T) {
	refusing := cordon.DefaultPolicy()
	refusing.Network = &policy.Network{}
	tests := []struct {
		name    string
		pol     *cordon.Policy
		keep    bool
		command []string
		want    cordon.KeepReason
	}{
		{"unchanged", nil, false, []string{"true"}, ""},
		{"unchanged with network", refusing, false, []string{"true"}, ""},
		{"keep", nil, true, []string{"true"}, cordon.KeptAsked},
		{"changed", nil, false, []string{"sh", "-c", "echo x > f"}, cordon.KeptChanges},
		{"refused", refusing, false, []string{"sh", "-c", "getent hosts evil.test; true"}, cordon.KeptNetwork},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, tc.pol, tc.command...)
			cfg.Keep = tc.keep
			r := startOrSkip(t, context.Background(), cfg)
			defer r.Close()
			exit, err := r.Wait(context.Background())
			if err != nil || exit.Kept != tc.want {
				t.Fatalf("Wait = %+v, %v; want Kept %q", exit, err, tc.want)
			}
			runs, err := cordon.Store{Dir: cfg.StateDir}.List()
			if err != nil {
				t.Fatal(err)
			}
			if kept := len(runs) == 1; kept != (tc.want != "") {
				t.Errorf("the store holds %d runs", len(runs))
			}
			if _, err := r.Finished(); (err == nil) != (tc.want != "") {
				t.Errorf("Finished = %v", err)
			}
			if tc.want == "" {
				if entries, _ := os.ReadDir(filepath.Join(cfg.StateDir, "runs")); len(entries) > 0 {
					t.Errorf("the removed run left %v", entries)
				}
			}
		})
	}
}
