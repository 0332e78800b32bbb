package fakeapi

import "net/http"

// OpenAI's chat completions (https://platform.openai.com/docs/api-reference/chat) and responses
// (https://platform.openai.com/docs/api-reference/responses) APIs, JSON and streamed.

const created = 1764590000

func chatUsage(u Usage) obj {
	return obj{"prompt_tokens": u.Input + u.CacheRead, "completion_tokens": u.Output,
		"total_tokens":          u.Input + u.CacheRead + u.Output,
		"prompt_tokens_details": obj{"cached_tokens": u.CacheRead}}
}

func chatJSON(w http.ResponseWriter, a Answer) bool {
	c := obj{"id": "chatcmpl-fake01", "object": "chat.completion", "created": created, "model": "gpt-fake",
		"choices": []obj{{"index": 0, "message": obj{"role": "assistant", "content": a.Text}, "finish_reason": "stop"}}}
	if !a.NoUsage {
		c["usage"] = chatUsage(a.Usage)
	}
	writeJSON(w, c)
	return !a.NoUsage
}

// chatSSE streams chunks and, only when the request asked with stream_options.include_usage (as the
// real API does), a last chunk with empty choices carrying usage; then "data: [DONE]".
func chatSSE(w http.ResponseWriter, a Answer, includeUsage bool) bool {
	send := sse(w)
	chunk := func(choices []obj) obj {
		c := obj{"id": "chatcmpl-fake01", "object": "chat.completion.chunk", "created": created, "model": "gpt-fake", "choices": choices}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	send("", chunk([]obj{{"index": 0, "delta": obj{"role": "assistant", "content": ""}, "finish_reason": nil}}))
	for _, p := range pieces(a.Text, a.Deltas) {
		send("", chunk([]obj{{"index": 0, "delta": obj{"content": p}, "finish_reason": nil}}))
	}
	send("", chunk([]obj{{"index": 0, "delta": obj{}, "finish_reason": "stop"}}))
	sent := includeUsage && !a.NoUsage
	if sent {
		last := chunk([]obj{})
		last["usage"] = chatUsage(a.Usage)
		send("", last)
	}
	send("", "[DONE]")
	return sent
}

func responsesUsage(u Usage) obj {
	return obj{"input_tokens": u.Input + u.CacheRead, "input_tokens_details": obj{"cached_tokens": u.CacheRead},
		"output_tokens": u.Output, "output_tokens_details": obj{"reasoning_tokens": 0},
		"total_tokens": u.Input + u.CacheRead + u.Output}
}

func response(a Answer, status string, usage bool) obj {
	r := obj{"id": "resp_fake01", "object": "response", "created_at": created, "status": status, "model": "gpt-fake", "output": []obj{}, "usage": nil}
	if status == "completed" {
		r["output"] = []obj{{"type": "message", "id": "msg_fake01", "status": "completed", "role": "assistant",
			"content": []obj{{"type": "output_text", "text": a.Text, "annotations": []obj{}}}}}
	}
	if usage {
		r["usage"] = responsesUsage(a.Usage)
	}
	return r
}

func responsesJSON(w http.ResponseWriter, a Answer) bool {
	writeJSON(w, response(a, "completed", !a.NoUsage))
	return !a.NoUsage
}

// responsesSSE streams typed events; usage arrives in response.completed.
func responsesSSE(w http.ResponseWriter, a Answer) bool {
	send := sse(w)
	seq := 0
	ev := func(typ string, fields obj) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		send(typ, fields)
	}
	ev("response.created", obj{"response": response(a, "in_progress", false)})
	for _, p := range pieces(a.Text, a.Deltas) {
		ev("response.output_text.delta", obj{"item_id": "msg_fake01", "output_index": 0, "content_index": 0, "delta": p})
	}
	ev("response.output_text.done", obj{"item_id": "msg_fake01", "output_index": 0, "content_index": 0, "text": a.Text})
	ev("response.completed", obj{"response": response(a, "completed", !a.NoUsage)})
	return !a.NoUsage
}
