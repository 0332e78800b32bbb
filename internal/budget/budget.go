// Package budget meters and bounds what an agent spends on a model API. cordon's gateway already
// terminates TLS for an intercepted host, so it sees every request and every answer: a Meter reads
// the usage each answer reports (JSON or a server-sent event stream, as it streams past, never
// buffering the answer), a Ledger holds one run's budgets (policy budgets[]), refuses the next
// request once a limit is reached (Admit) and adds each answer's usage (Record). A per:day budget's
// totals live in a DayStore, written durably as each answer completes, so they hold across runs
// and across a cordon killed with SIGKILL.
//
// The package sees only usage figures: nothing of a prompt or an answer's text is kept or returned.
package budget

import (
	"path"
	"strings"
)

// API is the wire format of a model API, which decides how usage is read and how a refusal is worded.
type API string

const (
	// Anthropic is the Messages API (/v1/messages).
	Anthropic API = "anthropic"
	// OpenAI is the chat completions (/v1/chat/completions) and Responses (/v1/responses) APIs.
	OpenAI API = "openai"
)

// APIFor picks the API by request path when the policy says "auto": /v1/messages → Anthropic;
// /v1/chat/completions, /v1/responses → OpenAI; "" if neither. A query string and a path prefix
// (a proxy mounting the API under /openai/...) are allowed.
func APIFor(p string) API {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimSuffix(path.Clean("/"+p), "/")
	switch {
	case strings.HasSuffix(p, "/v1/messages"):
		return Anthropic
	case strings.HasSuffix(p, "/v1/chat/completions"), strings.HasSuffix(p, "/v1/responses"),
		strings.HasSuffix(p, "/chat/completions"), strings.HasSuffix(p, "/responses"):
		return OpenAI
	}
	return ""
}

// Usage is what one answer reported. Input is the input that was neither read from nor written to
// the prompt cache (the API's own split: OpenAI's prompt_tokens include the cached ones, which are
// moved to CacheRead here). Known is false when the usage could not be read ("usage unknown"); the
// figures are then what was read before the answer ended, a lower bound.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
	Known                                bool
}

// Prices are USD per million tokens. A zero cache price charges those tokens at the Input price,
// so an unpriced cache never makes tokens free.
type Prices struct{ Input, Output, CacheRead, CacheWrite float64 }

// Cost is what u costs at p, in USD.
func (p Prices) Cost(u Usage) float64 {
	cr, cw := p.CacheRead, p.CacheWrite
	if cr == 0 {
		cr = p.Input
	}
	if cw == 0 {
		cw = p.Input
	}
	return (float64(u.Input)*p.Input + float64(u.Output)*p.Output +
		float64(u.CacheRead)*cr + float64(u.CacheWrite)*cw) / 1e6
}

// Spec is one policy budgets[] entry.
type Spec struct {
	Source string // "budgets[0]" for messages
	Host   string // as in the policy (exact name)
	API    API    // "" = auto by path
	Per    string // "run" or "day"
	// MaxRequests, MaxInputTokens and MaxOutputTokens are limits; 0 = no limit.
	MaxRequests, MaxInputTokens, MaxOutputTokens int64
	MaxCostUSD                                   float64 // 0 = no limit
	Prices                                       Prices
	Hard                                         bool // cut a request in flight when the budget is spent mid-answer
}

// The values of Spec.Per.
const (
	PerRun = "run"
	PerDay = "day"
)

// Totals are what was spent. Input counts input + cache reads + cache writes as the API reports
// them; CacheRead and CacheWrite say how much of it was cache. Unknown counts the requests whose
// usage could not be read (they are in Requests too).
type Totals struct {
	Requests   int64   `json:"requests"`
	Unknown    int64   `json:"unknown,omitempty"`
	Input      int64   `json:"input"`
	Output     int64   `json:"output"`
	CacheRead  int64   `json:"cacheRead"`
	CacheWrite int64   `json:"cacheWrite"`
	CostUSD    float64 `json:"costUSD"`
}

// add counts one answer's usage, priced at p.
func (t *Totals) add(u Usage, p Prices) {
	t.Requests++
	if !u.Known {
		t.Unknown++
	}
	t.Input += u.Input + u.CacheRead + u.CacheWrite
	t.Output += u.Output
	t.CacheRead += u.CacheRead
	t.CacheWrite += u.CacheWrite
	t.CostUSD += p.Cost(u)
}

// plus is t with the partial usage of an answer still streaming.
func (t Totals) plus(u Usage, p Prices) Totals {
	t.Input += u.Input + u.CacheRead + u.CacheWrite
	t.Output += u.Output
	t.CacheRead += u.CacheRead
	t.CacheWrite += u.CacheWrite
	t.CostUSD += p.Cost(u)
	return t
}
