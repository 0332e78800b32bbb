//go:build linux

package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

func TestRunnerTurnsCrashesAndHangsIntoFailures(t *testing.T) {
	probes := []Probe{
		{"t.pass", FileSystem, "passes", func(context.Context, *Env) Verdict { return pass("held") }},
		{"t.panic", FileSystem, "panics", func(context.Context, *Env) Verdict { panic("boom") }},
		{"t.hang", Network, "hangs", func(context.Context, *Env) Verdict { select {} }},
		{"t.empty", Network, "returns no verdict", func(context.Context, *Env) Verdict { return Verdict{} }},
		{"t.skip", Processes, "skips", func(context.Context, *Env) Verdict { return skip("no canary") }},
	}
	res := Run(context.Background(), probes, &Env{}, Options{Timeout: time.Second})
	want := map[string]Status{"t.pass": Pass, "t.panic": Fail, "t.hang": Fail, "t.empty": Fail, "t.skip": Skip}
	for _, r := range res {
		if r.Status != want[r.ID] {
			t.Errorf("%s: got %s (%s), want %s", r.ID, r.Status, r.Evidence, want[r.ID])
		}
	}
	if !strings.Contains(res[1].Evidence, "probe crashed: boom") || !strings.Contains(res[2].Evidence, "timed out") {
		t.Errorf("evidence does not say what happened: %+v", res)
	}
	sc := NewScorecard(res)
	if sc.OK {
		t.Fatal("a scorecard with failures is OK")
	}
	var table bytes.Buffer
	if err := sc.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"t.panic", "probe crashed", "filesystem   1/2 passed", "processes    0/0 passed (1 skipped, not counted)", "FAIL:"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	if ok := NewScorecard(res[:1]); !ok.OK {
		t.Error("a scorecard of passes is not OK")
	}
}

func TestOnlySelectsByPrefix(t *testing.T) {
	res := Run(context.Background(), All(), NewEnv(Canaries{}), Options{Only: []string{"persist."}})
	if len(res) != 4 {
		t.Fatalf("got %d results, want the 4 persistence probes", len(res))
	}
	for _, r := range res {
		// Run alone (no nonce), persistence probes refuse to plant into the current directory.
		if r.Status != Skip {
			t.Errorf("%s planted without cordon verify: %s", r.ID, r.Status)
		}
	}
}

func TestJSONRoundTripAndRefusals(t *testing.T) {
	sc := NewScorecard([]Result{{ID: "a", Boundary: Network, Status: Pass}, {ID: "b", Boundary: Network, Status: Fail, Evidence: "x"}})
	var buf bytes.Buffer
	if err := sc.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(buf.Bytes())
	if err != nil || len(got.Results) != 2 || got.OK {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{``, `{}`, `{"results":[]}`, `{"results":[{"id":"a","status":"OK"}]}`, `{"results":[{"id":"a","status":"pass"}]}`} {
		if _, err := ReadJSON([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestAliasesNameTheSameFile(t *testing.T) {
	for _, a := range aliases("/home/u/.ssh/key") {
		if a == "/home/u/.ssh/key" {
			t.Errorf("an alias is the path itself")
		}
	}
}

// TestCredPlaceholder: the probe reports the hash of what each credential variable holds (never a
// verdict it cannot make from inside), and fails a variable the policy promised that is not set.
func TestCredPlaceholder(t *testing.T) {
	const held = "sk-ant-api03-a-placeholder"
	sum := sha256.Sum256([]byte(held))
	env := &Env{Canaries: Canaries{Placeholders: []Named{{Name: "CORDON_PROBE_CRED"}}}}
	t.Setenv("CORDON_PROBE_CRED", held)
	if v := credPlaceholder(context.Background(), env); v.Status != Skip || v.Held["CORDON_PROBE_CRED"] != hex.EncodeToString(sum[:]) {
		t.Errorf("set: %v %q %v", v.Status, v.Evidence, v.Held)
	}
	t.Setenv("CORDON_PROBE_CRED", "")
	if v := credPlaceholder(context.Background(), env); v.Status != Fail {
		t.Errorf("unset: %v %q, want FAIL", v.Status, v.Evidence)
	}
}
