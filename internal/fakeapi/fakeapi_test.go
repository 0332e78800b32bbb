package fakeapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// events parses a server-sent event stream into its data payloads.
func events(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// TestWireFormat: each endpoint answers in its API's shape, the text joins back whole, and usage is
// where the API puts it (an OpenAI chat stream only when asked).
func TestWireFormat(t *testing.T) {
	u := Usage{Input: 11, Output: 7, CacheRead: 5, CacheWrite: 3}
	f := New(Answer{Usage: u, Text: "hello-marker-world", Deltas: 4})
	tests := []struct {
		name, path, body string
		sse, usage       bool
		check            func(t *testing.T, body string)
	}{
		{"anthropic json", "/v1/messages", `{"model":"m"}`, false, true, func(t *testing.T, b string) {
			var m struct {
				Type    string
				Content []struct{ Text string }
				Usage   struct {
					In    int64 `json:"input_tokens"`
					Out   int64 `json:"output_tokens"`
					Read  int64 `json:"cache_read_input_tokens"`
					Write int64 `json:"cache_creation_input_tokens"`
				}
			}
			mustJSON(t, b, &m)
			if m.Type != "message" || m.Content[0].Text != "hello-marker-world" || m.Usage.In != 11 || m.Usage.Out != 7 || m.Usage.Read != 5 || m.Usage.Write != 3 {
				t.Errorf("body %s", b)
			}
		}},
		{"anthropic sse", "/v1/messages", `{"stream":true}`, true, true, func(t *testing.T, b string) {
			ev := events(t, b)
			if !strings.Contains(ev[0], `"message_start"`) || !strings.Contains(ev[0], `"input_tokens":11`) || !strings.Contains(ev[len(ev)-2], `"output_tokens":7`) {
				t.Errorf("events %q", ev)
			}
		}},
		{"chat json", "/v1/chat/completions", `{}`, false, true, func(t *testing.T, b string) {
			if !strings.Contains(b, `"prompt_tokens":16`) || !strings.Contains(b, `"cached_tokens":5`) {
				t.Errorf("body %s", b)
			}
		}},
		{"chat sse without include_usage", "/v1/chat/completions", `{"stream":true}`, true, false, func(t *testing.T, b string) {
			if strings.Contains(b, "prompt_tokens") || !strings.HasSuffix(strings.TrimSpace(b), "data: [DONE]") {
				t.Errorf("body %s", b)
			}
		}},
		{"chat sse with include_usage", "/v1/chat/completions", `{"stream":true,"stream_options":{"include_usage":true}}`, true, true, func(t *testing.T, b string) {
			ev := events(t, b)
			if !strings.Contains(ev[len(ev)-2], `"completion_tokens":7`) {
				t.Errorf("events %q", ev)
			}
		}},
		{"responses json", "/v1/responses", `{}`, false, true, func(t *testing.T, b string) {
			if !strings.Contains(b, `"output_text"`) || !strings.Contains(b, `"input_tokens":16`) {
				t.Errorf("body %s", b)
			}
		}},
		{"responses sse", "/v1/responses", `{"stream":true}`, true, true, func(t *testing.T, b string) {
			ev := events(t, b)
			if !strings.Contains(ev[len(ev)-1], `"response.completed"`) || !strings.Contains(ev[len(ev)-1], `"output_tokens":7`) {
				t.Errorf("events %q", ev)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			f.ServeHTTP(w, httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body)))
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") != tt.sse {
				t.Errorf("content type %q", ct)
			}
			if tt.sse {
				var text strings.Builder
				for _, d := range events(t, w.Body.String()) {
					var e struct {
						Delta   json.RawMessage
						Choices []struct{ Delta struct{ Content string } }
					}
					if d == "[DONE]" {
						continue
					}
					mustJSON(t, d, &e)
					var s struct{ Text string }
					if json.Unmarshal(e.Delta, &s) == nil {
						text.WriteString(s.Text)
					} else if str := ""; json.Unmarshal(e.Delta, &str) == nil {
						text.WriteString(str)
					}
					for _, c := range e.Choices {
						text.WriteString(c.Delta.Content)
					}
				}
				if text.String() != "hello-marker-world" {
					t.Errorf("streamed text %q", text.String())
				}
			}
			tt.check(t, w.Body.String())
			seen := f.Requests()
			if last := seen[len(seen)-1]; last.UsageSent != tt.usage || last.Path != tt.path {
				t.Errorf("recorded %+v, want usage sent %v", last, tt.usage)
			}
		})
	}
	sum, n := f.Reported()
	if n != 6 || sum.Output != 6*7 || sum.CacheWrite != 2*3 {
		t.Errorf("reported %+v over %d answers", sum, n)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
}

func TestUnknownPath(t *testing.T) {
	w := httptest.NewRecorder()
	New(Answer{}).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/other", strings.NewReader("{}")))
	if w.Code != http.StatusNotFound {
		t.Errorf("status %d", w.Code)
	}
}
