package cordon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// BudgetTotals are what a run (or a day, for per:day budgets) spent on one host with a budget
// (policy budgets): requests, tokens as the API reported them, and the cost at the policy's prices.
// Unknown counts the requests whose usage could not be read; Input includes cache reads and writes.
type BudgetTotals = budget.Totals

// budgetFile is where a finished run keeps its budget totals, in its directory, so that listing
// runs need not read their audit logs.
const budgetFile = "budget.json"

// budgetDayDir is the directory of the state store that holds per:day totals, one file per policy
// file and UTC day.
const budgetDayDir = "budgets"

// budgetSpecs turns the policy's budgets into the gateway's.
func budgetSpecs(pol *policy.Policy) (specs []budget.Spec, perDay bool) {
	for i, b := range pol.Budgets {
		s := budget.Spec{
			Source: fmt.Sprintf("budgets[%d]", i), Host: b.Host, Per: b.Per,
			MaxRequests: b.MaxRequests, MaxInputTokens: b.MaxInputTokens, MaxOutputTokens: b.MaxOutputTokens,
			Hard: b.Hard,
		}
		if b.API != policy.BudgetAuto {
			s.API = budget.API(b.API)
		}
		if c := b.MaxCost; c != nil {
			s.MaxCostUSD = c.USD
			s.Prices = budget.Prices(c.Prices)
		}
		perDay = perDay || b.Per == policy.BudgetPerDay
		specs = append(specs, s)
	}
	return specs, perDay
}

// budgetLedger makes a run's budgets; nil when the policy has none. per:day totals are kept in the
// state store root, per policy file.
func budgetLedger(pol *policy.Policy, root, runID string) (*budget.Ledger, error) {
	specs, perDay := budgetSpecs(pol)
	if len(specs) == 0 {
		return nil, nil
	}
	var day *budget.DayStore
	if perDay {
		var err error
		if day, err = budget.OpenDayStore(filepath.Join(root, budgetDayDir), pol.Source); err != nil {
			return nil, err
		}
	}
	l, err := budget.NewLedger(specs, day, runID)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", pol.Source, err)
	}
	return l, nil
}

// writeBudgets keeps a run's totals in its directory.
func writeBudgets(dir string, totals map[string]BudgetTotals) error {
	data, err := json.Marshal(totals)
	if err != nil {
		return fmt.Errorf("budget totals: %w", err)
	}
	return atomicfile.Write(filepath.Join(dir, budgetFile), data, 0o600)
}

// Budgets are what the run spent per host with a budget; nil when its policy had none (or the run
// has not ended).
func (f *FinishedRun) Budgets() (map[string]BudgetTotals, error) {
	data, err := os.ReadFile(filepath.Join(f.r.Dir, budgetFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("budget totals: %w", err)
	}
	var t map[string]BudgetTotals
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("budget totals of run %s: %w", f.r.Meta.ID, err)
	}
	return t, nil
}

// BudgetDay is a per:day budget and what today (UTC) has spent of it across runs of its policy file.
type BudgetDay struct {
	Source string // "budgets[0]"
	Host   string
	Spent  BudgetTotals
	// The limits; 0 means none.
	MaxRequests, MaxInputTokens, MaxOutputTokens int64
	MaxCostUSD                                   float64
}

// BudgetToday reads today's totals of pol's per:day budgets from the store.
func (s Store) BudgetToday(pol *Policy) ([]BudgetDay, error) {
	specs, perDay := budgetSpecs(pol)
	if !perDay {
		return nil, nil
	}
	day, err := budget.OpenDayStore(filepath.Join(s.store().Root, budgetDayDir), pol.Source)
	if err != nil {
		return nil, err
	}
	today, err := day.Today()
	if err != nil {
		return nil, err
	}
	var out []BudgetDay
	for _, sp := range specs {
		if sp.Per != budget.PerDay {
			continue
		}
		out = append(out, BudgetDay{
			Source: sp.Source, Host: sp.Host, Spent: today[sp.Host],
			MaxRequests: sp.MaxRequests, MaxInputTokens: sp.MaxInputTokens, MaxOutputTokens: sp.MaxOutputTokens,
			MaxCostUSD: sp.MaxCostUSD,
		})
	}
	return out, nil
}
