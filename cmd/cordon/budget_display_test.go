package main

import (
	"reflect"
	"testing"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/audit"
)

func TestBudgetLine(t *testing.T) {
	tests := []struct {
		t    cordon.BudgetTotals
		want string
	}{
		{cordon.BudgetTotals{Requests: 12, Input: 34_200, Output: 5_100, CostUSD: 0.2149},
			"api.anthropic.com: 12 requests, 34k in / 5.1k out, $0.21"},
		{cordon.BudgetTotals{Requests: 1, Unknown: 1}, "api.anthropic.com: 1 request, 0 in / 0 out, 1 with usage unknown"},
		{cordon.BudgetTotals{Requests: 2, Input: 1_500_000, Output: 999, CacheRead: 700, CacheWrite: 3},
			"api.anthropic.com: 2 requests, 1.5M in / 999 out (700 cache read, 3 cache write)"},
	}
	for _, tt := range tests {
		if got := budgetLine("api.anthropic.com", tt.t); got != tt.want {
			t.Errorf("budgetLine(%+v)\n got %q\nwant %q", tt.t, got, tt.want)
		}
	}
}

func TestUsageOf(t *testing.T) {
	http := func(name string, d map[string]string) audit.Event {
		return audit.Event{Kind: audit.KindHTTP, Name: name, Decision: audit.Allow, Detail: d}
	}
	events := []audit.Event{
		http("a.test", map[string]string{"budget_input": "10", "budget_output": "5", "budget_cache_read": "2", "budget_cache_write": "1", "budget_cost_usd": "0.5"}),
		http("a.test", map[string]string{"budget_usage": "unknown"}),
		http("a.test", map[string]string{"budget_usage": "unknown", "budget_input": "4", "budget_output": "0", "budget_cache_read": "0", "budget_cache_write": "0", "budget_cost_usd": "0.1"}),
		http("b.test", map[string]string{"path": "/"}), // not metered
		{Kind: audit.KindDNS, Name: "a.test"},
	}
	want := map[string]cordon.BudgetTotals{"a.test": {Requests: 3, Unknown: 2, Input: 17, Output: 5, CacheRead: 2, CacheWrite: 1, CostUSD: 0.6}}
	got := usageOf(events)
	if g := got["a.test"]; len(got) != 1 || g.CostUSD < 0.5999 || g.CostUSD > 0.6001 {
		t.Fatalf("usageOf = %+v, want %+v", got, want)
	}
	g := got["a.test"]
	g.CostUSD = 0.6
	if !reflect.DeepEqual(g, want["a.test"]) {
		t.Errorf("usageOf = %+v, want %+v", g, want["a.test"])
	}
}

func TestLeft(t *testing.T) {
	if got := left(3, 10, count); got != "3 of 10 (7 left)" {
		t.Errorf("left = %q", got)
	}
	if got := left(12, 10, count); got != "12 of 10 (0 left)" {
		t.Errorf("left over the limit = %q", got)
	}
	if got := left(1.5, 0, dollars); got != "$1.50" {
		t.Errorf("left without a limit = %q", got)
	}
}
