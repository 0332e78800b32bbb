package budget

import (
	"encoding/json"
	"testing"
)

func TestErrorBody(t *testing.T) {
	msg := `cordon: budget maxRequests 2 for api.anthropic.com spent (run R); raise budgets[0].maxRequests to continue <&>`
	ct, body := ErrorBody(Anthropic, msg)
	var a struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal(body, &a); err != nil || ct != "application/json" {
		t.Fatalf("anthropic: %s, %q: %v", ct, body, err)
	}
	if a.Type != "error" || a.Error.Type != "rate_limit_error" || a.Error.Message != msg {
		t.Fatalf("anthropic: %s", body)
	}
	for _, api := range []API{OpenAI, ""} {
		ct, body := ErrorBody(api, msg)
		var o struct {
			Error struct {
				Message, Type, Code string
				Param               *string
			}
		}
		if err := json.Unmarshal(body, &o); err != nil || ct != "application/json" {
			t.Fatalf("openai: %s, %q: %v", ct, body, err)
		}
		if o.Error.Type != "insufficient_quota" || o.Error.Code != "cordon_budget" || o.Error.Message != msg {
			t.Fatalf("openai: %s", body)
		}
		var raw map[string]map[string]json.RawMessage
		if json.Unmarshal(body, &raw) != nil || string(raw["error"]["param"]) != "null" {
			t.Fatalf("openai: param not null: %s", body)
		}
	}
}

func TestIncludeUsage(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		changed  bool
		opts     string // the stream_options wanted after
	}{
		{"streaming chat", `{"model":"gpt-4o","messages":[{"role":"user","content":"a<b & c>d"}],"stream":true}`, true, `{"include_usage":true}`},
		{"other stream options kept", `{"messages":[],"stream":true,"stream_options":{"include_obfuscation":false}}`, true, `{"include_obfuscation":false,"include_usage":true}`},
		{"null stream options", `{"messages":[],"stream":true,"stream_options":null}`, true, `{"include_usage":true}`},
		{"already asked", `{"messages":[],"stream":true,"stream_options":{"include_usage":true}}`, false, ""},
		{"client said false", `{"messages":[],"stream":true,"stream_options":{"include_usage":false}}`, false, ""},
		{"not streaming", `{"messages":[],"stream":false}`, false, ""},
		{"no stream field", `{"messages":[]}`, false, ""},
		{"responses API", `{"model":"gpt-4.1","input":"hi","stream":true}`, false, ""},
		{"not JSON", `stream=true`, false, ""},
		{"array", `[{"stream":true}]`, false, ""},
		{"bad options", `{"messages":[],"stream":true,"stream_options":7}`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed := IncludeUsage([]byte(tc.in))
			if changed != tc.changed {
				t.Fatalf("changed %v, want %v: %s", changed, tc.changed, out)
			}
			if !changed {
				if string(out) != tc.in {
					t.Fatalf("unchanged body rewritten: %s", out)
				}
				return
			}
			var before, after map[string]json.RawMessage
			if json.Unmarshal([]byte(tc.in), &before) != nil || json.Unmarshal(out, &after) != nil {
				t.Fatalf("not JSON: %s", out)
			}
			if string(after["stream_options"]) != tc.opts {
				t.Fatalf("stream_options %s, want %s", after["stream_options"], tc.opts)
			}
			for k, v := range before {
				if k != "stream_options" && string(after[k]) != string(v) {
					t.Fatalf("field %s: %s, want %s", k, after[k], v)
				}
			}
		})
	}
}
