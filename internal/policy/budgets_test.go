package policy

import (
	"reflect"
	"strings"
	"testing"
)

// budgetBase intercepts api.anthropic.com (a credential) and api.openai.com (an http rule).
const budgetBase = `version: 1
network:
  allow: [api.anthropic.com, api.openai.com, example.com]
  http:
    - host: api.openai.com
      allow: [{methods: [POST], paths: [/v1/**]}]
credentials:
  - name: ANTHROPIC_API_KEY
    from: {env: REAL_KEY}
    inject: {host: api.anthropic.com, header: x-api-key}
`

func TestParseBudgets(t *testing.T) {
	src := budgetBase + `budgets:
  - host: api.anthropic.com
    api: anthropic
    per: day
    maxRequests: 500
    maxInputTokens: 5000000
    maxOutputTokens: 400000
    maxCost: {usd: 5.00, prices: {input: 3.00, output: 15.00, cacheRead: 0.30, cacheWrite: 3.75}}
    hard: true
  - host: API.OpenAI.com
    maxRequests: 3
`
	p, err := Parse("p.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := []Budget{
		{
			Host: "api.anthropic.com", API: BudgetAnthropic, Per: BudgetPerDay,
			MaxRequests: 500, MaxInputTokens: 5000000, MaxOutputTokens: 400000,
			MaxCost: &BudgetCost{USD: 5, Prices: BudgetPrices{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}},
			Hard:    true,
		},
		{Host: "api.openai.com", API: BudgetAuto, Per: BudgetPerRun, MaxRequests: 3},
	}
	if !reflect.DeepEqual(p.Budgets, want) {
		t.Errorf("budgets\n got %+v\nwant %+v", p.Budgets, want)
	}

	out, err := p.Render()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("rendered", out, testOpts)
	if err != nil {
		t.Fatalf("rendered policy does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back.Budgets, p.Budgets) {
		t.Errorf("round trip changed the budgets\n got %+v\nwant %+v\n%s", back.Budgets, p.Budgets, out)
	}
}

func TestParseBudgetErrors(t *testing.T) {
	tests := []struct{ name, budgets, want string }{
		{"not intercepted", "  - {host: example.com, maxRequests: 1}\n",
			"12:12: budgets[0].host: example.com is not intercepted, so its usage cannot be read (name it in a credential's inject.host or in network.http)"},
		{"not allowed at all", "  - {host: other.org, maxRequests: 1}\n", "12:12: budgets[0].host: other.org is not intercepted"},
		{"no host", "  - {maxRequests: 1}\n", "12:5: budgets[0]: host is required"},
		{"wildcard", "  - {host: '*.anthropic.com', maxRequests: 1}\n", "budgets[0].host: \"*.anthropic.com\": a wildcard is not allowed here"},
		{"no limit", "  - {host: api.anthropic.com}\n",
			"12:5: budgets[0]: set at least one of maxRequests, maxInputTokens, maxOutputTokens or maxCost"},
		{"bad api", "  - {host: api.anthropic.com, api: gemini, maxRequests: 1}\n",
			`budgets[0].api: "gemini" is not one of auto, anthropic, openai`},
		{"bad per", "  - {host: api.anthropic.com, per: week, maxRequests: 1}\n", `budgets[0].per: "week" is not one of run, day`},
		{"zero requests", "  - {host: api.anthropic.com, maxRequests: 0}\n", "budgets[0].maxRequests: 0 is out of range"},
		{"cost without prices", "  - {host: api.anthropic.com, maxCost: {usd: 1}}\n", "budgets[0].maxCost: prices is required"},
		{"missing price", "  - {host: api.anthropic.com, maxCost: {usd: 1, prices: {input: 1, cacheRead: 0}}}\n",
			"budgets[0].maxCost.prices: output is required"},
		{"negative price", "  - {host: api.anthropic.com, maxCost: {usd: 1, prices: {input: -1, output: 2, cacheRead: 0, cacheWrite: 0}}}\n",
			`budgets[0].maxCost.prices.input: "-1" is not a number, 0 or more`},
		{"zero usd", "  - {host: api.anthropic.com, maxCost: {usd: 0, prices: {input: 1, output: 2, cacheRead: 0, cacheWrite: 0}}}\n",
			`budgets[0].maxCost.usd: "0" is not a positive number`},
		{"duplicate", "  - {host: api.anthropic.com, maxRequests: 1}\n  - {host: api.anthropic.com, maxRequests: 2}\n",
			"13:12: budgets[1].host: a budget for api.anthropic.com is already defined at line 12"},
		{"unknown key", "  - {host: api.anthropic.com, maxTokens: 1}\n", "budgets[0].maxTokens: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(budgetBase+"budgets:\n"+tt.budgets), testOpts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestHostMatches(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"api.x.com", "api.x.com", true},
		{"api.x.com", "x.com", false},
		{"*.x.com", "api.x.com", true},
		{"*.x.com", "a.b.x.com", true},
		{"*.x.com", "x.com", false},
		{"*.x.com", "evilx.com", false},
	}
	for _, tt := range tests {
		if got := hostMatches(tt.pattern, tt.host); got != tt.want {
			t.Errorf("hostMatches(%q, %q) = %v, want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}
