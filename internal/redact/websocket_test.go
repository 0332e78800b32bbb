package redact

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// serverFrame encodes one unmasked frame, as a server sends it, with the shortest length form
// unless long is set (then the 64-bit form).
func serverFrame(fin bool, op byte, payload []byte, long bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var b []byte
	switch n := len(payload); {
	case long:
		b = binary.BigEndian.AppendUint64([]byte{b0, 127}, uint64(n))
	case n < 126:
		b = []byte{b0, byte(n)}
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16([]byte{b0, 126}, uint16(n))
	default:
		b = binary.BigEndian.AppendUint64([]byte{b0, 127}, uint64(n))
	}
	return append(b, payload...)
}

// frameOf is one frame for a test: its payload, and how it is framed.
type frameOf struct {
	fin  bool
	op   byte
	text string
	long bool
}

func frames(fs ...frameOf) []byte {
	var b []byte
	for _, f := range fs {
		b = append(b, serverFrame(f.fin, f.op, []byte(f.text), f.long)...)
	}
	return b
}

// TestWebsocketFrames: a value in one frame, split across two frames of a message (with a control
// frame between them), across two messages, or in a frame with a 16- or 64-bit length is replaced,
// and the frames keep their headers, whatever the reads beneath cut.
func TestWebsocketFrames(t *testing.T) {
	s, ph := oracleSecret, oraclePH
	long := strings.Repeat("x", 300)
	tests := []struct {
		name     string
		in, want []byte
	}{
		{"one frame", frames(frameOf{true, 1, "hello " + s, false}), frames(frameOf{true, 1, "hello " + ph, false})},
		{"split across fragments",
			frames(frameOf{false, 1, "a " + s[:5], false}, frameOf{true, 0, s[5:] + " b", false}),
			frames(frameOf{false, 1, "a " + ph[:5], false}, frameOf{true, 0, ph[5:] + " b", false})},
		{"a ping between the fragments",
			frames(frameOf{false, 2, s[:10], false}, frameOf{true, 9, "", false}, frameOf{true, 0, s[10:], false}),
			frames(frameOf{false, 2, ph[:10], false}, frameOf{true, 9, "", false}, frameOf{true, 0, ph[10:], false})},
		{"across two messages, one byte each",
			frames(frameOf{true, 1, s[:len(s)-1], false}, frameOf{true, 1, s[len(s)-1:], false}),
			frames(frameOf{true, 1, ph[:len(ph)-1], false}, frameOf{true, 1, ph[len(ph)-1:], false})},
		{"16-bit length", frames(frameOf{true, 1, long + s + long, false}), frames(frameOf{true, 1, long + ph + long, false})},
		{"64-bit length", frames(frameOf{true, 2, s + long, true}), frames(frameOf{true, 2, ph + long, true})},
		{"in a close frame's reason", frames(frameOf{true, 8, "\x03\xe8" + s, false}), frames(frameOf{true, 8, "\x03\xe8" + ph, false})},
		{"none", frames(frameOf{true, 1, "sk-ant-RE", false}, frameOf{true, 1, "nothing", false}), frames(frameOf{true, 1, "sk-ant-RE", false}, frameOf{true, 1, "nothing", false})},
	}
	for _, tc := range tests {
		for _, idle := range []time.Duration{0, time.Hour} {
			for _, sizes := range [][]int{nil, {1}, {2, 3}, {7}} {
				rd, err := New([]Pair{{s, ph}}).WebsocketReader(&chunked{s: string(tc.in), sizes: sizes}, idle)
				if err != nil {
					t.Fatal(err)
				}
				got, err := readSized(rd, []int{5, 64})
				rd.Close()
				if err != nil || !bytes.Equal(got, tc.want) {
					t.Errorf("%s (reads of %v, idle %v): %q, %v; want %q", tc.name, sizes, idle, got, err, tc.want)
				}
			}
		}
	}
}

// TestWebsocketRefused: frames that cannot be searched end the stream after the frames before them,
// and a replacement of another length is refused at the start.
func TestWebsocketRefused(t *testing.T) {
	ok := frames(frameOf{true, 1, "fine", false})
	for name, bad := range map[string][]byte{
		"masked":     {0x81, 0x84, 1, 2, 3, 4, 'a', 'b', 'c', 'd'},
		"compressed": {0xc1, 0x02, 'h', 'i'},
		"RSV3":       {0x91, 0x00},
		"huge":       append([]byte{0x82, 127}, 0x80, 0, 0, 0, 0, 0, 0, 0),
	} {
		rd, err := New([]Pair{{"secret", "XXXXXX"}}).WebsocketReader(bytes.NewReader(append(append([]byte{}, ok...), bad...)), 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rd)
		if !errors.Is(err, ErrWebsocketFrame) || !bytes.Equal(got, ok) {
			t.Errorf("%s: %q, %v; want the frame before it, then ErrWebsocketFrame", name, got, err)
		}
	}
	if _, err := New([]Pair{{"secret", "longer placeholder"}}).WebsocketReader(bytes.NewReader(ok), 0); err == nil {
		t.Error("a replacement of another length was accepted for a websocket")
	}
}

// TestWebsocketOracle: a websocket echo that reflects the agent's text gives it the same bytes, at
// the same time, for a prefix of the secret and for another string: the frame's header and all but
// the last Hold payload bytes at once, the rest after the idle delay.
func TestWebsocketOracle(t *testing.T) {
	const idle = 40 * time.Millisecond
	red := New([]Pair{{oracleSecret, oraclePH}})
	for _, g := range guesses() {
		var seen [2]int
		for i, text := range g {
			pr, pw := io.Pipe()
			rd, err := red.WebsocketReader(pr, idle)
			if err != nil {
				t.Fatal(err)
			}
			frame := serverFrame(true, 1, []byte("you said: "+text), false)
			start := time.Now()
			first := step(t, pw, rd, string(frame))
			seen[i] = len(first)
			if want := 2 + max(0, len(frame)-2-red.Hold()); len(first) != want {
				t.Errorf("after a frame of %q the reader got %d bytes first, want %d", text, len(first), want)
			}
			if len(first) < len(frame) {
				rest := make([]byte, 64)
				n, err := rd.Read(rest)
				if err != nil || len(first)+n != len(frame) || time.Since(start) < idle {
					t.Errorf("the rest of a frame of %q: %d bytes after %v, %v", text, n, time.Since(start), err)
				}
			}
			pw.Close()
			rd.Close()
		}
		if seen[0] != seen[1] {
			t.Errorf("a prefix of the secret (%q) and another string were given %d and %d bytes", g[0], seen[0], seen[1])
		}
	}
}

// FuzzWebsocket: for any payloads cut into frames of any kinds and lengths, read in pieces of any
// size, the frames come out with their headers unchanged and their payloads, taken together, as
// strings.Replacer makes them; and how much each Read gives is the same when every payload byte is
// replaced by one that begins no secret (the hold depends on no byte's value).
func FuzzWebsocket(f *testing.F) {
	f.Add("hello secret world", "secret", "XXXXXX", []byte{3, 200, 1}, []byte{1, 5}, []byte{64})
	f.Add("secretsecret", "secret", "SECRET", []byte{0, 1, 2, 9}, []byte{1}, []byte{1})
	f.Add("", "s", "t", []byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, payload, secret, rep string, cuts, sizes, bufs []byte) {
		if len(secret) == 0 || len(secret) > 64 {
			return
		}
		rep = (rep + strings.Repeat("#", len(secret)))[:len(secret)]
		red := New([]Pair{{secret, rep}})
		// Cut payload into frames; a cut's low bits choose the opcode and the length form.
		build := func(p string) ([]byte, []int) {
			var b []byte
			var hdrAt []int
			for i := 0; len(p) > 0 || i == 0; i++ {
				n := len(p)
				var c byte
				if len(cuts) > 0 && i < 64 {
					c = cuts[i%len(cuts)]
					n = min(n, int(c>>2))
				}
				hdrAt = append(hdrAt, len(b))
				b = append(b, serverFrame(c&1 == 0, []byte{1, 0, 9, 2}[c&3], []byte(p[:n]), c&2 != 0)...)
				p = p[n:]
			}
			return b, hdrAt
		}
		in, _ := build(payload)
		var sz, bz []int
		for _, b := range sizes {
			sz = append(sz, int(b))
		}
		for _, b := range bufs {
			bz = append(bz, int(b))
		}
		counts := func(in []byte) ([]byte, []int) {
			rd, err := red.WebsocketReader(&chunked{s: string(in), sizes: sz}, 0)
			if err != nil {
				t.Fatal(err)
			}
			var out []byte
			var ns []int
			for i := 0; ; i++ {
				n := 4096
				if len(bz) > 0 {
					n = max(1, bz[i%len(bz)])
				}
				buf := make([]byte, n)
				k, err := rd.Read(buf)
				out = append(out, buf[:k]...)
				ns = append(ns, k)
				if err == io.EOF {
					return out, ns
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		got, ns := counts(in)
		// The frames' payloads, read back, are the reference's.
		var pay []byte
		rest := got
		for len(rest) > 0 {
			n := int(rest[1] & 0x7f)
			h := 2
			switch n {
			case 126:
				n, h = int(binary.BigEndian.Uint16(rest[2:4])), 4
			case 127:
				n, h = int(binary.BigEndian.Uint64(rest[2:10])), 10
			}
			pay = append(pay, rest[h:h+n]...)
			rest = rest[h+n:]
		}
		if want := reference([]Pair{{secret, rep}}, payload); string(pay) != want {
			t.Fatalf("payloads %q, want %q", pay, want)
		}
		if len(got) != len(in) {
			t.Fatalf("%d bytes in, %d out", len(in), len(got))
		}
		filler := byte(0)
		for strings.IndexByte(secret, filler) >= 0 {
			filler++
		}
		fin, _ := build(strings.Repeat(string(filler), len(payload)))
		if _, fns := counts(fin); !slicesEqual(ns, fns) {
			t.Fatalf("reads gave %v bytes, %v for the same frames without the secret's bytes", ns, fns)
		}
	})
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
