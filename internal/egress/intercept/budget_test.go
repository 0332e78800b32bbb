package intercept

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/budget"
)

const modelHost = "api.anthropic.com"

// The fake Anthropic API's answers: 25 input, 7 cache read, 3 cache write, 15 output tokens.
const (
	anthropicJSON = `{"id":"msg_1","type":"message","role":"assistant","model":"claude",` +
		`"content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":25,"cache_read_input_tokens":7,"cache_creation_input_tokens":3,"output_tokens":15}}`
	anthropicStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\"," +
		"\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"usage\":{\"input_tokens\":25," +
		"\"cache_read_input_tokens\":7,\"cache_creation_input_tokens\":3,\"output_tokens\":1}}}\n\n"
	anthropicRest = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0," +
		"\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

var wantUsage = budget.Usage{Input: 25, CacheRead: 7, CacheWrite: 3, Output: 15, Known: true}

// fakeModelAPI answers /v1/messages as Anthropic does (a stream when the body asks for one, with a
// pause after message_start when pause is set), /v1/chat/completions as OpenAI does (its body
// seen in bodies), and anything else with a body reporting no usage.
type fakeModelAPI struct {
	pause chan struct{}

	mu     sync.Mutex
	bodies []string
}

func (f *fakeModelAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, string(body))
	f.mu.Unlock()
	switch r.URL.Path {
	case "/v1/messages":
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, anthropicJSON)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, anthropicStart)
		w.(http.Flusher).Flush()
		if f.pause != nil {
			select {
			case <-f.pause:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, anthropicRest)
	case "/v1/chat/completions":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n")
		if strings.Contains(string(body), `"include_usage":true`) {
			io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],"+
				"\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":10}}}\n\n")
		}
		io.WriteString(w, "data: [DONE]\n\n")
	default:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":[]}`)
	}
}

func (f *fakeModelAPI) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies...)
}

// budgetSetup intercepts modelHost with spec as its budget, in front of api.
func budgetSetup(t *testing.T, api *fakeModelAPI, spec budget.Spec, notes *[]string) (*setup, *budget.Ledger) {
	t.Helper()
	spec.Host = modelHost
	ledger, err := budget.NewLedger([]budget.Spec{spec}, nil, "run1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	s := newSetup(t, newUpstream(t, api, false), modelHost, false, func(c *Config) {
		c.Hosts = []string{modelHost}
		c.Budgets = ledger
		c.Notify = func(_, line string) {
			mu.Lock()
			defer mu.Unlock()
			if notes != nil {
				*notes = append(*notes, line)
			}
		}
	})
	return s, ledger
}

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, string) {
	t.Helper()
	res, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return res, string(b)
}

func TestBudgetMetersAnswers(t *testing.T) {
	tests := []struct {
		name, path, body string
		api              budget.API
		want             budget.Usage
	}{
		{"anthropic json", "/v1/messages", `{"model":"claude","messages":[]}`, budget.Anthropic, wantUsage},
		{"anthropic stream", "/v1/messages", `{"model":"claude","stream":true}`, budget.Anthropic, wantUsage},
		{"auto by path", "/v1/messages", `{"model":"claude","stream":true}`, "", wantUsage},
		{"openai stream", "/v1/chat/completions", `{"model":"gpt","stream":true,"messages":[]}`, budget.OpenAI,
			budget.Usage{Input: 30, CacheRead: 10, Output: 9, Known: true}},
		{"no usage", "/v1/models", `{}`, "", budget.Usage{}},
	}
	for _, tt := range tests {
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s h2=%v", tt.name, h2), func(t *testing.T) {
				prices := budget.Prices{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
				s, ledger := budgetSetup(t, &fakeModelAPI{}, budget.Spec{API: tt.api, MaxRequests: 10, Prices: prices}, nil)
				res, body := post(t, s.client(h2), s.url(tt.path), tt.body)
				if res.StatusCode != http.StatusOK || body == "" {
					t.Fatalf("status %d, body %q", res.StatusCode, body)
				}
				ev := s.rec.wait(t, func(e audit.Event) bool { return e.Detail["path"] == tt.path })
				got := ledger.Totals()[modelHost]
				want := budget.Totals{Requests: 1, Input: tt.want.Input + tt.want.CacheRead + tt.want.CacheWrite,
					Output: tt.want.Output, CacheRead: tt.want.CacheRead, CacheWrite: tt.want.CacheWrite, CostUSD: prices.Cost(tt.want)}
				if !tt.want.Known {
					want.Unknown = 1
					if ev.Detail[detailBudgetUsage] != "unknown" {
						t.Errorf("details %v: want %s=unknown", ev.Detail, detailBudgetUsage)
					}
				} else if ev.Detail[detailBudgetOutput] != fmt.Sprint(tt.want.Output) || ev.Detail[detailBudgetInput] != fmt.Sprint(tt.want.Input) ||
					ev.Detail[detailBudgetCacheRead] != fmt.Sprint(tt.want.CacheRead) || ev.Detail[detailBudgetCost] == "" {
					t.Errorf("details %v: want the usage %+v", ev.Detail, tt.want)
				}
				if got != want {
					t.Errorf("totals %+v, want %+v", got, want)
				}
				for k, v := range ev.Detail {
					if strings.Contains(v, "hello") {
						t.Errorf("detail %s=%q holds answer text", k, v)
					}
				}
			})
		}
	}
}

func TestBudgetRefusesWhenSpent(t *testing.T) {
	var notes []string
	api := &fakeModelAPI{}
	s, ledger := budgetSetup(t, api, budget.Spec{Source: "budgets[0]", API: budget.Anthropic, MaxRequests: 2}, &notes)
	c := s.client(false)
	for range 2 {
		if res, body := post(t, c, s.url("/v1/messages"), `{}`); res.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", res.StatusCode, body)
		}
	}
	res, body := post(t, c, s.url("/v1/messages"), `{}`)
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429: %s", res.StatusCode, body)
	}
	if got := res.Header.Get("X-Should-Retry"); got != "false" {
		t.Errorf("X-Should-Retry = %q, want false (the client would retry)", got)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" {
		t.Fatalf("body %s is not an Anthropic error (%v)", body, err)
	}
	wantMsg := "cordon: budget maxRequests 2 for api.anthropic.com spent (run run1); raise budgets[0].maxRequests to continue"
	if e.Error.Message != wantMsg {
		t.Errorf("message %q, want %q", e.Error.Message, wantMsg)
	}
	if n := len(api.seen()); n != 2 {
		t.Errorf("upstream saw %d requests, want 2", n)
	}
	ev := s.rec.wait(t, func(e audit.Event) bool { return e.Decision == audit.Deny })
	if ev.Rule != "budgets[0]" || ev.Reason != wantMsg || ev.Detail["status"] != "429" {
		t.Errorf("audit event %+v, want a deny by budgets[0]", ev)
	}
	if got := ledger.Totals()[modelHost].Requests; got != 2 {
		t.Errorf("%d requests counted, want 2 (a refusal is not one)", got)
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "budget maxRequests 2 for api.anthropic.com spent") {
		t.Errorf("notices %q, want the refusal once", notes)
	}
}

func TestBudgetOpenAIErrorFormat(t *testing.T) {
	s, _ := budgetSetup(t, &fakeModelAPI{}, budget.Spec{API: budget.OpenAI, MaxRequests: 1}, nil)
	c := s.client(false)
	post(t, c, s.url("/v1/chat/completions"), `{"stream":true,"messages":[]}`)
	res, body := post(t, c, s.url("/v1/chat/completions"), `{"stream":true,"messages":[]}`)
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if res.StatusCode != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &e) != nil ||
		e.Error.Type != "insufficient_quota" || e.Error.Code != "cordon_budget" || !strings.Contains(e.Error.Message, "maxRequests") {
		t.Errorf("status %d, body %s: want an OpenAI insufficient_quota error", res.StatusCode, body)
	}
}

func TestBudgetAsksOpenAIStreamForUsage(t *testing.T) {
	api := &fakeModelAPI{}
	s, _ := budgetSetup(t, api, budget.Spec{MaxRequests: 5}, nil)
	res, _ := post(t, s.client(false), s.url("/v1/chat/completions"), `{"model":"gpt","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	seen := api.seen()
	var req struct {
		Model         string
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if len(seen) != 1 || json.Unmarshal([]byte(seen[0]), &req) != nil || !req.StreamOptions.IncludeUsage || req.Model != "gpt" {
		t.Errorf("upstream saw %q: want the request with stream_options.include_usage", seen)
	}
}

func TestBudgetHardCutsAnswer(t *testing.T) {
	for _, hard := range []bool{false, true} {
		t.Run(fmt.Sprintf("hard=%v", hard), func(t *testing.T) {
			api := &fakeModelAPI{pause: make(chan struct{})}
			s, ledger := budgetSetup(t, api, budget.Spec{API: budget.Anthropic, MaxInputTokens: 10, Hard: hard}, nil)
			res, err := s.client(false).Post(s.url("/v1/messages"), "application/json", strings.NewReader(`{"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			done := make(chan error, 1)
			var got []byte
			go func() {
				var err error
				got, err = io.ReadAll(res.Body)
				done <- err
			}()
			if !hard {
				close(api.pause) // message_start's 35 input tokens are past the limit: a soft budget finishes
			}
			select {
			case err := <-done:
				switch {
				case hard && err == nil:
					t.Fatalf("the answer was not cut: %q", got)
				case !hard && (err != nil || !strings.Contains(string(got), "message_stop")):
					t.Fatalf("the answer was cut (%v): %q", err, got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the answer was neither cut nor finished")
			}
			if hard {
				close(api.pause)
				if strings.Contains(string(got), "message_delta") {
					t.Errorf("the cut answer went on: %q", got)
				}
				ev := s.rec.wait(t, func(e audit.Event) bool { return e.Detail[detailBudgetCut] != "" })
				if !strings.Contains(ev.Detail[detailBudgetCut], "maxInputTokens 10") {
					t.Errorf("cut reason %q", ev.Detail[detailBudgetCut])
				}
			}
			s.rec.wait(t, func(e audit.Event) bool { return e.Detail["path"] == "/v1/messages" })
			if n := ledger.Totals()[modelHost]; n.Requests != 1 || n.Input != 35 {
				t.Errorf("totals %+v, want the one request and its 35 input tokens", n)
			}
		})
	}
}
