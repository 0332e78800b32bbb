package budget

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestAdmitLimits(t *testing.T) {
	prices := Prices{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	answer := Usage{Input: 100, Output: 50, CacheRead: 1000, CacheWrite: 10, Known: true}
	// One answer: input 1110 tokens, output 50, cost (300+750+300+37.5)/1e6 = 0.0013875 USD.
	for _, tc := range []struct {
		name      string
		spec      Spec
		admitted  int    // answers let through before the refusal
		limit     string // the refusal's Limit; "" = never refused (of 10)
		wantInMsg string
	}{
		{"no limits", Spec{}, 10, "", ""},
		{"maxRequests", Spec{MaxRequests: 3}, 3, "maxRequests", "budget maxRequests 3 for api.example spent (run R1); raise budgets[0].maxRequests to continue"},
		{"maxInputTokens", Spec{MaxInputTokens: 2220}, 2, "maxInputTokens", "maxInputTokens 2220"},
		{"maxInputTokens not yet", Spec{MaxInputTokens: 2221}, 3, "maxInputTokens", ""},
		{"maxOutputTokens", Spec{MaxOutputTokens: 120}, 3, "maxOutputTokens", "raise budgets[0].maxOutputTokens"},
		{"maxCost", Spec{MaxCostUSD: 0.005, Prices: prices}, 4, "maxCost", "budget maxCost 0.005 USD for api.example spent (run R1); raise budgets[0].maxCost.usd"},
		{"unknown usage counts as a request", Spec{MaxRequests: 2}, 2, "maxRequests", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Host = "api.example"
			if tc.spec.Prices == (Prices{}) {
				tc.spec.Prices = prices
			}
			l, err := NewLedger([]Spec{tc.spec}, nil, "R1")
			if err != nil {
				t.Fatal(err)
			}
			b := l.For("API.example:443")
			if b == nil {
				t.Fatal("For: no budget for the host")
			}
			u := answer
			if strings.HasPrefix(tc.name, "unknown") {
				u = Usage{}
			}
			for i := 0; i < 10; i++ {
				err := b.Admit()
				if err == nil {
					if i >= tc.admitted {
						t.Fatalf("request %d admitted, want refused after %d", i+1, tc.admitted)
					}
					if err := b.Record(u); err != nil {
						t.Fatal(err)
					}
					continue
				}
				var se *SpentError
				if !errors.As(err, &se) {
					t.Fatalf("Admit: %v, want a *SpentError", err)
				}
				if i != tc.admitted || se.Limit != tc.limit {
					t.Fatalf("request %d refused by %s (%v), want the %dth refused by %s", i+1, se.Limit, err, tc.admitted+1, tc.limit)
				}
				if !strings.Contains(err.Error(), tc.wantInMsg) || !strings.HasPrefix(err.Error(), "cordon: budget ") {
					t.Fatalf("message %q, want it to contain %q", err, tc.wantInMsg)
				}
				return
			}
			if tc.limit != "" {
				t.Fatalf("never refused, want refused by %s", tc.limit)
			}
		})
	}
}

// TestAdmitConcurrent: many goroutines admitting and recording at once lose nothing, and requests
// in flight cannot overshoot maxRequests.
func TestAdmitConcurrent(t *testing.T) {
	const workers, each, max = 16, 200, 1000
	l, err := NewLedger([]Spec{{Host: "h", MaxRequests: max}}, nil, "R")
	if err != nil {
		t.Fatal(err)
	}
	b := l.For("h")
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, refused := 0, 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if b.Admit() != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				b.Record(Usage{Input: 3, Output: 2, CacheRead: 1, Known: true})
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != max || refused != workers*each-max {
		t.Fatalf("admitted %d, refused %d; want %d, %d", admitted, refused, max, workers*each-max)
	}
	want := Totals{Requests: max, Input: 4 * max, Output: 2 * max, CacheRead: max}
	if got := l.Totals()["h"]; got != want {
		t.Fatalf("totals %+v, want %+v", got, want)
	}
}

// TestCheckHard: a hard budget cuts an answer whose usage so far passes a limit; a soft one never.
func TestCheckHard(t *testing.T) {
	for _, hard := range []bool{false, true} {
		l, err := NewLedger([]Spec{{Host: "h", MaxInputTokens: 100, Hard: hard}}, nil, "R")
		if err != nil {
			t.Fatal(err)
		}
		b := l.For("h")
		if err := b.Admit(); err != nil {
			t.Fatal(err)
		}
		if err := b.Check(Usage{Input: 100}); err != nil {
			t.Fatalf("hard=%v: at the limit: %v, want nil", hard, err)
		}
		err = b.Check(Usage{Input: 60, CacheRead: 41})
		var se *SpentError
		if hard != errors.As(err, &se) {
			t.Fatalf("hard=%v: past the limit: %v", hard, err)
		}
	}
}

func TestNewLedgerRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no host", Spec{}, "host is empty"},
		{"api", Spec{Host: "h", API: "gemini"}, `api "gemini"`},
		{"per", Spec{Host: "h", Per: "week"}, `per "week"`},
		{"day without store", Spec{Host: "h", Per: PerDay}, "state directory"},
		{"negative", Spec{Host: "h", MaxRequests: -1}, "negative"},
		{"cost without prices", Spec{Host: "h", MaxCostUSD: 1}, "needs prices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLedger([]Spec{tc.spec}, nil, "R")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "budgets[0]: ") {
				t.Fatalf("got %v, want budgets[0]: ...%s", err, tc.want)
			}
		})
	}
	_, err := NewLedger([]Spec{{Host: "h"}, {Host: "H."}}, nil, "R")
	if err == nil || !strings.Contains(err.Error(), "budgets[1]: host H. already has a budget (budgets[0])") {
		t.Fatalf("duplicate host: %v", err)
	}
	l, err := NewLedger(nil, nil, "R")
	if err != nil || l.For("h") != nil {
		t.Fatalf("no budgets: %v, %v", l.For("h"), err)
	}
}

func TestPricesCost(t *testing.T) {
	u := Usage{Input: 1e6, Output: 2e6, CacheRead: 1e6, CacheWrite: 1e6}
	for _, tc := range []struct {
		p    Prices
		want float64
	}{
		{Prices{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}, 3 + 30 + 0.3 + 3.75},
		{Prices{Input: 3, Output: 15}, 3 + 30 + 3 + 3}, // unpriced cache at the input price
	} {
		if got := tc.p.Cost(u); got != tc.want {
			t.Errorf("%+v: cost %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestSpentErrorText(t *testing.T) {
	for _, tc := range []struct {
		e    SpentError
		want string
	}{
		{SpentError{Source: "budgets[0]", Limit: "maxOutputTokens", Host: "api.anthropic.com", Run: "20261201-x", Max: 400000},
			"cordon: budget maxOutputTokens 400000 for api.anthropic.com spent (run 20261201-x); raise budgets[0].maxOutputTokens to continue"},
		{SpentError{Source: "budgets[1]", Limit: "maxCost", Host: "h", Run: "R", Day: "2026-12-01", Max: 5},
			"cordon: budget maxCost 5.00 USD for h spent (day 2026-12-01 UTC, run R); raise budgets[1].maxCost.usd to continue"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}
