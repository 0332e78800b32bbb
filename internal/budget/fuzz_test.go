package budget

import (
	"bytes"
	"strings"
	"testing"
)

// fuzzMeter checks one body, split at cut: the Meter never panics, holds bounded memory, and reads
// the same usage however the body is split (a known figure is never lost to a split).
func fuzzMeter(t *testing.T, api API, ct string, body []byte, cut uint) {
	whole := meter(api, ct, body)
	c := int(cut % uint(len(body)+1))
	m := NewMeter(api, ct)
	m.Write(body[:c])
	mid := m.Usage()
	m.Write(body[c:])
	if got := m.Usage(); got != whole {
		// Usage mid-answer (a hard budget's check) must not disturb the meter.
		t.Fatalf("split at %d with Usage between: %+v (after %+v), whole: %+v", c, got, mid, whole)
	}
	if got := meter(api, ct, body[:c], body[c:]); got != whole {
		t.Fatalf("split at %d: %+v, whole: %+v", c, got, whole)
	}
	// Parsed whole, nothing skipped: the reference the skipping of usage-free runs
	// (Meter.writeSSE) is held to.
	if ref := parsed(api, ct, body); ref != whole {
		t.Fatalf("parsed without skipping: %+v, whole: %+v", ref, whole)
	}
	bytewise := make([][]byte, len(body))
	for i := range body {
		bytewise[i] = body[i : i+1]
	}
	if got := meter(api, ct, bytewise...); got != whole {
		t.Fatalf("a byte at a time: %+v, whole: %+v", got, whole)
	}
	if held := cap(m.doc.str) + cap(m.doc.capBuf) + len(m.doc.captures)*maxCapture; held > 8*maxCapture {
		t.Fatalf("meter holds %d bytes", held)
	}
	if cap(m.pend) > maxPend {
		t.Fatalf("meter holds %d bytes of a run", cap(m.pend))
	}
	if m.sse != nil && (cap(m.sse.field) > 2*maxField || cap(m.sse.name) > 2*maxName) {
		t.Fatalf("sse parser holds %d+%d bytes", cap(m.sse.field), cap(m.sse.name))
	}
	if whole.Input < 0 || whole.Output < 0 || whole.CacheRead < 0 || whole.CacheWrite < 0 {
		t.Fatalf("negative usage %+v", whole)
	}
}

func addSeeds(f *testing.F, suffix string) {
	for _, tc := range meterCases {
		if strings.HasSuffix(tc.file, suffix) {
			f.Add(readTestdata(f, tc.file), uint(17), tc.api == OpenAI)
		}
	}
}

func FuzzMeterSSE(f *testing.F) {
	addSeeds(f, ".sse")
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\n\r\n"), uint(30), true)
	f.Add([]byte("event:message_start\ndata:{\"type\":\"message_start\",\ndata:\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n"), uint(3), false)
	// Mixed line ends (CR, CRLF, LF) in runs of usage-free events before one with usage.
	f.Add([]byte("data: {\"d\":1}\r\n\ndata: {\"d\"\r:2}\n\n\r\rdata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\n"), uint(20), true)
	// Runs of usage-free events around the ones with usage, with a line split across data lines.
	f.Add([]byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n"+
		"data: {\"delta\":\"a\"}\n\ndata: {\"delta\":\"b\"}\n\n\n\nevent: x\ndata: {\"usa\ndata: ge\":1}\n\n"+
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\ndata: {}\n\n"), uint(60), false)
	// OpenAI's chunks each carry "usage":null (skipped), before the one with the figures; nulls
	// that are not followed by a byte ending a scalar, or at a line's end, or before a second key.
	f.Add([]byte("data: {\"choices\":[],\"usage\":null}\n\ndata: {\"usage\":null}\r\n\ndata: {\"usage\":nullx}\n\n"+
		"data: {\"usage\":null\ndata: }\n\ndata: {\"usage\":null,\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3}}\n\n"), uint(40), true)
	// A run's start held across pieces, ended by an LF split from the one before it; a tail with a CR.
	f.Add([]byte("event: a\ndata: {\"x\":1}\n\nevent: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n"+
		"\nevent: b\ndata: {\"y\":2}\r\rdata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\r\r"), uint(70), false)
	f.Fuzz(func(t *testing.T, body []byte, cut uint, openai bool) {
		api := Anthropic
		if openai {
			api = OpenAI
		}
		fuzzMeter(t, api, ctSSE, body, cut)
	})
}

func FuzzMeterJSON(f *testing.F) {
	addSeeds(f, ".json")
	f.Add([]byte(`{"usage":{"input_tokens":1,"output_tokens":2}}`), uint(9), false)
	f.Add([]byte(`[{"usage":1}]}}{"usage":{"prompt_tokens":4,"completion_tokens":2}}`), uint(12), true)
	f.Fuzz(func(t *testing.T, body []byte, cut uint, openai bool) {
		api := Anthropic
		if openai {
			api = OpenAI
		}
		fuzzMeter(t, api, ctJSON, body, cut)
	})
}

// FuzzLastBlank: the backward scan finds what bytes.LastIndex finds.
func FuzzLastBlank(f *testing.F) {
	for _, s := range []string{"", "\n", "\n\n", "a\n\nb", "\n\n\n", "x\r\n\r\n", "a\nb\n\nc\nd"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := lastBlank(p), bytes.LastIndex(p, blankLF); got != want {
			t.Fatalf("lastBlank(%q) = %d, bytes.LastIndex = %d", p, got, want)
		}
	})
}

// FuzzKeySearch: the anchored search finds what bytes.Index finds, whichever letter it looks for.
func FuzzKeySearch(f *testing.F) {
	for _, s := range []string{"", `"usage"`, `x"usage":1`, `{xusage":1}`, `usage"usage"`, `"usag"usage"`, strings.Repeat("usage ", 50) + `"usage"`, `"usage`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		want := bytes.Index(p, usageKey)
		for anchor := 1; anchor <= 4; anchor++ {
			k := keySearch{anchor: anchor, left: 1 << 30}
			if got := k.index(p); got != want {
				t.Fatalf("anchored on %q: index(%q) = %d, bytes.Index = %d", usageKey[anchor], p, got, want)
			}
		}
	})
}
