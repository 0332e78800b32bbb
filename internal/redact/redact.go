// Package redact replaces secret strings in what flows back into the sandbox: header values and
// response bodies read as streams. The gateway puts a real credential into requests to the host it
// belongs to; a host that echoes it (an error page quoting the Authorization header, a debugging
// endpoint, an API that returns the key it was called with) would otherwise hand the real value to
// the agent, which the placeholder scheme exists to prevent. Each secret is replaced by its
// placeholder, so what the agent reads is what it sent.
//
// Matching is exact and leftmost-longest, as strings.Replacer does with the longest strings first,
// and a Reader finds secrets that straddle the boundaries of the reads beneath it.
package redact

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync/atomic"
)

// Pair is one secret and what replaces it.
type Pair struct {
	Secret, Replacement string
}

// Replacer replaces a fixed set of secrets. It is safe for concurrent use and counts the
// replacements it made, so the audit log can say a host reflected a credential.
type Replacer struct {
	pairs      []Pair // longest secret first
	maxLen     int
	sameLength bool
	count      atomic.Int64
}

// New returns a Replacer for pairs, ignoring empty secrets and repeats, or nil when none is left: a
// nil *Replacer replaces nothing.
func New(pairs []Pair) *Replacer {
	var ps []Pair
	for _, p := range pairs {
		if p.Secret != "" && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	slices.SortStableFunc(ps, func(a, b Pair) int { return len(b.Secret) - len(a.Secret) })
	r := &Replacer{pairs: ps, maxLen: len(ps[0].Secret), sameLength: true}
	for _, p := range ps {
		r.sameLength = r.sameLength && len(p.Secret) == len(p.Replacement)
	}
	return r
}

// SameLength reports whether every replacement is as long as its secret, so that a replaced stream
// keeps its length (a Content-Length, a websocket frame's length).
func (r *Replacer) SameLength() bool { return r == nil || r.sameLength }

// Count is the number of replacements made so far.
func (r *Replacer) Count() int64 {
	if r == nil {
		return 0
	}
	return r.count.Load()
}

// Add adds n to Count, for a Replacer that takes over from another.
func (r *Replacer) Add(n int64) { r.count.Add(n) }

// next finds the leftmost match in b at or after from, the longest of those starting there. It
// returns its start and pair, or -1.
func (r *Replacer) next(b []byte, from int) (int, *Pair) {
	best, bp := -1, (*Pair)(nil)
	for i := range r.pairs {
		p := &r.pairs[i]
		end := len(b)
		if best >= 0 {
			end = min(len(b), best+len(p.Secret)) // only a match starting before best can beat it
		}
		if end-from < len(p.Secret) {
			continue
		}
		if k := bytes.Index(b[from:end], []byte(p.Secret)); k >= 0 && (best < 0 || from+k < best) {
			best, bp = from+k, p
		}
	}
	return best, bp
}

// String returns s with every secret replaced.
func (r *Replacer) String(s string) string {
	if r == nil {
		return s
	}
	b := []byte(s)
	i, p := r.next(b, 0)
	if i < 0 {
		return s
	}
	var out strings.Builder
	pos := 0
	for ; i >= 0; i, p = r.next(b, pos) {
		out.Write(b[pos:i])
		out.WriteString(p.Replacement)
		pos = i + len(p.Secret)
		r.count.Add(1)
	}
	out.Write(b[pos:])
	return out.String()
}

// Strings replaces secrets in every value of vs, in place.
func (r *Replacer) Strings(vs []string) {
	for i, v := range vs {
		vs[i] = r.String(v)
	}
}

// readChunk is how much a Reader reads from its source at a time.
const readChunk = 32 << 10

// Reader returns src with every secret replaced. Of what src has given, it holds back only a tail
// that begins some secret (at most the longest secret's length less one byte) until more input
// shows whether the secret is there, so a secret split across reads is still found and a stream
// that pauses (server-sent events, a websocket) is not held up. Errors from src are returned once
// the bytes before them are.
func (r *Replacer) Reader(src io.Reader) io.Reader {
	if r == nil {
		return src
	}
	return &reader{r: r, src: src}
}

type reader struct {
	r   *Replacer
	src io.Reader
	in  []byte // read from src, not yet decided
	out []byte // decided, not yet returned
	err error  // src's error, once in is drained
}

func (rd *reader) Read(p []byte) (int, error) {
	if rd.r.sameLength && len(rd.out) == 0 && rd.err == nil && len(p) >= 2*rd.r.maxLen {
		return rd.readInPlace(p)
	}
	for len(rd.out) == 0 {
		if rd.err != nil {
			if len(rd.in) > 0 { // the end: what was held back cannot start a secret any more
				rd.decide(true)
				continue
			}
			return 0, rd.err
		}
		if cap(rd.in)-len(rd.in) < readChunk {
			rd.in = slices.Grow(rd.in, readChunk)
		}
		n, err := rd.src.Read(rd.in[len(rd.in):cap(rd.in)])
		rd.in = rd.in[:len(rd.in)+n]
		rd.err = err
		if n > 0 {
			rd.decide(false)
		}
	}
	n := copy(p, rd.out)
	rd.out = rd.out[n:]
	return n, nil
}

// readInPlace is Read without a copy of its own, for replacements as long as their secrets (the
// usual case: placeholders imitate their values): the held-back tail and then the source's bytes
// are read into p, secrets are overwritten where they lie, and only the new tail is kept back.
func (rd *reader) readInPlace(p []byte) (int, error) {
	for {
		k := copy(p, rd.in) // the tail held back last time (shorter than maxLen, so p has room)
		n, err := rd.src.Read(p[k:])
		rd.err = err
		total := k + n
		keep := rd.r.plan(p[:total], err != nil, func(i int, pr *Pair) { copy(p[i:], pr.Replacement) })
		rd.in = append(rd.in[:0], p[keep:total]...)
		switch {
		case keep > 0:
			return keep, nil // an error is returned by the next Read, once in is drained
		case err != nil:
			return 0, err
		}
	}
}

// decide moves what in holds into out, replacing secrets, except the tail that plan holds back.
func (rd *reader) decide(end bool) {
	out := rd.out[:0]
	pos := 0
	keep := rd.r.plan(rd.in, end, func(i int, p *Pair) {
		out = append(out, rd.in[pos:i]...)
		out = append(out, p.Replacement...)
		pos = i + len(p.Secret)
	})
	out = append(out, rd.in[pos:keep]...)
	rd.out = out
	rd.in = append(rd.in[:0], rd.in[keep:]...)
}

// plan finds the secrets to replace in b, the stream's undecided bytes, calling replace for each in
// order, and returns how much of b is decided: all of it at the end of the stream, else all but the
// tail from the first position where the rest of b begins some secret that more input could
// complete. Only matches starting before that position are taken; a match there could yet lose to
// a longer one starting as early or earlier, which is why the choice waits. The held-back tail is
// usually empty (no secret begins with a stream's last bytes), so a stream that pauses, such as
// server-sent events, is not held up.
func (r *Replacer) plan(b []byte, end bool, replace func(i int, p *Pair)) (keep int) {
	open := len(b)
	if !end {
		open = r.openFrom(b, 0)
	}
	pos := 0
	for {
		i, p := r.next(b, pos)
		if i < 0 || i >= open {
			break
		}
		replace(i, p)
		pos = i + len(p.Secret)
		r.count.Add(1)
	}
	if end {
		return len(b)
	}
	return r.openFrom(b, pos)
}

// openFrom returns the first position j >= from such that b[j:] is a proper prefix of some secret
// (a secret may be starting there), or len(b).
func (r *Replacer) openFrom(b []byte, from int) int {
	for j := max(from, len(b)-(r.maxLen-1)); j < len(b); j++ {
		rest := b[j:]
		for i := range r.pairs {
			s := r.pairs[i].Secret
			if len(s) > len(rest) && s[0] == rest[0] && s[:len(rest)] == string(rest) {
				return j
			}
		}
	}
	return len(b)
}
