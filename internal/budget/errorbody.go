package budget

import (
	"bytes"
	"encoding/json"
)

// RetryHeader is the answer header both APIs' official clients obey over their own retry rules:
// a refusal sets it to "false", or the client would retry a 429 with backoff for minutes instead
// of showing the reason.
const RetryHeader = "X-Should-Retry"

// ErrorBody is a 429 answer's body in the API's own error format, so the agent's own client parses
// it and shows msg: Anthropic {"type":"error","error":{"type":"rate_limit_error","message":...}};
// OpenAI (and "") {"error":{"message":...,"type":"insufficient_quota","param":null,
// "code":"cordon_budget"}}. contentType is the answer's Content-Type.
func ErrorBody(api API, msg string) (contentType string, body []byte) {
	var v any
	if api == Anthropic {
		v = struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}{Type: "error", Error: struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}{"rate_limit_error", msg}}
	} else {
		type detail struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		}
		v = struct {
			Error detail `json:"error"`
		}{detail{Message: msg, Type: "insufficient_quota", Code: "cordon_budget"}}
	}
	return "application/json", marshal(v)
}

// marshal is json.Marshal without HTML escaping (the bytes stay as the client sent or expects
// them) and without the Encoder's trailing newline. Its values always marshal.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// IncludeUsage rewrites an OpenAI chat completions streaming request body (JSON with "messages",
// "stream": true and no stream_options.include_usage) to ask for the final usage chunk, without
// which a stream reports no usage; it says whether it changed the body. Other bodies — not JSON,
// not streaming, the Responses API (which always reports usage and rejects the option), a client
// that set include_usage itself, even to false — come back unchanged. The other fields keep their
// values; their order may change.
func IncludeUsage(body []byte) ([]byte, bool) {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil || req == nil {
		return body, false
	}
	var stream bool
	if json.Unmarshal(req["stream"], &stream) != nil || !stream {
		return body, false
	}
	if _, ok := req["messages"]; !ok {
		return body, false
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := req["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			return body, false
		}
		if _, set := opts["include_usage"]; set {
			return body, false
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	req["stream_options"] = marshal(opts)
	out := marshal(req)
	if out == nil {
		return body, false
	}
	return out, true
}
