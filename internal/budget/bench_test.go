package budget

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkMeterStream meters a long Anthropic event stream of small text deltas, as a model writes
// them, fed in 4 KiB writes: the meter's own cost per byte, which the interceptor pays on the
// answer's path (bench: BenchmarkMeteredStream in internal/egress/intercept for the whole path).
func BenchmarkMeterStream(b *testing.B) {
	const deltas = 1 << 16
	var sb strings.Builder
	sb.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1000,\"cache_read_input_tokens\":500,\"cache_creation_input_tokens\":10,\"output_tokens\":1}}}\n\n")
	for i := range deltas {
		fmt.Fprintf(&sb, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"The quick brown fox jumps over the lazy dog, again and again %d. \"}}\n\n", i)
	}
	fmt.Fprintf(&sb, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":%d}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", deltas)
	stream := []byte(sb.String())
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		m := NewMeter(Anthropic, "text/event-stream")
		for p := stream; len(p) > 0; {
			n := min(len(p), 4<<10)
			m.Write(p[:n])
			p = p[n:]
		}
		if u := m.Usage(); !u.Known || u.Output != deltas || u.Input != 1000 {
			b.Fatalf("usage %+v", u)
		}
	}
}
