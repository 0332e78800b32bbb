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

// reference is what every method must agree with: strings.Replacer with the longest secrets first
// replaces leftmost-longest.
func reference(pairs []Pair, s string) string {
	r := New(pairs)
	if r == nil {
		return s
	}
	var args []string
	for _, p := range r.pairs {
		args = append(args, p.Secret, p.Replacement)
	}
	return strings.NewReplacer(args...).Replace(s)
}

// chunked returns s as a reader whose reads return at most the given sizes, in turn.
type chunked struct {
	s     string
	sizes []int
	i     int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := len(c.s)
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = min(n, len(p), len(c.s))
	copy(p, c.s[:n])
	c.s = c.s[n:]
	return n, nil
}

// readSized reads r to its end with buffers of the given sizes, in turn (each at least 1).
func readSized(r io.Reader, sizes []int) ([]byte, error) {
	var out []byte
	for i := 0; ; i++ {
		n := 4096
		if len(sizes) > 0 {
			n = max(1, sizes[i%len(sizes)])
		}
		buf := make([]byte, n)
		k, err := r.Read(buf)
		out = append(out, buf[:k]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func readAll(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReplace(t *testing.T) {
	tok := Pair{"ghs_REALREALREALREAL", "ghs_PLACEHOLDERXXXXX"}
	tests := []struct {
		name  string
		pairs []Pair
		in    string
		want  string
		count int64
	}{
		{"none", []Pair{tok}, "nothing here", "nothing here", 0},
		{"one", []Pair{tok}, "token ghs_REALREALREALREAL.", "token ghs_PLACEHOLDERXXXXX.", 1},
		{"twice, adjacent", []Pair{tok}, tok.Secret + tok.Secret, tok.Replacement + tok.Replacement, 2},
		{"at both ends", []Pair{{"ab", "XY"}}, "ab--ab", "XY--XY", 2},
		{"leftmost wins", []Pair{{"bcd", "1"}, {"abc", "2"}}, "abcd", "2d", 1},
		{"longest at the same start", []Pair{{"ab", "1"}, {"abcd", "2"}}, "abcde", "2e", 1},
		{"no overlap after a match", []Pair{{"aa", "b"}}, "aaa", "ba", 1},
		{"longer replacement", []Pair{{"k", "LONGER"}}, "a k b", "a LONGER b", 1},
		{"empty secret ignored", []Pair{{"", "x"}}, "abc", "abc", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := reference(tc.pairs, tc.in); got != tc.want {
				t.Fatalf("reference %q, want %q (the test is wrong)", got, tc.want)
			}
			r := New(tc.pairs)
			if got := r.String(tc.in); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
			if r.Count() != tc.count {
				t.Errorf("Count after String = %d, want %d", r.Count(), tc.count)
			}
			for _, sizes := range [][]int{nil, {1}, {2, 3}, {7}} {
				for _, bufs := range [][]int{nil, {1}, {3, 64}} {
					r := New(tc.pairs)
					got, err := readSized(r.Reader(&chunked{s: tc.in, sizes: sizes}, 0), bufs)
					if err != nil || string(got) != tc.want {
						t.Errorf("Reader with source reads of %v, buffers of %v = %q, %v; want %q", sizes, bufs, got, err, tc.want)
					}
					if r.Count() != tc.count {
						t.Errorf("Count after Reader = %d, want %d", r.Count(), tc.count)
					}
				}
			}
		})
	}
}

// TestSecretAcrossReads: a secret split over two reads of the source, at every split point, is
// still replaced (the attack: an upstream that writes the credential in two TCP segments).
func TestSecretAcrossReads(t *testing.T) {
	p := Pair{"sk-ant-REALKEY-0123456789", "sk-ant-PLACEHO-LDERXXXXXX"}
	body := "{\"echo\": \"" + p.Secret + "\"}"
	for cut := 1; cut < len(body); cut++ {
		src := io.MultiReader(strings.NewReader(body[:cut]), strings.NewReader(body[cut:]))
		got := readAll(t, New([]Pair{p}).Reader(src, 0))
		if strings.Contains(got, p.Secret) || got != strings.Replace(body, p.Secret, p.Replacement, 1) {
			t.Fatalf("split at %d: %q", cut, got)
		}
	}
}

func TestReaderPassesErrors(t *testing.T) {
	boom := errors.New("boom")
	r := New([]Pair{{"secret", "XXXXXX"}})
	src := io.MultiReader(strings.NewReader("a secre"), iotest.ErrReader(boom))
	b, err := io.ReadAll(r.Reader(src, 0))
	if !errors.Is(err, boom) || string(b) != "a secre" {
		t.Fatalf("got %q, %v; want the bytes before the error, then the error", b, err)
	}
	// testing/iotest's checks of the io.Reader contract.
	if err := iotest.TestReader(New([]Pair{{"ab", "XY"}}).Reader(strings.NewReader("xxabyyab"), 0), []byte("xxXYyyXY")); err != nil {
		t.Fatal(err)
	}
}

func TestNil(t *testing.T) {
	var r *Replacer = New(nil)
	if r != nil || r.String("x") != "x" || !r.SameLength() || r.Count() != 0 {
		t.Fatal("a Replacer with no secrets must replace nothing")
	}
	if got := readAll(t, r.Reader(strings.NewReader("x"), time.Second)); got != "x" || r.Hold() != 0 {
		t.Fatal("a nil Replacer's Reader must be its source")
	}
}

func TestSameLength(t *testing.T) {
	if !New([]Pair{{"abc", "xyz"}}).SameLength() || New([]Pair{{"abc", "xyz"}, {"k", "kk"}}).SameLength() {
		t.Fatal("SameLength")
	}
}

// FuzzReader: for any input, secrets and read sizes, the stream and String agree with
// strings.Replacer, and no secret survives unless a replacement recreates one.
func FuzzReader(f *testing.F) {
	f.Add("xx secret yy secretsecret", "secret", "REDACT", "ret", "R", []byte{1, 2, 3}, []byte{64})
	f.Add("aaaa", "aa", "b", "a", "c", []byte{1}, []byte{1, 200})
	f.Add("", "s", "t", "", "", []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, in, s1, r1, s2, r2 string, sizes, bufs []byte) {
		pairs := []Pair{{s1, r1}, {s2, r2}}
		want := reference(pairs, in)
		r := New(pairs)
		if got := r.String(in); got != want {
			t.Fatalf("String(%q) = %q, want %q", in, got, want)
		}
		var sz []int
		for _, b := range sizes {
			sz = append(sz, int(b))
		}
		var bz []int
		for _, b := range bufs {
			bz = append(bz, int(b))
		}
		// Without a release and with one (a goroutine reading ahead; an hour never passes here).
		for _, idle := range []time.Duration{0, time.Hour} {
			rd := r.Reader(&chunked{s: in, sizes: sz}, idle)
			got, err := readSized(rd, bz)
			rd.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, []byte(want)) {
				t.Fatalf("Reader(%q, source reads %v, buffers %v, idle %v) = %q, want %q", in, sz, bz, idle, got, want)
			}
		}
	})
}
