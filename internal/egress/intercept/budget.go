package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/budget"
)

// Spend control: a host with a budget (Config.Budgets) has each request admitted against it before
// it goes upstream, and the usage its answer reports read as the answer streams to the sandbox.
// Only usage figures are kept: nothing of a prompt or an answer's text.

// maxUsageBody bounds the OpenAI request body read to ask for a stream's usage; a larger one goes
// upstream untouched (its stream may then report no usage, counted as "usage unknown").
const maxUsageBody = 8 << 20

// The audit details of a metered request.
const (
	detailBudgetInput      = "budget_input"
	detailBudgetOutput     = "budget_output"
	detailBudgetCacheRead  = "budget_cache_read"
	detailBudgetCacheWrite = "budget_cache_write"
	detailBudgetCost       = "budget_cost_usd"
	detailBudgetUsage      = "budget_usage"
	detailBudgetError      = "budget_error"
	detailBudgetCut        = "budget_cut"
)

// spend is one admitted request's metering: the answer's bytes go through the meter, and the
// usage is recorded against the budget exactly once, when the answer ended, was cut or never came.
type spend struct {
	b    *budget.Budget
	api  budget.API
	hard bool // the budget cuts answers (Spec.Hard)

	mu       sync.Mutex
	meter    *budget.Meter // nil until an answer's body is metered
	recorded bool
	usage    budget.Usage
	err      error  // recording failed (a per:day total not written)
	cut      string // why a hard budget cut the answer
}

// admit asks the host's budget to let r through, and returns the request's metering and the API
// its answer is read as. It returns a nil spend when the host has no budget; a *budget.SpentError
// (or the error reading a day's totals) refuses the request.
func (i *Interceptor) admit(r *http.Request, name string) (*spend, budget.API, error) {
	b := i.budgets.For(name)
	if b == nil {
		return nil, "", nil
	}
	api := b.API()
	if api == "" {
		api = budget.APIFor(r.URL.Path)
	}
	if err := b.Admit(); err != nil {
		return nil, api, err
	}
	// The meter reads the answer as the API sent it: ask for no content encoding.
	r.Header.Set("Accept-Encoding", "identity")
	return &spend{b: b, api: api, hard: b.Spec().Hard}, api, nil
}

// askForUsage adds stream_options.include_usage to an OpenAI streaming request that lacks it
// (budget.IncludeUsage), so its stream ends with a usage chunk. A body that is encoded, larger than
// maxUsageBody or not such a request goes upstream as it came.
func askForUsage(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody || r.Method != http.MethodPost {
		return nil
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxUsageBody+1))
	if err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	if len(b) > maxUsageBody {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		return nil
	}
	_ = r.Body.Close()
	if out, changed := budget.IncludeUsage(b); changed {
		b = out
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	r.Header.Del("Transfer-Encoding")
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

// meterAnswer tees res's body through a meter of the answer's usage. A protocol switch is not
// metered (its usage is unknown).
func (s *spend) meterAnswer(res *http.Response) {
	if res.StatusCode == http.StatusSwitchingProtocols || res.Body == nil || res.Body == http.NoBody {
		return
	}
	s.mu.Lock()
	s.meter = budget.NewMeter(s.api, res.Header.Get("Content-Type"))
	s.mu.Unlock()
	res.Body = &meteredBody{ReadCloser: res.Body, s: s}
}

// finish records the usage read (unknown if no answer was metered), once.
func (s *spend) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recorded {
		return
	}
	s.recorded = true
	if s.meter != nil {
		s.usage = s.meter.Usage()
	}
	s.err = s.b.Record(s.usage)
}

// details are the request's audit details: the usage figures and their cost, and whether the
// usage is unknown.
func (s *spend) details() map[string]string {
	s.finish()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := map[string]string{}
	if s.err != nil {
		d[detailBudgetError] = s.err.Error()
	}
	if s.cut != "" {
		d[detailBudgetCut] = s.cut
	}
	u := s.usage
	if !u.Known {
		d[detailBudgetUsage] = "unknown"
		if u == (budget.Usage{}) {
			return d
		}
		// What was read before the answer ended (a lower bound), as the budget counted it.
	}
	d[detailBudgetInput] = strconv.FormatInt(u.Input, 10)
	d[detailBudgetOutput] = strconv.FormatInt(u.Output, 10)
	d[detailBudgetCacheRead] = strconv.FormatInt(u.CacheRead, 10)
	d[detailBudgetCacheWrite] = strconv.FormatInt(u.CacheWrite, 10)
	d[detailBudgetCost] = strconv.FormatFloat(s.b.Spec().Prices.Cost(u), 'f', 6, 64)
	return d
}

// errBudgetCut ends an answer a hard budget cut.
var errBudgetCut = errors.New("answer cut: budget spent")

// meteredBody is an answer's body as the upstream sent it, copied to the meter as it is read. The
// usage is recorded when it ends or is closed (the client went away: what was read counts). A hard
// budget spent by the usage so far ends it with an error, which cuts the answer.
type meteredBody struct {
	io.ReadCloser
	s   *spend
	cut error
}

func (b *meteredBody) Read(p []byte) (int, error) {
	if b.cut != nil {
		return 0, b.cut
	}
	n, err := b.ReadCloser.Read(p)
	s := b.s
	s.mu.Lock()
	s.meter.Write(p[:n])
	var spent error
	if n > 0 && s.hard {
		spent = s.b.Check(s.meter.Usage())
	}
	s.mu.Unlock()
	if spent != nil {
		b.cut = fmt.Errorf("%w: %w", errBudgetCut, spent)
		s.mu.Lock()
		s.cut = spent.Error()
		s.mu.Unlock()
		s.finish()
		return n, b.cut
	}
	if err == io.EOF {
		s.finish()
	}
	return n, err
}

func (b *meteredBody) Close() error {
	err := b.ReadCloser.Close()
	b.s.finish()
	return err
}

// refuseBudget answers a request the budget refused: 429 in the API's own error format, which the
// agent's client shows, with the header its client obeys not to retry.
func refuseBudget(w http.ResponseWriter, api budget.API, msg string) {
	ct, body := budget.ErrorBody(api, msg)
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set(budget.RetryHeader, "false")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
}

// budgetRefusal is the audit rule of a request admit refused with err: the budget's policy entry,
// or the gateway's when its day totals could not be read.
func budgetRefusal(err error) string {
	var se *budget.SpentError
	if errors.As(err, &se) {
		return se.Source
	}
	return gatewayRule
}

// recordBudget adds the usage details of a metered request to its audit event.
func recordBudget(ev *audit.Event, s *spend) {
	for k, v := range s.details() {
		ev.Detail[k] = v
	}
}
