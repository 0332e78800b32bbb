//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/fakeapi"
)

// The budget tests run real clients inside the sandbox against local fakes of the Anthropic and OpenAI
// APIs (internal/fakeapi) on HTTPS with the tests' own CA, intercepted because a credential names them,
// and check what cordon metered against what the fakes reported.

// apiClient is a python client for the fake APIs. Usage: api.py HOST:PORT KIND MODE N, KIND anthropic,
// chat or responses, MODE json or stream. It prints one line per request: "OK <status>" or "REFUSED
// <status> <error type> <top-level type> <message>", parsing a refusal's body as the API's error JSON;
// an Anthropic stream that ended without message_stop is "TRUNCATED", one that broke "CUT <error>".
const apiClient = `import json, os, sys, urllib.request, urllib.error
addr, kind, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
marker = os.environ.get("MARKER", "")
path = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}[kind]
if kind == "anthropic":
    headers = {"x-api-key": os.environ["API_KEY"], "anthropic-version": "2023-06-01"}
    body = {"model": "claude-fake", "max_tokens": 64, "messages": [{"role": "user", "content": "prompt " + marker}]}
elif kind == "chat":
    headers = {"Authorization": "Bearer " + os.environ["OPENAI_KEY"]}
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "prompt " + marker}]}
else:
    headers = {"Authorization": "Bearer " + os.environ["OPENAI_KEY"]}
    body = {"model": "gpt-fake", "input": "prompt " + marker}
if mode == "stream":
    body["stream"] = True
headers["content-type"] = "application/json"
for i in range(n):
    req = urllib.request.Request("https://" + addr + path, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            data = r.read()
            if mode == "stream" and kind == "anthropic" and b"event: message_stop" not in data:
                print("TRUNCATED", r.status, flush=True)
            else:
                print("OK", r.status, flush=True)
    except urllib.error.HTTPError as e:
        j = json.loads(e.read().decode())
        print("REFUSED", e.code, j["error"]["type"], j.get("type", "-"), j["error"]["message"], flush=True)
    except Exception as e:
        print("CUT", type(e).__name__, flush=True)
`

// fakeAPIs is the two fakes behind one HTTPS server: anthropic.test and openai.test.
type fakeAPIs struct {
	port           int
	caFile         string
	anthropic, oai *fakeapi.Fake
	anthropicUsage fakeapi.Usage
	openaiUsage    fakeapi.Usage
	marker         string // in every prompt and answer: must never reach the audit log
}

func newFakeAPIs(t *testing.T, h *harness) *fakeAPIs {
	t.Helper()
	f := &fakeAPIs{
		marker:         "MARK" + h.canary + "TEXT",
		anthropicUsage: fakeapi.Usage{Input: 1203, Output: 457, CacheRead: 3001, CacheWrite: 77},
		openaiUsage:    fakeapi.Usage{Input: 811, Output: 233, CacheRead: 128},
	}
	f.anthropic = fakeapi.New(fakeapi.Answer{Usage: f.anthropicUsage, Text: "answer " + f.marker + " end", Deltas: 5})
	f.oai = fakeapi.New(fakeapi.Answer{Usage: f.openaiUsage, Text: "answer " + f.marker + " end", Deltas: 5})
	f.port, f.caFile = serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "openai.test") {
			f.oai.ServeHTTP(w, r)
			return
		}
		f.anthropic.ServeHTTP(w, r)
	}), "anthropic.test", "openai.test")
	h.writeFile(filepath.Join(h.ws, "api.py"), apiClient, 0o644)
	return f
}

// policy is a policy reaching both fakes with a credential for each (so both are intercepted) and the
// given budgets section.
func (f *fakeAPIs) policy(budgets string) string {
	return fmt.Sprintf(`network:
  allow:
    - {host: anthropic.test, ports: [%[1]d]}
    - {host: openai.test, ports: [%[1]d]}
  hosts: {anthropic.test: 127.0.0.1, openai.test: 127.0.0.1}
  tls: {caFile: %[2]q}
credentials:
  - name: API_KEY
    from: {env: CORDON_TEST_ANTHROPIC_KEY}
    inject: {host: anthropic.test, header: x-api-key}
  - name: OPENAI_KEY
    from: {env: CORDON_TEST_OPENAI_KEY}
    inject: {host: openai.test, scheme: bearer}
env:
  set: {MARKER: %[3]q}
%[4]s`, f.port, f.caFile, f.marker, budgets)
}

// run runs script in a sandbox with policy body pol, keeping the run (a run that changed nothing is
// removed with its audit log otherwise) so that its log can be read.
func (f *fakeAPIs) run(h *harness, pol, script string) result {
	h.t.Helper()
	return h.cordon(f.env(h), "", "run", "--keep", "--policy", h.policy(pol), "--", "sh", "-c", script)
}

func (f *fakeAPIs) env(h *harness) []string {
	return []string{"CORDON_TEST_ANTHROPIC_KEY=sk-ant-api03-" + h.canary, "CORDON_TEST_OPENAI_KEY=sk-proj-" + h.canary}
}

// call is the shell line running the client: N requests of KIND in MODE.
func (f *fakeAPIs) call(host, kind, mode string, n int) string {
	return fmt.Sprintf("python3 api.py %s:%d %s %s %d\n", host, f.port, kind, mode, n)
}

// meteredEvent is the usage cordon's audit log carries on one metered http event.
type meteredEvent struct {
	host, path                           string
	input, output, cacheRead, cacheWrite int64
	cost                                 float64
	unknown                              bool
}

// auditLog is the last run's events (cordon log --json last) and its raw text.
func auditLog(t *testing.T, h *harness) ([]audit.Event, string) {
	t.Helper()
	r := h.cordon(nil, "", "log", "--json", "last")
	if r.code != 0 {
		t.Fatalf("cordon log --json last:\n%s", r)
	}
	var evs []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("cordon log --json: %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs, r.stdout
}

func metered(t *testing.T, evs []audit.Event) []meteredEvent {
	t.Helper()
	var out []meteredEvent
	num := func(e audit.Event, k string) int64 {
		n, err := strconv.ParseInt(e.Detail[k], 10, 64)
		if err != nil {
			t.Errorf("event %+v: detail %s: %v", e, k, err)
		}
		return n
	}
	for _, e := range evs {
		if e.Kind != audit.KindHTTP || e.Decision != audit.Allow {
			continue
		}
		if e.Detail["budget_usage"] == "unknown" {
			out = append(out, meteredEvent{host: e.Name, path: e.Detail["path"], unknown: true})
			continue
		}
		if _, ok := e.Detail["budget_input"]; !ok {
			continue
		}
		cost, err := strconv.ParseFloat(e.Detail["budget_cost_usd"], 64)
		if err != nil {
			t.Errorf("event %+v: budget_cost_usd: %v", e, err)
		}
		out = append(out, meteredEvent{host: e.Name, path: e.Detail["path"], input: num(e, "budget_input"), output: num(e, "budget_output"),
			cacheRead: num(e, "budget_cache_read"), cacheWrite: num(e, "budget_cache_write"), cost: cost})
	}
	return out
}

// prices are the budgets' prices in USD per million tokens, and cost what they make of usage u.
var prices = struct{ input, output, cacheRead, cacheWrite float64 }{3, 15, 0.3, 3.75}

func cost(u fakeapi.Usage) float64 {
	return (float64(u.Input)*prices.input + float64(u.Output)*prices.output + float64(u.CacheRead)*prices.cacheRead + float64(u.CacheWrite)*prices.cacheWrite) / 1e6
}

const pricesYAML = `{input: 3.00, output: 15.00, cacheRead: 0.30, cacheWrite: 3.75}`

// TestBudgetCounts: for both APIs, JSON and streamed (an OpenAI chat stream, which carries no usage
// unless asked, included), every answer's metered usage equals what the fake reported, exactly, and
// nothing of the prompt or the answer text reaches the audit log.
func TestBudgetCounts(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		pol := f.policy(fmt.Sprintf(`budgets:
  - {host: anthropic.test, api: anthropic, maxRequests: 100, maxCost: {usd: 50, prices: %[1]s}}
  - {host: openai.test, maxRequests: 100, maxCost: {usd: 50, prices: %[1]s}}
`, pricesYAML))
		script := f.call("anthropic.test", "anthropic", "json", 2) + f.call("anthropic.test", "anthropic", "stream", 2) +
			f.call("openai.test", "chat", "json", 1) + f.call("openai.test", "chat", "stream", 1) +
			f.call("openai.test", "responses", "json", 1) + f.call("openai.test", "responses", "stream", 1)
		r := f.run(h, pol, script)
		if r.code != 0 || strings.Count(r.stdout, "OK 200") != 8 {
			t.Fatalf("run:\n%s", r)
		}
		// The gateway asked the chat stream for its usage: the fake saw include_usage and sent it.
		for _, q := range f.oai.Requests() {
			if q.Path == "/v1/chat/completions" && q.Stream && (!q.IncludeUsage || !q.UsageSent) {
				t.Errorf("the streamed chat request reached the fake without stream_options.include_usage: %s", q.Body)
			}
		}
		if _, n := f.anthropic.Reported(); n != 4 {
			t.Errorf("the Anthropic fake reported usage on %d answers, want 4", n)
		}
		if _, n := f.oai.Reported(); n != 4 {
			t.Errorf("the OpenAI fake reported usage on %d answers, want 4", n)
		}
		evs, raw := auditLog(t, h)
		got := metered(t, evs)
		counts := map[string]int{}
		for _, m := range got {
			want, api := f.anthropicUsage, "anthropic"
			if m.host == "openai.test" {
				want, api = f.openaiUsage, "openai"
			}
			counts[m.host]++
			if m.unknown || m.input != want.Input || m.output != want.Output || m.cacheRead != want.CacheRead || m.cacheWrite != want.CacheWrite {
				t.Errorf("%s %s metered %+v, the fake reported %+v (%s)", m.host, m.path, m, want, api)
			}
			if math.Abs(m.cost-cost(want)) > 1e-6 {
				t.Errorf("%s %s cost %v, want %v", m.host, m.path, m.cost, cost(want))
			}
		}
		if counts["anthropic.test"] != 4 || counts["openai.test"] != 4 {
			t.Errorf("metered events per host %v, want 4 each:\n%s", counts, raw)
		}
		if strings.Contains(raw, f.marker) || strings.Contains(raw, h.canary) {
			t.Errorf("the audit log holds prompt or answer text:\n%s", raw)
		}
		logFile := filepath.Join(h.home, ".local", "state", "cordon")
		filepath.Walk(logFile, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && !strings.Contains(p, "/upper/") && fi.Size() < 64<<20 {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), f.marker) {
					t.Errorf("%s holds prompt or answer text", p)
				}
			}
			return nil
		})
	})
}

// TestBudgetUsageUnknown: an answer without usage counts as a request and is logged as usage unknown,
// never as zero tokens.
func TestBudgetUsageUnknown(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		f.anthropic.SetAnswer(fakeapi.Answer{Text: "no usage here", NoUsage: true})
		pol := f.policy("budgets:\n  - {host: anthropic.test, maxRequests: 2}\n")
		r := f.run(h, pol, f.call("anthropic.test", "anthropic", "json", 1)+f.call("anthropic.test", "anthropic", "stream", 2))
		if r.code != 0 || strings.Count(r.stdout, "OK 200") != 2 || !strings.Contains(r.stdout, "REFUSED 429") {
			t.Fatalf("two answers without usage must still spend a maxRequests: 2 budget:\n%s", r)
		}
		evs, raw := auditLog(t, h)
		got := metered(t, evs)
		if len(got) != 2 || !got[0].unknown || !got[1].unknown {
			t.Errorf("want two events with budget_usage=unknown, got %+v:\n%s", got, raw)
		}
	})
}

// TestBudgetRefusal: past maxRequests the next request gets a 429 whose body is the API's own error
// type naming the budget, cordon prints one line, and the audit log has the refusal.
func TestBudgetRefusal(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		pol := f.policy("budgets:\n  - {host: anthropic.test, maxRequests: 2}\n  - {host: openai.test, api: openai, maxRequests: 1}\n")
		r := f.run(h, pol, f.call("anthropic.test", "anthropic", "stream", 3)+f.call("openai.test", "chat", "json", 2))
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 5 {
			t.Fatalf("run:\n%s", r)
		}
		wantMsg := "cordon: budget maxRequests 2 for anthropic.test spent (run "
		if lines[0] != "OK 200" || lines[1] != "OK 200" || !strings.HasPrefix(lines[2], "REFUSED 429 rate_limit_error error "+wantMsg) ||
			!strings.HasSuffix(lines[2], "raise budgets[0].maxRequests to continue") {
			t.Errorf("anthropic: want two answers then a 429 rate_limit_error naming the budget:\n%s", r)
		}
		if lines[3] != "OK 200" || !strings.HasPrefix(lines[4], "REFUSED 429 insufficient_quota - cordon: budget maxRequests 1 for openai.test spent") ||
			!strings.HasSuffix(lines[4], "raise budgets[1].maxRequests to continue") {
			t.Errorf("openai: want one answer then a 429 insufficient_quota naming the budget:\n%s", r)
		}
		if n := len(f.anthropic.Requests()); n != 2 {
			t.Errorf("the refused request reached the upstream: it saw %d requests", n)
		}
		if n := len(f.oai.Requests()); n != 1 {
			t.Errorf("the refused openai request reached the upstream: it saw %d requests", n)
		}
		if !strings.Contains(r.stderr, wantMsg) || !strings.Contains(r.stderr, "cordon: budget maxRequests 1 for openai.test spent") {
			t.Errorf("cordon's stderr lacks the budget lines:\n%s", r.stderr)
		}
		evs, raw := auditLog(t, h)
		refused := map[string]bool{}
		for _, e := range evs {
			if e.Kind == audit.KindHTTP && e.Decision == audit.Deny && strings.HasPrefix(e.Reason, "cordon: budget maxRequests") {
				refused[e.Rule] = true
			}
		}
		if !refused["budgets[0]"] || !refused["budgets[1]"] {
			t.Errorf("the audit log lacks the refusals by budgets[0] and budgets[1]:\n%s", raw)
		}
	})
}

// TestBudgetDay: a per:day budget holds across runs of the same policy file, and across a kill -9 of
// cordon mid-run: what was spent before the kill still counts.
func TestBudgetDay(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		runWith := func(pol, script string) result {
			return h.cordon(f.env(h), "", "run", "--policy", pol, "--", "sh", "-c", script)
		}
		budget := "budgets:\n  - {host: anthropic.test, per: day, maxRequests: 2}\n"
		pol := h.policy(f.policy(budget))
		if r := runWith(pol, f.call("anthropic.test", "anthropic", "json", 1)); r.code != 0 || strings.TrimSpace(r.stdout) != "OK 200" {
			t.Fatalf("first run:\n%s", r)
		}
		r := runWith(pol, f.call("anthropic.test", "anthropic", "json", 2))
		if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || lines[0] != "OK 200" || !strings.HasPrefix(lines[1], "REFUSED 429 rate_limit_error") {
			t.Errorf("second run: want one answer, then the day's budget spent:\n%s", r)
		}
		// Another policy file has a day of its own.
		other := h.policy(f.policy(budget))
		if r := runWith(other, f.call("anthropic.test", "anthropic", "json", 1)); strings.TrimSpace(r.stdout) != "OK 200" {
			t.Errorf("a run of another policy file was refused by this one's day:\n%s", r)
		}

		// kill -9: a run answers one request, then cordon is killed while the agent waits.
		killed := h.policy(f.policy(budget))
		cmd := h.command(f.env(h), cordonBin, h.tierArgs([]string{"run", "--policy", killed, "--", "sh", "-c",
			f.call("anthropic.test", "anthropic", "stream", 1) + "echo READY; sleep 60"})...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan string, 1)
		go func() {
			var seen strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				seen.WriteString(sc.Text() + "\n")
				if sc.Text() == "READY" {
					ready <- seen.String()
					io.Copy(io.Discard, out)
					return
				}
			}
			ready <- seen.String()
		}()
		select {
		case s := <-ready:
			if !strings.Contains(s, "OK 200\nREADY") {
				t.Errorf("the run to be killed: %q", s)
			}
		case <-time.After(60 * time.Second):
			t.Error("the run to be killed never got its answer")
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		r = runWith(killed, f.call("anthropic.test", "anthropic", "json", 2))
		if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || lines[0] != "OK 200" || !strings.HasPrefix(lines[1], "REFUSED 429") {
			t.Errorf("after kill -9: the killed run's request must still count against the day:\n%s", r)
		}
	})
}

// TestBudgetClaudeCode: the real Claude Code CLI inside the sandbox against the fake Anthropic API,
// stopped by a maxRequests budget, shows cordon's reason in its own error output.
func TestBudgetClaudeCode(t *testing.T) {
	requireTool(t, "claude")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		pol := strings.Replace(f.policy("budgets:\n  - {host: anthropic.test, maxRequests: 1}\n"), "name: API_KEY", "name: ANTHROPIC_API_KEY", 1)
		script := fmt.Sprintf(`export ANTHROPIC_BASE_URL=https://anthropic.test:%d DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CODE_MAX_RETRIES=0 ANTHROPIC_MAX_RETRIES=0
export HOME=$PWD/claude-home; mkdir -p "$HOME"
claude -p hi 2>&1; claude -p again 2>&1; true`, f.port)
		r := f.run(h, pol, script)
		// claude's own output (its stderr joined to its stdout): cordon's stderr names the budget too.
		if !strings.Contains(r.stdout, "cordon: budget maxRequests 1 for anthropic.test spent") {
			t.Errorf("claude's output does not name the budget:\n%s\nthe fake saw %d requests", r, len(f.anthropic.Requests()))
		}
		if len(f.anthropic.Requests()) != 1 {
			t.Errorf("the fake saw %d requests past a maxRequests: 1 budget", len(f.anthropic.Requests()))
		}
	})
}

// TestBudgetHard: a budget spent in the middle of an answer lets that answer finish and refuses the
// next request; with hard: true it cuts the answer in flight.
func TestBudgetHard(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		for _, tt := range []struct {
			hard  string
			first string // the first answer's fate
		}{{"false", "OK 200"}, {"true", "cut"}} {
			pol := f.policy("budgets:\n  - {host: anthropic.test, maxOutputTokens: 100, hard: " + tt.hard + "}\n")
			r := f.run(h, pol, f.call("anthropic.test", "anthropic", "stream", 2))
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if r.code != 0 || len(lines) != 2 {
				t.Fatalf("hard: %s:\n%s", tt.hard, r)
			}
			if cut := strings.HasPrefix(lines[0], "CUT") || strings.HasPrefix(lines[0], "TRUNCATED"); (tt.first == "cut") != cut || (!cut && lines[0] != "OK 200") {
				t.Errorf("hard: %s: the answer that spent the budget: %q, want %s", tt.hard, lines[0], tt.first)
			}
			if !strings.HasPrefix(lines[1], "REFUSED 429 rate_limit_error error cordon: budget maxOutputTokens 100 for anthropic.test spent") {
				t.Errorf("hard: %s: the next request: %q, want refused by maxOutputTokens", tt.hard, lines[1])
			}
		}
	})
}

// TestBudgetDisplay: the end-of-run summary and cordon log show each budgeted host's usage, cordon
// runs each run's cost, and cordon budget today's per:day totals and what is left.
func TestBudgetDisplay(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		pol := h.policy(f.policy(fmt.Sprintf(`budgets:
  - {host: anthropic.test, per: day, maxRequests: 5, maxCost: {usd: 1, prices: %[1]s}}
  - {host: openai.test, maxCost: {usd: 1, prices: %[1]s}}
`, pricesYAML)))
		r := h.cordon(f.env(h), "", "run", "--keep", "--policy", pol, "--", "sh", "-c",
			f.call("anthropic.test", "anthropic", "json", 2)+f.call("openai.test", "chat", "stream", 1))
		if r.code != 0 || strings.Count(r.stdout, "OK 200") != 3 {
			t.Fatalf("run:\n%s", r)
		}
		// 2 × $0.01165305 and 1 × $0.0059664 at the test's prices (see cost).
		if got := 2 * cost(f.anthropicUsage); math.Abs(got-0.0233061) > 1e-9 {
			t.Fatalf("the test's arithmetic: %v", got)
		}
		for _, want := range []string{"cordon: budget anthropic.test: 2 requests, ", "cordon: budget openai.test: 1 request, "} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("the summary lacks %q:\n%s", want, r.stderr)
			}
		}
		if !strings.Contains(r.stderr, "$0.02") || !strings.Contains(r.stderr, "$0.01") {
			t.Errorf("the summary lacks each host's cost:\n%s", r.stderr)
		}
		if l := h.cordon(nil, "", "log", "last"); !strings.Contains(l.stdout, "budget anthropic.test: 2 requests, ") || !strings.Contains(l.stdout, "budget openai.test: 1 request, ") {
			t.Errorf("cordon log last lacks the usage per host:\n%s", l)
		}
		if runs := h.cordon(nil, "", "runs"); !strings.Contains(runs.stdout, "COST") || !strings.Contains(runs.stdout, "$0.03") {
			t.Errorf("cordon runs lacks the run's cost ($0.03):\n%s", runs)
		}
		b := h.cordon(nil, "", "budget", "--policy", pol)
		if b.code != 0 || !strings.Contains(b.stdout, "anthropic.test") || !strings.Contains(b.stdout, "2 of 5 (3 left)") || strings.Contains(b.stdout, "openai.test") {
			t.Errorf("cordon budget: want today's anthropic.test total, 2 of 5 requests, and no per-run budget:\n%s", b)
		}
	})
}
