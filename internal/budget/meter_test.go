package budget

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	ctJSON = "application/json"
	ctSSE  = "text/event-stream; charset=utf-8"
)

// meterCases are recorded-format answers with the usage each reports.
var meterCases = []struct {
	file string
	api  API
	ct   string
	want Usage
}{
	{"anthropic.json", Anthropic, ctJSON, Usage{Input: 2095, Output: 503, CacheRead: 18000, CacheWrite: 1200, Known: true}},
	{"anthropic.sse", Anthropic, ctSSE, Usage{Input: 472, Output: 15, CacheRead: 12034, CacheWrite: 310, Known: true}},
	// A stream cut before message_delta: the input is known, the output is not.
	{"anthropic_cut.sse", Anthropic, ctSSE, Usage{Input: 472, Output: 1}},
	{"anthropic_error.sse", Anthropic, ctSSE, Usage{}},
	{"openai_chat.json", OpenAI, ctJSON, Usage{Input: 1117 - 1024, Output: 46, CacheRead: 1024, Known: true}},
	{"openai_chat.sse", OpenAI, ctSSE, Usage{Input: 812 - 512, Output: 37, CacheRead: 512, Known: true}},
	{"openai_chat_nousage.sse", OpenAI, ctSSE, Usage{}},
	{"openai_responses.json", OpenAI, ctJSON, Usage{Input: 36, Output: 87, Known: true}},
	{"openai_responses.sse", OpenAI, ctSSE, Usage{Input: 37 - 16, Output: 11, CacheRead: 16, Known: true}},
	// The wrong reader for the body, or no API: unknown, never zero-and-known.
	{"anthropic.sse", OpenAI, ctSSE, Usage{}},
	{"openai_chat.json", "", ctJSON, Usage{}},
	// Read as JSON, a stream's last top-level usage is its final delta, without the input.
	{"anthropic.sse", Anthropic, ctJSON, Usage{Output: 15}},
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parsed runs body through a Meter that skips nothing: every byte goes through the parser.
func parsed(api API, ct string, body []byte) Usage {
	m := NewMeter(api, ct)
	m.parseOnly = true
	m.Write(body)
	return m.Usage()
}

// meter runs body through a Meter in the given pieces.
func meter(api API, ct string, pieces ...[]byte) Usage {
	m := NewMeter(api, ct)
	for _, p := range pieces {
		if n, err := m.Write(p); n != len(p) || err != nil {
			panic("Meter.Write did not take all bytes")
		}
	}
	return m.Usage()
}

func TestMeter(t *testing.T) {
	for _, tc := range meterCases {
		t.Run(string(tc.api)+"/"+tc.file+"/"+tc.ct, func(t *testing.T) {
			body := readTestdata(t, tc.file)
			variants := map[string][]byte{"lf": body}
			if strings.HasSuffix(tc.file, ".sse") {
				variants["crlf"] = bytes.ReplaceAll(body, []byte("\n"), []byte("\r\n"))
				variants["cr"] = bytes.ReplaceAll(body, []byte("\n"), []byte("\r"))
			}
			for name, b := range variants {
				if got := meter(tc.api, tc.ct, b); got != tc.want {
					t.Fatalf("%s, one write: got %+v, want %+v", name, got, tc.want)
				}
				if got := parsed(tc.api, tc.ct, b); got != tc.want {
					t.Fatalf("%s, parsed without skipping: got %+v, want %+v", name, got, tc.want)
				}
				for i := 0; i <= len(b); i++ {
					if got := meter(tc.api, tc.ct, b[:i], b[i:]); got != tc.want {
						t.Fatalf("%s, split at %d (%q|%q): got %+v, want %+v", name, i, tail(b[:i]), head(b[i:]), got, tc.want)
					}
				}
				bytewise := make([][]byte, len(b))
				for i := range b {
					bytewise[i] = b[i : i+1]
				}
				if got := meter(tc.api, tc.ct, bytewise...); got != tc.want {
					t.Fatalf("%s, byte by byte: got %+v, want %+v", name, got, tc.want)
				}
			}
		})
	}
}

func head(b []byte) []byte { return b[:min(len(b), 20)] }
func tail(b []byte) []byte { return b[max(0, len(b)-20):] }

// TestMeterMidStream: a hard budget asks for the usage so far; it is partial and not Known until
// the figures are final.
func TestMeterMidStream(t *testing.T) {
	body := readTestdata(t, "anthropic.sse")
	m := NewMeter(Anthropic, ctSSE)
	i := bytes.Index(body, []byte("event: content_block_start"))
	m.Write(body[:i])
	if got, want := m.Usage(), (Usage{Input: 472, Output: 2, CacheRead: 12034, CacheWrite: 310}); got != want {
		t.Fatalf("after message_start: %+v, want %+v", got, want)
	}
	m.Write(body[i:])
	if got := m.Usage(); !got.Known || got.Output != 15 {
		t.Fatalf("at the end: %+v, want known with 15 output tokens", got)
	}
}

// TestMeterBadUsage: a usage object that is there but unreadable makes the usage unknown.
func TestMeterBadUsage(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		api        API
	}{
		{"negative", `{"usage":{"input_tokens":-1,"output_tokens":5}}`, Anthropic},
		{"not an object", `{"usage":"lots"}`, Anthropic},
		{"missing output", `{"usage":{"input_tokens":3}}`, Anthropic},
		{"cached above prompt", `{"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}}`, OpenAI},
		{"nested only", `{"choices":[{"usage":{"prompt_tokens":3,"completion_tokens":1}}]}`, OpenAI},
		{"in a string", `{"text":"{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}"}`, OpenAI},
		{"truncated", `{"usage":{"prompt_tokens":3,"completion_tok`, OpenAI},
		{"empty", ``, OpenAI},
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00", OpenAI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := meter(tc.api, ctJSON, []byte(tc.body)); got.Known {
				t.Fatalf("got %+v, want unknown", got)
			}
		})
	}
}

// TestMeterBigAnswer: an answer far bigger than any bound is read in bounded memory and its usage
// still found, in JSON and in an SSE event of several megabytes.
func TestMeterBigAnswer(t *testing.T) {
	text := strings.Repeat(`lorem \"usage\" {[ ipsum `, 1<<17) // 3 MiB
	jsonBody := `{"id":"x","content":[{"type":"text","text":"` + text + `"}],"usage":{"input_tokens":7,"output_tokens":9}}`
	sseBody := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[],\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"" + text + "\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"
	want := Usage{Input: 7, Output: 9, Known: true}
	for _, tc := range []struct{ ct, body string }{{ctJSON, jsonBody}, {ctSSE, sseBody}} {
		m := NewMeter(Anthropic, tc.ct)
		b := []byte(tc.body)
		for len(b) > 0 {
			n := min(len(b), 32<<10)
			m.Write(b[:n])
			b = b[n:]
		}
		if got := m.Usage(); got != want {
			t.Fatalf("%s: got %+v, want %+v", tc.ct, got, want)
		}
		if held := cap(m.doc.str) + cap(m.doc.capBuf); held > 4*maxCapture {
			t.Fatalf("%s: meter holds %d bytes", tc.ct, held)
		}
	}
}

func TestAPIFor(t *testing.T) {
	for path, want := range map[string]API{
		"/v1/messages":                     Anthropic,
		"/v1/messages?beta=true":           Anthropic,
		"/v1/chat/completions":             OpenAI,
		"/v1/responses":                    OpenAI,
		"/openai/v1/chat/completions":      OpenAI,
		"/v1/messages/count_tokens":        "",
		"/v1/models":                       "",
		"/":                                "",
		"":                                 "",
		"/v1/messages/../chat/completions": OpenAI,
	} {
		if got := APIFor(path); got != want {
			t.Errorf("APIFor(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestMeterMidJSON: asking a JSON meter for its usage mid-answer changes nothing.
func TestMeterMidJSON(t *testing.T) {
	body := readTestdata(t, "openai_chat.json")
	m := NewMeter(OpenAI, ctJSON)
	i := bytes.Index(body, []byte(`"usage"`))
	m.Write(body[:i])
	if got := m.Usage(); got.Known {
		t.Fatalf("before the usage: %+v, want unknown", got)
	}
	m.Write(body[i:])
	if got, want := m.Usage(), (Usage{Input: 93, Output: 46, CacheRead: 1024, Known: true}); got != want {
		t.Fatalf("at the end: %+v, want %+v", got, want)
	}
}

// TestMeterSkipsOnlyNull: an event stream's runs of events are skipped unparsed only when their
// "usage" keys are all followed by null and a byte that ends it; any other value is read, in one
// write (the skip) as a byte at a time (the parser).
func TestMeterSkipsOnlyNull(t *testing.T) {
	final := "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
	known := Usage{Input: 5, Output: 2, Known: true}
	unknown := Usage{Input: 5, Output: 2} // a usage that did not read makes the answer's unknown
	for _, tc := range []struct {
		name, events string
		want         Usage
	}{
		{"nulls", "data: {\"usage\":null}\n\ndata: {\"usage\":null,\"x\":1}\n\ndata: {\"a\":[{\"usage\":null}]}\n\n", known},
		{"null at a line's end", "data: {\"usage\":null\ndata: }\n\ndata: {\"usage\":null\r\ndata: }\n\n", known},
		{"null then more", "data: {\"usage\":nullx}\n\n", unknown},
		{"a string", "data: {\"usage\":\"null\"}\n\n", unknown},
		{"a number", "data: {\"usage\" :7}\n\n", unknown},
		{"a second key", "data: {\"usage\":null,\"usage\":9}\n\n", unknown},
		{"after the final one", "", known},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.events + final)
			if tc.name == "after the final one" {
				body = []byte(final + "data: {\"usage\":null}\n\n")
			}
			bytewise := make([][]byte, len(body))
			for i := range body {
				bytewise[i] = body[i : i+1]
			}
			if got := parsed(OpenAI, ctSSE, body); got != tc.want {
				t.Errorf("parsed without skipping: got %+v, want %+v", got, tc.want)
			}
			for name, pieces := range map[string][][]byte{"one write": {body}, "a byte at a time": bytewise} {
				if got := meter(OpenAI, ctSSE, pieces...); got != tc.want {
					t.Errorf("%s: got %+v, want %+v", name, got, tc.want)
				}
			}
		})
	}
}
