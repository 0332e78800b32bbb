// Package fakeapi is a local fake of the LLM APIs whose spend cordon meters: Anthropic's Messages API
// (/v1/messages) and OpenAI's chat completions (/v1/chat/completions) and responses (/v1/responses). It
// speaks their real wire format, JSON and server-sent events, reports the usage figures it was given,
// and records every request, so that tests can assert that cordon's counts equal what the API reported.
// It is imported by tests and benchmarks only.
package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Usage is the usage one answer reports. For OpenAI, whose prompt_tokens include cached tokens, the
// fake reports prompt_tokens = Input + CacheRead and cached_tokens = CacheRead; OpenAI has no cache
// writes, so CacheWrite is ignored there.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Answer shapes every answer the fake gives.
type Answer struct {
	Usage Usage
	// Text is the answer's text, sent as Deltas pieces when streamed (at least one).
	Text   string
	Deltas int
	// NoUsage leaves usage out of every answer, as a proxy or an odd API version might.
	NoUsage bool
}

// Request is one request the fake received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Stream is the body's "stream" field; IncludeUsage its stream_options.include_usage.
	Stream, IncludeUsage bool
	// UsageSent is whether the answer carried usage (an OpenAI chat stream carries it only when asked).
	UsageSent bool
}

// Fake is an http.Handler for the three endpoints; other paths get 404. It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	answer Answer
	seen   []Request
}

// New returns a fake giving answer to every request.
func New(answer Answer) *Fake {
	return &Fake{answer: answer}
}

// SetAnswer changes the answer later requests get.
func (f *Fake) SetAnswer(a Answer) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

// Requests returns the requests received so far, in order.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.seen...)
}

// Reported is the sum of the usage the fake reported over all answers, in the fake's own terms (the
// OpenAI prompt_tokens split as documented on Usage), and how many answers carried usage.
func (f *Fake) Reported() (sum Usage, answers int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.seen {
		if r.UsageSent {
			answers++
			u := f.answer.Usage
			sum.Input += u.Input
			sum.Output += u.Output
			sum.CacheRead += u.CacheRead
			if !strings.HasPrefix(r.Path, "/v1/chat") && !strings.HasPrefix(r.Path, "/v1/responses") {
				sum.CacheWrite += u.CacheWrite
			}
		}
	}
	return sum, answers
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var fields struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &fields); err != nil {
			http.Error(w, "fakeapi: body is not JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	f.mu.Lock()
	a := f.answer
	f.mu.Unlock()
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Stream: fields.Stream, IncludeUsage: fields.StreamOptions.IncludeUsage}
	var write func(http.ResponseWriter, Answer) bool
	switch r.URL.Path {
	case "/v1/messages":
		write = anthropicJSON
		if fields.Stream {
			write = anthropicSSE
		}
	case "/v1/chat/completions":
		write = chatJSON
		if fields.Stream {
			write = func(w http.ResponseWriter, a Answer) bool { return chatSSE(w, a, req.IncludeUsage) }
		}
	case "/v1/responses":
		write = responsesJSON
		if fields.Stream {
			write = responsesSSE
		}
	default:
		http.NotFound(w, r)
		return
	}
	req.UsageSent = write(w, a)
	f.mu.Lock()
	f.seen = append(f.seen, req)
	f.mu.Unlock()
}

// pieces splits text into n pieces (n ≥ 1) that join back to it.
func pieces(text string, n int) []string {
	if n < 1 {
		n = 1
	}
	out := make([]string, 0, n)
	size := (len(text) + n - 1) / n
	for i := 0; i < n; i++ {
		lo, hi := min(i*size, len(text)), min((i+1)*size, len(text))
		out = append(out, text[lo:hi])
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// sse starts a server-sent event stream and returns a function sending one event (name "" for a data-only
// event, as OpenAI's chat stream sends) and flushing it.
func sse(w http.ResponseWriter) func(event string, data any) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return func(event string, data any) {
		if event != "" {
			fmt.Fprintf(w, "event: %s\n", event)
		}
		if s, ok := data.(string); ok {
			fmt.Fprintf(w, "data: %s\n\n", s)
		} else {
			b, _ := json.Marshal(data)
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

type obj = map[string]any
