package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The budgets section: spend caps on the model APIs the gateway intercepts, enforced outside the agent
// so that a contained agent cannot burn more than it was given.

// Budget caps the requests, tokens and cost spent on one intercepted host. Zero means no limit.
type Budget struct {
	// Host is an exact host name that the gateway intercepts (a credential or an http rule names it).
	Host string
	// API is how answers report usage: BudgetAnthropic, BudgetOpenAI, or BudgetAuto (by request path).
	API string
	// Per is BudgetPerRun or BudgetPerDay (a UTC day's total across runs of this policy file).
	Per string
	// MaxRequests, MaxInputTokens and MaxOutputTokens cap the counts; input includes cache reads and
	// writes as the API reports them.
	MaxRequests, MaxInputTokens, MaxOutputTokens int64
	// MaxCost caps the cost computed from the reported usage and Prices; nil means no cost limit.
	MaxCost *BudgetCost
	// Hard cuts an answer in flight when the budget is spent mid-answer, instead of finishing it.
	Hard bool
}

// BudgetCost is a cost cap in US dollars and the prices it is computed with, which the user gives
// because cordon cannot know a contract's prices.
type BudgetCost struct {
	USD    float64
	Prices BudgetPrices
}

// BudgetPrices are US dollars per million tokens. A zero cache price charges those tokens at the
// Input price.
type BudgetPrices struct {
	Input, Output, CacheRead, CacheWrite float64
}

// The values of Budget.API and Budget.Per.
const (
	BudgetAuto      = "auto"
	BudgetAnthropic = "anthropic"
	BudgetOpenAI    = "openai"
	BudgetPerRun    = "run"
	BudgetPerDay    = "day"
)

func (d *decoder) budgets(n *yaml.Node, path string) ([]Budget, error) {
	var out []Budget
	first := map[string]int{}
	err := d.list(n, path, func(item *yaml.Node, ip string) error {
		b, err := d.budget(item, ip)
		if err != nil {
			return err
		}
		if line, dup := first[b.Host]; dup {
			return d.errf(valueOf(item, "host"), ip+".host", "a budget for %s is already defined at line %d", b.Host, line)
		}
		first[b.Host] = valueOf(item, "host").Line
		out = append(out, b)
		return nil
	})
	return out, err
}

func (d *decoder) budget(n *yaml.Node, path string) (b Budget, err error) {
	b.API, b.Per = BudgetAuto, BudgetPerRun
	count := func(dst *int64) func(*yaml.Node, string) error {
		return func(v *yaml.Node, p string) (err error) {
			*dst, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}
	}
	seen, err := d.mapping(n, path,
		field{"host", func(v *yaml.Node, p string) (err error) {
			b.Host, err = d.host(v, p, checkExactHost)
			return err
		}},
		field{"api", func(v *yaml.Node, p string) (err error) {
			b.API, err = d.oneOf(v, p, BudgetAuto, BudgetAnthropic, BudgetOpenAI)
			return err
		}},
		field{"per", func(v *yaml.Node, p string) (err error) {
			b.Per, err = d.oneOf(v, p, BudgetPerRun, BudgetPerDay)
			return err
		}},
		field{"maxRequests", count(&b.MaxRequests)},
		field{"maxInputTokens", count(&b.MaxInputTokens)},
		field{"maxOutputTokens", count(&b.MaxOutputTokens)},
		field{"maxCost", func(v *yaml.Node, p string) (err error) {
			b.MaxCost, err = d.budgetCost(v, p)
			return err
		}},
		field{"hard", func(v *yaml.Node, p string) (err error) {
			b.Hard, err = d.boolean(v, p)
			return err
		}},
	)
	if err != nil {
		return b, err
	}
	if err := d.require(n, path, seen, "host"); err != nil {
		return b, err
	}
	if b.MaxRequests == 0 && b.MaxInputTokens == 0 && b.MaxOutputTokens == 0 && b.MaxCost == nil {
		return b, d.errf(n, path, "set at least one of maxRequests, maxInputTokens, maxOutputTokens or maxCost")
	}
	return b, nil
}

func (d *decoder) budgetCost(n *yaml.Node, path string) (*BudgetCost, error) {
	c := &BudgetCost{}
	seen, err := d.mapping(n, path,
		field{"usd", func(v *yaml.Node, p string) (err error) {
			c.USD, err = d.number(v, p, false)
			return err
		}},
		field{"prices", func(v *yaml.Node, p string) error {
			pr := &c.Prices
			price := func(dst *float64) func(*yaml.Node, string) error {
				return func(v *yaml.Node, p string) (err error) {
					*dst, err = d.number(v, p, true)
					return err
				}
			}
			seen, err := d.mapping(v, p,
				field{"input", price(&pr.Input)},
				field{"output", price(&pr.Output)},
				field{"cacheRead", price(&pr.CacheRead)},
				field{"cacheWrite", price(&pr.CacheWrite)},
			)
			if err != nil {
				return err
			}
			// A cache price left out (or 0) charges those tokens at the input price, so that an
			// unpriced cache never makes tokens free.
			return d.require(v, p, seen, "input", "output")
		}},
	)
	if err != nil {
		return nil, err
	}
	return c, d.require(n, path, seen, "usd", "prices")
}

// checkBudgets refuses a budget on a host the gateway would not intercept: it could see neither the
// requests nor their usage, so the budget would silently never apply.
func (d *decoder) checkBudgets(p *Policy, budgets *yaml.Node) error {
	for i, b := range p.Budgets {
		if interceptedHost(p, b.Host) {
			continue
		}
		where := fmt.Sprintf("budgets[%d].host", i)
		return d.errf(valueOf(budgets.Content[i], "host"), where,
			"%s is not intercepted, so its usage cannot be read (name it in a credential's inject.host or in network.http)", b.Host)
	}
	return nil
}

// interceptedHost reports whether the gateway terminates TLS for host: a credential is bound to it or
// an http or git rule restricts it.
func interceptedHost(p *Policy, host string) bool {
	for _, c := range p.Credentials {
		for _, pat := range c.Inject.Hosts {
			if hostMatches(pat, host) {
				return true
			}
		}
	}
	if p.Network != nil {
		for _, r := range p.Network.HTTP {
			if hostMatches(r.Host, host) {
				return true
			}
		}
		for _, r := range p.Network.Git {
			if r.Host == host {
				return true
			}
		}
	}
	return false
}

// oneOf decodes a string that must be one of values.
func (d *decoder) oneOf(n *yaml.Node, path string, values ...string) (string, error) {
	s, err := d.str(n, path)
	if err != nil {
		return "", err
	}
	if !slices.Contains(values, s) {
		return "", d.errf(n, path, "%q is not one of %s", s, strings.Join(values, ", "))
	}
	return s, nil
}

// number decodes a finite number, positive or (when zero is allowed) not negative.
func (d *decoder) number(n *yaml.Node, path string, zero bool) (float64, error) {
	var f float64
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!float" || n.Decode(&f) != nil ||
		math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f == 0 && !zero {
		want := "a positive number"
		if zero {
			want = "a number, 0 or more"
		}
		return 0, d.errf(n, path, "%s is not %s", describe(n), want)
	}
	return f, nil
}

// docBudget is a Budget as Render writes it.
type docBudget struct {
	Host            string         `yaml:"host"`
	API             string         `yaml:"api"`
	Per             string         `yaml:"per"`
	MaxRequests     int64          `yaml:"maxRequests,omitempty"`
	MaxInputTokens  int64          `yaml:"maxInputTokens,omitempty"`
	MaxOutputTokens int64          `yaml:"maxOutputTokens,omitempty"`
	MaxCost         *docBudgetCost `yaml:"maxCost,omitempty"`
	Hard            bool           `yaml:"hard,omitempty"`
}

type docBudgetCost struct {
	USD    float64 `yaml:"usd"`
	Prices struct {
		Input      float64 `yaml:"input"`
		Output     float64 `yaml:"output"`
		CacheRead  float64 `yaml:"cacheRead,omitempty"`
		CacheWrite float64 `yaml:"cacheWrite,omitempty"`
	} `yaml:"prices,flow"`
}

func docBudgets(bs []Budget) []docBudget {
	var out []docBudget
	for _, b := range bs {
		db := docBudget{
			Host: b.Host, API: b.API, Per: b.Per, Hard: b.Hard,
			MaxRequests: b.MaxRequests, MaxInputTokens: b.MaxInputTokens, MaxOutputTokens: b.MaxOutputTokens,
		}
		if c := b.MaxCost; c != nil {
			db.MaxCost = &docBudgetCost{USD: c.USD}
			db.MaxCost.Prices.Input, db.MaxCost.Prices.Output = c.Prices.Input, c.Prices.Output
			db.MaxCost.Prices.CacheRead, db.MaxCost.Prices.CacheWrite = c.Prices.CacheRead, c.Prices.CacheWrite
		}
		out = append(out, db)
	}
	return out
}
