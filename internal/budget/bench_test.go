package budget

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkMeterStream meters a long event stream of small text deltas, as a model writes them, fed
// in 4 KiB writes: the meter's own cost per byte, which the interceptor pays on the answer's path
// (bench: BenchmarkMeteredStream in internal/egress/intercept for the whole path). anthropic is a
// Messages stream; openai-chat a chat completions stream asked for its usage, whose every chunk
// carries "usage":null.
func BenchmarkMeterStream(b *testing.B) {
	const deltas = 1 << 16
	var anthropic, openai strings.Builder
	anthropic.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1000,\"cache_read_input_tokens\":500,\"cache_creation_input_tokens\":10,\"output_tokens\":1}}}\n\n")
	for i := range deltas {
		fmt.Fprintf(&anthropic, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"The quick brown fox jumps over the lazy dog, again and again %d. \"}}\n\n", i)
		fmt.Fprintf(&openai, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The quick brown fox jumps over the lazy dog, again and again %d. \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", i)
	}
	fmt.Fprintf(&anthropic, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":%d}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", deltas)
	fmt.Fprintf(&openai, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1500,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":500}}}\n\ndata: [DONE]\n\n", deltas)
	for _, tc := range []struct {
		name   string
		api    API
		stream string
	}{{"anthropic", Anthropic, anthropic.String()}, {"openai-chat", OpenAI, openai.String()}} {
		b.Run(tc.name, func(b *testing.B) {
			stream := []byte(tc.stream)
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				m := NewMeter(tc.api, "text/event-stream")
				for p := stream; len(p) > 0; {
					n := min(len(p), 4<<10)
					m.Write(p[:n])
					p = p[n:]
				}
				if u := m.Usage(); !u.Known || u.Output != deltas || u.Input != 1000 || u.CacheRead != 500 {
					b.Fatalf("usage %+v", u)
				}
			}
		})
	}
}
