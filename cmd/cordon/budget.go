package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/audit"
)

// budgetUsage is cordon budget's synopsis.
const budgetUsage = "budget [--policy FILE]"

// cmdBudget prints what today (UTC) has spent of the policy's per:day budgets, across all runs of
// that policy file, and what is left of each limit. The policy is the one cordon run would use here
// unless --policy names another.
func (a *app) cmdBudget(args []string) int {
	fl := a.flags("budget", budgetUsage)
	policyFlag := fl.String("policy", "", "policy `file` (default: the one cordon run would use)")
	if code, ok := a.parse(fl, budgetUsage, args); !ok {
		return code
	}
	if fl.NArg() > 0 {
		a.errorf("budget: unexpected arguments (usage: cordon %s)", budgetUsage)
		return exitUsage
	}
	project, ok := a.project("budget")
	if !ok {
		return exitCordon
	}
	pol, err := a.loadPolicy(*policyFlag, project)
	if err != nil {
		a.errorf("budget: %v", err)
		return exitCordon
	}
	days, err := a.store().BudgetToday(pol)
	if err != nil {
		a.errorf("budget: %v", err)
		return exitCordon
	}
	if len(days) == 0 {
		fmt.Fprintf(a.stdout, "%s has no per:day budgets\n", pol.Source)
		return 0
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tHOST\tREQUESTS\tINPUT\tOUTPUT\tCOST\tUNKNOWN")
	for _, d := range days {
		s := d.Spent
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", d.Source, d.Host,
			left(float64(s.Requests), float64(d.MaxRequests), count),
			left(float64(s.Input), float64(d.MaxInputTokens), count),
			left(float64(s.Output), float64(d.MaxOutputTokens), count),
			left(s.CostUSD, d.MaxCostUSD, dollars), s.Unknown)
	}
	tw.Flush()
	return 0
}

// left is "spent of max (rest left)", or the spent figure alone when there is no limit.
func left(spent, max float64, format func(float64) string) string {
	if max == 0 {
		return format(spent)
	}
	return fmt.Sprintf("%s of %s (%s left)", format(spent), format(max), format(max-min(spent, max)))
}

func count(f float64) string { return strconv.FormatInt(int64(f), 10) }

func dollars(f float64) string { return fmt.Sprintf("$%.2f", f) }

// tokens abbreviates a token count for a summary line: 950, 9.5k, 34k, 1.2M.
func tokens(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 10_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	case n < 1_000_000:
		return strconv.FormatInt((n+500)/1000, 10) + "k"
	}
	return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
}

// budgetLine is one host's usage: "api.anthropic.com: 12 requests, 34k in / 5k out, $0.21".
func budgetLine(host string, t cordon.BudgetTotals) string {
	requests := "requests"
	if t.Requests == 1 {
		requests = "request"
	}
	line := fmt.Sprintf("%s: %d %s, %s in / %s out", host, t.Requests, requests, tokens(t.Input), tokens(t.Output))
	if t.CacheRead+t.CacheWrite > 0 {
		line += fmt.Sprintf(" (%s cache read, %s cache write)", tokens(t.CacheRead), tokens(t.CacheWrite))
	}
	if t.CostUSD > 0 {
		line += ", " + dollars(t.CostUSD)
	}
	if t.Unknown > 0 {
		line += fmt.Sprintf(", %d with usage unknown", t.Unknown)
	}
	return line
}

// budgetLines are the lines of totals, one per host in name order.
func budgetLines(totals map[string]cordon.BudgetTotals) []string {
	var out []string
	for _, h := range slices.Sorted(maps.Keys(totals)) {
		out = append(out, budgetLine(h, totals[h]))
	}
	return out
}

// usageOf adds up the metered requests of an audit log per host: the events whose details carry
// a budget's usage (or say it is unknown).
func usageOf(events []audit.Event) map[string]cordon.BudgetTotals {
	out := map[string]cordon.BudgetTotals{}
	num := func(e audit.Event, k string) int64 {
		n, _ := strconv.ParseInt(e.Detail[k], 10, 64)
		return n
	}
	for _, e := range events {
		if e.Kind != audit.KindHTTP {
			continue
		}
		_, figures := e.Detail["budget_input"]
		known := e.Detail["budget_usage"] != "unknown"
		if known && !figures {
			continue
		}
		t := out[e.Name]
		t.Requests++
		if !known {
			t.Unknown++
		}
		cr, cw := num(e, "budget_cache_read"), num(e, "budget_cache_write")
		t.Input += num(e, "budget_input") + cr + cw
		t.Output += num(e, "budget_output")
		t.CacheRead += cr
		t.CacheWrite += cw
		cost, _ := strconv.ParseFloat(e.Detail["budget_cost_usd"], 64)
		t.CostUSD += cost
		out[e.Name] = t
	}
	return out
}
