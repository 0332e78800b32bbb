package cordon

import (
	"reflect"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

func TestBudgetSpecs(t *testing.T) {
	pol := &policy.Policy{Budgets: []policy.Budget{
		{Host: "api.anthropic.com", API: policy.BudgetAnthropic, Per: policy.BudgetPerRun, MaxRequests: 5, Hard: true,
			MaxCost: &policy.BudgetCost{USD: 2, Prices: policy.BudgetPrices{Input: 3, Output: 15, CacheRead: 0.3}}},
		{Host: "api.openai.com", API: policy.BudgetAuto, Per: policy.BudgetPerDay, MaxOutputTokens: 100},
	}}
	specs, perDay := budgetSpecs(pol)
	want := []budget.Spec{
		{Source: "budgets[0]", Host: "api.anthropic.com", API: budget.Anthropic, Per: "run", MaxRequests: 5, Hard: true,
			MaxCostUSD: 2, Prices: budget.Prices{Input: 3, Output: 15, CacheRead: 0.3}},
		{Source: "budgets[1]", Host: "api.openai.com", Per: "day", MaxOutputTokens: 100},
	}
	if !perDay || !reflect.DeepEqual(specs, want) {
		t.Errorf("budgetSpecs = %+v, %v\nwant %+v, true", specs, perDay, want)
	}
}

func TestBudgetTotalsKeptWithRun(t *testing.T) {
	dir := t.TempDir()
	f := &FinishedRun{r: &runstate.Run{Dir: dir}}
	if got, err := f.Budgets(); got != nil || err != nil {
		t.Fatalf("a run without budgets: %v, %v", got, err)
	}
	want := map[string]BudgetTotals{"api.anthropic.com": {Requests: 3, Unknown: 1, Input: 40, Output: 9, CostUSD: 0.25}}
	if err := writeBudgets(dir, want); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Budgets(); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Budgets = %v, %v; want %v", got, err, want)
	}
}

func TestBudgetToday(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	pol := &policy.Policy{Source: "/etc/cordon/p.yaml", Budgets: []policy.Budget{
		{Host: "api.anthropic.com", API: policy.BudgetAuto, Per: policy.BudgetPerRun, MaxRequests: 1},
		{Host: "api.openai.com", API: policy.BudgetAuto, Per: policy.BudgetPerDay, MaxRequests: 4},
	}}
	l, err := budgetLedger(pol, s.Dir, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.For("api.openai.com").Admit(); err != nil {
		t.Fatal(err)
	}
	if err := l.For("api.openai.com").Record(budget.Usage{Input: 7, Output: 2, Known: true}); err != nil {
		t.Fatal(err)
	}
	days, err := s.BudgetToday(pol)
	if err != nil {
		t.Fatal(err)
	}
	want := []BudgetDay{{Source: "budgets[1]", Host: "api.openai.com", MaxRequests: 4, Spent: BudgetTotals{Requests: 1, Input: 7, Output: 2}}}
	if !reflect.DeepEqual(days, want) {
		t.Errorf("BudgetToday = %+v\nwant %+v", days, want)
	}
}
