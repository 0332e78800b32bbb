package redact

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// oracleSecret is long enough that its prefixes are worth guessing one character at a time.
const (
	oracleSecret = "sk-ant-REALKEY-0123456789"
	oraclePH     = "sk-ant-PLACEHO-LDERXXXXXX"
)

// guesses are what an agent that makes the host reflect its text would send to learn the secret:
// prefixes of it, each beside a string of the same length that begins no secret. Whatever the
// reader is given, and when, must be the same for both of a pair.
func guesses() [][2]string {
	var gs [][2]string
	for _, k := range []int{1, 7, 8, 12, len(oracleSecret) - 1} {
		gs = append(gs, [2]string{oracleSecret[:k], strings.Repeat("q", k)})
	}
	return gs
}

// step writes b to pw and returns what a Read of rd gives next.
func step(t *testing.T, pw *io.PipeWriter, rd io.Reader, b string) string {
	t.Helper()
	go pw.Write([]byte(b))
	buf := make([]byte, 4096)
	n, err := rd.Read(buf)
	if err != nil {
		t.Fatalf("after writing %q: %v", b, err)
	}
	return string(buf[:n])
}

// TestHeldTailIsConstant: the bytes held back after a read are the last Hold, whether they begin the
// secret or not (the oracle: before, a tail that began the secret was held and any other was not).
func TestHeldTailIsConstant(t *testing.T) {
	red := New([]Pair{{oracleSecret, oraclePH}})
	hold := red.Hold()
	for _, g := range guesses() {
		var seen [2]string
		for i, text := range g {
			pr, pw := io.Pipe()
			rd := red.Reader(pr, 0)
			msg := "event: delta\ndata: {\"text\": \"" + text // what the host reflects, as an event stream
			seen[i] = step(t, pw, rd, msg)
			if want := msg[:len(msg)-hold]; seen[i] != want {
				t.Errorf("after %q the reader got %q, want all but the last %d bytes", msg, seen[i], hold)
			}
			// The next bytes decide: the held tail goes on as it turns out.
			rest := step(t, pw, rd, "\"}\n\n"+strings.Repeat(" ", hold))
			if got := seen[i] + rest; got != (msg + "\"}\n\n")[:len(seen[i])+len(rest)] {
				t.Errorf("stream of %q continued as %q", text, got)
			}
			pw.Close()
		}
		if seen[0] != strings.Replace(seen[1], g[1], g[0], 1) {
			t.Errorf("a prefix of the secret (%q) and another string (%q) were treated differently: %q, %q", g[0], g[1], seen[0], seen[1])
		}
	}
	// Shorter than the hold: nothing yet, for either.
	pr, pw := io.Pipe()
	rd := red.Reader(pr, 0)
	go pw.Write([]byte("sk-"))
	got := make(chan int, 1)
	go func() { n, _ := rd.Read(make([]byte, 64)); got <- n }()
	select {
	case n := <-got:
		t.Fatalf("a read returned %d bytes of 3 with a hold of %d", n, hold)
	case <-time.After(50 * time.Millisecond):
	}
	pw.Close()
	if n := <-got; n != 3 {
		t.Fatalf("at the end the read gave %d bytes, want 3", n)
	}
}

// TestReleaseAfterIdle: with a release, the held tail goes idle after it arrived whatever it is
// (never sooner), the stream goes on, a secret split across a shorter pause is still replaced, and
// prefixes of the secret and other strings are given the same bytes.
func TestReleaseAfterIdle(t *testing.T) {
	const idle = 40 * time.Millisecond
	red := New([]Pair{{oracleSecret, oraclePH}})
	hold := red.Hold()
	for _, g := range guesses() {
		var seen [2]string
		for i, text := range g {
			pr, pw := io.Pipe()
			rd := red.Reader(pr, idle)
			msg := "data: " + text
			start := time.Now()
			first := step(t, pw, rd, msg)
			if want := msg[:max(0, len(msg)-hold)]; len(msg) > hold && first != want {
				t.Errorf("after %q the reader got %q first, want %q", msg, first, want)
			}
			second := first
			if len(msg) > hold {
				buf := make([]byte, 64)
				n, err := rd.Read(buf) // nothing more is written: only the release ends this
				if err != nil {
					t.Fatal(err)
				}
				second = string(buf[:n])
			}
			if elapsed := time.Since(start); elapsed < idle {
				t.Errorf("the held tail of %q went after %v, before the idle %v", msg, elapsed, idle)
			}
			seen[i] = first + "|" + second
			if len(msg) > hold && first+second != msg || len(msg) <= hold && first != msg {
				t.Errorf("%q came out as %q then %q", msg, first, second)
			}
			pw.Close()
			rd.Close()
		}
		if seen[0] != strings.ReplaceAll(seen[1], g[1], g[0]) && strings.ReplaceAll(seen[0], g[0], g[1]) != seen[1] {
			t.Errorf("a prefix of the secret and another string were given differently: %q, %q", seen[0], seen[1])
		}
	}

	// A secret split across a pause shorter than idle is found; the stream then goes on.
	pr, pw := io.Pipe()
	rd := red.Reader(pr, time.Hour)
	defer rd.Close()
	go func() {
		pw.Write([]byte("key " + oracleSecret[:9]))
		time.Sleep(5 * time.Millisecond)
		pw.Write([]byte(oracleSecret[9:] + " ok"))
		pw.Close()
	}()
	if got := readAll(t, rd); got != "key "+oraclePH+" ok" {
		t.Fatalf("a secret split across a short pause came out as %q", got)
	}
}

// TestAsyncClose: Close ends a Read that waits, and the read-ahead stops with the source.
func TestAsyncClose(t *testing.T) {
	pr, pw := io.Pipe()
	rd := New([]Pair{{"secret", "XXXXXX"}}).Reader(pr, time.Hour)
	done := make(chan error, 1)
	go func() { _, err := rd.Read(make([]byte, 8)); done <- err }()
	time.Sleep(10 * time.Millisecond)
	rd.Close()
	pr.Close()
	if err := <-done; err != ErrClosed {
		t.Fatalf("Read after Close: %v", err)
	}
	pw.Close()
}

// signalReader reports its first Read on read, then reads r.
type signalReader struct {
	r    io.Reader
	read chan struct{}
	once bool
}

func (s *signalReader) Read(p []byte) (int, error) {
	if !s.once {
		s.once = true
		close(s.read)
	}
	return s.r.Read(p)
}

// TestAsyncReadsNothingBeforeTheFirstRead: the read-ahead starts with the caller's first Read.
// httputil.ReverseProxy reads an answer's res.Trailer (to announce it) after the body's reader is
// made and before it reads the body, and the body's end fills that map in: a read ahead from the
// start wrote it under the proxy's read (a data race, seen under -race in intercept's
// TestAnswerSplits; unsynchronised map access can end the gateway's process). A Read after Close,
// the read-ahead never started, reads nothing either.
func TestAsyncReadsNothingBeforeTheFirstRead(t *testing.T) {
	src := &signalReader{r: strings.NewReader("a secret"), read: make(chan struct{})}
	rd := New([]Pair{{"secret", "XXXXXX"}}).Reader(src, time.Hour)
	defer rd.Close()
	select {
	case <-src.read:
		t.Fatal("the source was read before the reader's first Read")
	case <-time.After(100 * time.Millisecond):
	}
	if b, err := io.ReadAll(rd); err != nil || string(b) != "a XXXXXX" {
		t.Fatalf("got %q, %v", b, err)
	}

	src = &signalReader{r: strings.NewReader("a secret"), read: make(chan struct{})}
	rd = New([]Pair{{"secret", "XXXXXX"}}).Reader(src, time.Hour)
	rd.Close()
	if _, err := rd.Read(make([]byte, 8)); err != ErrClosed {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}
	select {
	case <-src.read:
		t.Fatal("a Read after Close read the source")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestAsyncErrors: the source's error comes after the bytes before it, with or without a release.
func TestAsyncErrors(t *testing.T) {
	src := io.MultiReader(strings.NewReader("a secre"), strings.NewReader("t and more"))
	rd := New([]Pair{{"secret", "XXXXXX"}}).Reader(src, time.Hour)
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(b, []byte("a XXXXXX and more")) {
		t.Fatalf("got %q, %v", b, err)
	}
	boom := errors.New("boom")
	rd = New([]Pair{{"secret", "XXXXXX"}}).Reader(io.MultiReader(strings.NewReader("a secre"), iotest.ErrReader(boom)), time.Hour)
	defer rd.Close()
	if b, err := io.ReadAll(rd); !errors.Is(err, boom) || string(b) != "a secre" {
		t.Fatalf("got %q, %v; want the bytes before the error, then the error", b, err)
	}
	// testing/iotest's checks of the io.Reader contract.
	rd = New([]Pair{{"ab", "XY"}}).Reader(strings.NewReader("xxabyyab"), time.Hour)
	defer rd.Close()
	if err := iotest.TestReader(rd, []byte("xxXYyyXY")); err != nil {
		t.Fatal(err)
	}
}

// FuzzHold: for replacements as long as their secrets, how much each Read gives (the sizes of the
// source's reads and the reader's buffers fixed) is the same whatever the bytes are: the input and a
// filler of the same length that holds no secret give the same counts. Before the end nothing of
// the last Hold bytes read from the source is given.
func FuzzHold(f *testing.F) {
	f.Add("xx sk-ant-REALKEY yy", "sk-ant-REALKEY-0123456789", "ret", []byte{1, 2, 3}, []byte{64})
	f.Add("aaaa", "aa", "a", []byte{1}, []byte{1, 200})
	f.Add("data: sk-ant-RE", "sk-ant-REALKEY-0123456789", "", []byte{7}, []byte{})
	f.Fuzz(func(t *testing.T, in, s1, s2 string, sizes, bufs []byte) {
		pairs := []Pair{{s1, strings.Repeat("#", len(s1))}, {s2, strings.Repeat("%", len(s2))}}
		r := New(pairs)
		if r == nil {
			return
		}
		var sz, bz []int
		for _, b := range sizes {
			sz = append(sz, int(b))
		}
		for _, b := range bufs {
			bz = append(bz, int(b))
		}
		counts := func(in string) []int {
			src := &chunked{s: in, sizes: sz}
			rd := r.Reader(src, 0)
			var ns []int
			given := 0
			for i := 0; ; i++ {
				n := 4096
				if len(bz) > 0 {
					n = max(1, bz[i%len(bz)])
				}
				k, err := rd.Read(make([]byte, n))
				given += k
				ns = append(ns, k)
				if err == io.EOF {
					return ns
				}
				if err != nil {
					t.Fatal(err)
				}
				if read := len(in) - len(src.s); src.s != "" && given > read-r.Hold() {
					t.Fatalf("%d bytes given of %d read, with a hold of %d", given, read, r.Hold())
				}
			}
		}
		filler := byte(0)
		for strings.IndexByte(s1+s2, filler) >= 0 {
			filler++
		}
		if a, b := counts(in), counts(strings.Repeat(string(filler), len(in))); !slicesEqual(a, b) {
			t.Fatalf("reads of %q gave %v bytes, of a filler %v", in, a, b)
		}
	})
}
