package fakeapi

import "net/http"

// The Anthropic Messages API: https://docs.anthropic.com/en/api/messages and its streaming events.

func anthropicUsage(u Usage, output int64) obj {
	return obj{"input_tokens": u.Input, "output_tokens": output,
		"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead}
}

func anthropicJSON(w http.ResponseWriter, a Answer) bool {
	m := obj{"id": "msg_fake01", "type": "message", "role": "assistant", "model": "claude-fake",
		"content":     []obj{{"type": "text", "text": a.Text}},
		"stop_reason": "end_turn", "stop_sequence": nil}
	if !a.NoUsage {
		m["usage"] = anthropicUsage(a.Usage, a.Usage.Output)
	}
	writeJSON(w, m)
	return !a.NoUsage
}

// anthropicSSE streams as the API does: message_start carries the input side of usage (and a first
// output count), message_delta the final, cumulative output_tokens.
func anthropicSSE(w http.ResponseWriter, a Answer) bool {
	send := sse(w)
	msg := obj{"id": "msg_fake01", "type": "message", "role": "assistant", "model": "claude-fake",
		"content": []obj{}, "stop_reason": nil, "stop_sequence": nil}
	if !a.NoUsage {
		msg["usage"] = anthropicUsage(a.Usage, 1)
	}
	send("message_start", obj{"type": "message_start", "message": msg})
	send("content_block_start", obj{"type": "content_block_start", "index": 0, "content_block": obj{"type": "text", "text": ""}})
	send("ping", obj{"type": "ping"})
	for _, p := range pieces(a.Text, a.Deltas) {
		send("content_block_delta", obj{"type": "content_block_delta", "index": 0, "delta": obj{"type": "text_delta", "text": p}})
	}
	send("content_block_stop", obj{"type": "content_block_stop", "index": 0})
	delta := obj{"type": "message_delta", "delta": obj{"stop_reason": "end_turn", "stop_sequence": nil}}
	if !a.NoUsage {
		delta["usage"] = obj{"output_tokens": a.Usage.Output}
	}
	send("message_delta", delta)
	send("message_stop", obj{"type": "message_stop"})
	return !a.NoUsage
}
