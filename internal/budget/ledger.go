package budget

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// Ledger is one run's budgets, one per host.
type Ledger struct {
	hosts map[string]*Budget
}

// NewLedger checks specs and makes the run's budgets. day is where per:day totals persist (nil: a
// per:day budget is an error); runID names the run in refusals.
func NewLedger(specs []Spec, day *DayStore, runID string) (*Ledger, error) {
	l := &Ledger{hosts: make(map[string]*Budget, len(specs))}
	for i, s := range specs {
		if s.Source == "" {
			s.Source = "budgets[" + strconv.Itoa(i) + "]"
		}
		if err := check(s, day); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Source, err)
		}
		if s.Per == "" {
			s.Per = PerRun
		}
		h := normHost(s.Host)
		if prev, ok := l.hosts[h]; ok {
			return nil, fmt.Errorf("%s: host %s already has a budget (%s)", s.Source, s.Host, prev.spec.Source)
		}
		b := &Budget{spec: s, host: h, run: runID}
		if s.Per == PerDay {
			b.day = day
		}
		l.hosts[h] = b
	}
	return l, nil
}

// check is the policy's rules for one budget.
func check(s Spec, day *DayStore) error {
	if normHost(s.Host) == "" {
		return errors.New("host is empty")
	}
	switch s.API {
	case "", Anthropic, OpenAI:
	default:
		return fmt.Errorf("api %q is not anthropic, openai or auto", s.API)
	}
	switch s.Per {
	case "", PerRun:
	case PerDay:
		if day == nil {
			return errors.New("per: day needs cordon's state directory")
		}
	default:
		return fmt.Errorf("per %q is not run or day", s.Per)
	}
	if s.MaxRequests < 0 || s.MaxInputTokens < 0 || s.MaxOutputTokens < 0 || s.MaxCostUSD < 0 {
		return errors.New("a limit is negative")
	}
	p := s.Prices
	if p.Input < 0 || p.Output < 0 || p.CacheRead < 0 || p.CacheWrite < 0 {
		return errors.New("a price is negative")
	}
	if s.MaxCostUSD > 0 && p.Input == 0 && p.Output == 0 {
		return errors.New("maxCost needs prices (input and output, USD per million tokens)")
	}
	return nil
}

// normHost is the form hosts are compared in: lower case, no trailing dot, no port.
func normHost(h string) string {
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// For is the budget naming host, or nil.
func (l *Ledger) For(host string) *Budget {
	if l == nil {
		return nil
	}
	return l.hosts[normHost(host)]
}

// Totals are this run's totals per host (a per:day budget's too: what this run added to the day).
func (l *Ledger) Totals() map[string]Totals {
	out := make(map[string]Totals, len(l.hosts))
	for h, b := range l.hosts {
		out[h] = b.Totals()
	}
	return out
}

// Budget is one host's budget. It is safe for concurrent use. Every request Admit lets through
// must be followed by exactly one Record, with Known false when no usable answer came.
type Budget struct {
	spec Spec
	host string
	run  string
	day  *DayStore // per:day only

	mu       sync.Mutex
	totals   Totals // this run's
	inflight int64  // admitted, not yet recorded
	// unsaved is why a per:day total could not be written; the budget then refuses (Admit) for
	// the rest of the run, since the day's file no longer holds what was spent.
	unsaved error
}

// API is the budget's API, "" for auto (by path: APIFor).
func (b *Budget) API() API { return b.spec.API }

// Spec is the budget's policy entry.
func (b *Budget) Spec() Spec { return b.spec }

// Totals are what this run spent on the host.
func (b *Budget) Totals() Totals {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.totals
}

// Admit lets one more request through, or refuses it with a *SpentError when a limit is reached.
// Requests in flight count against maxRequests, so concurrent requests cannot overshoot it; the
// token and cost limits see answers as they are recorded. A per:day budget reads the day's totals
// (all runs of the policy file); an error reading them is returned as is, and refuses too.
func (b *Budget) Admit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	spent, day, err := b.spentLocked()
	if err != nil {
		return err
	}
	spent.Requests += b.inflight
	if err := b.over(spent, day); err != nil {
		return err
	}
	b.inflight++
	return nil
}

// Check says whether the budget is spent once partial, the usage so far of an answer still
// streaming, is added: a *SpentError for a hard budget to cut the answer, else nil. Only token and
// cost limits apply (the request itself was admitted). A soft budget always returns nil.
func (b *Budget) Check(partial Usage) error {
	if !b.spec.Hard {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	spent, day, err := b.spentLocked()
	if err != nil {
		return err
	}
	t := spent.plus(partial, b.spec.Prices)
	return b.overTokens(t, day, false)
}

// Record adds one answer's usage. A per:day budget writes the day's totals durably first; when
// that fails the run's totals still count the answer and the error is returned.
func (b *Budget) Record(u Usage) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight > 0 {
		b.inflight--
	}
	b.totals.add(u, b.spec.Prices)
	if b.day != nil {
		if err := b.day.add(b.host, u, b.spec.Prices); err != nil {
			// Fail closed: usage the day's file did not take would be invisible to the next Admit,
			// which reads the file, so this budget refuses from now on.
			b.unsaved = fmt.Errorf("budget %s: the day's totals could not be saved: %w", b.spec.Source, err)
			return b.unsaved
		}
	}
	return nil
}

// spentLocked is what counts against the limits: the run's totals, or the day's for per:day (then
// day is the UTC date).
func (b *Budget) spentLocked() (t Totals, day string, err error) {
	if b.day == nil {
		return b.totals, "", nil
	}
	if b.unsaved != nil {
		return Totals{}, "", b.unsaved
	}
	all, day, err := b.day.today()
	if err != nil {
		return Totals{}, "", fmt.Errorf("budget %s: %w", b.spec.Source, err)
	}
	return all[b.host], day, nil
}

// over is the first limit t reaches, as a *SpentError, or nil.
func (b *Budget) over(t Totals, day string) error {
	s := b.spec
	if s.MaxRequests > 0 && t.Requests >= s.MaxRequests {
		return b.spent("maxRequests", float64(s.MaxRequests), float64(t.Requests), day)
	}
	return b.overTokens(t, day, true)
}

// overTokens checks the token and cost limits. Admitting refuses at the limit (another answer
// would pass it); cutting an answer waits until it is passed.
func (b *Budget) overTokens(t Totals, day string, admit bool) error {
	s := b.spec
	reached := func(spent, max float64) bool {
		if admit {
			return spent >= max
		}
		return spent > max
	}
	switch {
	case s.MaxInputTokens > 0 && reached(float64(t.Input), float64(s.MaxInputTokens)):
		return b.spent("maxInputTokens", float64(s.MaxInputTokens), float64(t.Input), day)
	case s.MaxOutputTokens > 0 && reached(float64(t.Output), float64(s.MaxOutputTokens)):
		return b.spent("maxOutputTokens", float64(s.MaxOutputTokens), float64(t.Output), day)
	case s.MaxCostUSD > 0 && reached(t.CostUSD, s.MaxCostUSD):
		return b.spent("maxCost", s.MaxCostUSD, t.CostUSD, day)
	}
	return nil
}

func (b *Budget) spent(limit string, max, spent float64, day string) *SpentError {
	return &SpentError{Source: b.spec.Source, Limit: limit, Host: b.spec.Host, Run: b.run, Day: day, Max: max, Spent: spent}
}

// SpentError is a refusal: the budget Source's Limit ("maxOutputTokens", "maxCost", ...) for Host
// is spent. Day is the UTC date of a per:day budget, "" for per:run.
type SpentError struct {
	Source, Limit, Host, Run string
	Day                      string
	Max, Spent               float64
}

// Error is the line the agent's client shows and cordon prints: which limit, how to raise it.
func (e *SpentError) Error() string {
	limit, max := e.Limit, strconv.FormatFloat(e.Max, 'f', 0, 64)
	if e.Limit == "maxCost" {
		limit, max = "maxCost.usd", usd(e.Max)+" USD"
	}
	when := "run " + e.Run
	if e.Day != "" {
		when = "day " + e.Day + " UTC, run " + e.Run
	}
	return fmt.Sprintf("cordon: budget %s %s for %s spent (%s); raise %s.%s to continue",
		e.Limit, max, e.Host, when, e.Source, limit)
}

// usd formats an amount with cents, or with as many digits as a finer limit needs.
func usd(x float64) string {
	s := strconv.FormatFloat(x, 'f', 2, 64)
	if v, err := strconv.ParseFloat(s, 64); err == nil && v == x {
		return s
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}
