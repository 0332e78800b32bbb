// Package redact replaces secret strings in what flows back into the sandbox: header names and
// values, response bodies and websocket frames read as streams. The gateway puts a real credential
// into requests to the host it belongs to; a host that echoes it (an error page quoting the
// Authorization header, a debugging endpoint, an API that returns the key it was called with) would
// otherwise hand the real value to the agent, which the placeholder scheme exists to prevent. Each
// secret is replaced by its placeholder, so what the agent reads is what it sent.
//
// Matching is exact and leftmost-longest, as strings.Replacer does with the longest strings first
// (header names, which HTTP treats without regard to case, are matched so). A Reader finds secrets
// that straddle the boundaries of the reads beneath it, and a WebsocketReader those that straddle
// frames.
//
// # Not an oracle
//
// A stream searcher must hold back bytes that could begin a secret until it sees how they go on.
// Holding back exactly those would answer a question for anyone who can make the host reflect text
// of their choosing (an echo endpoint, a model repeating its prompt): "is this the start of the
// secret?", one character at a time. So what a stream holds back never depends on what the bytes
// are: always the last Hold bytes (the longest secret less one), released when more arrive, at the
// end, or a fixed delay after the last arrival (see Reader). Only a whole secret found changes what
// is sent, and that the reader sees anyway, as its placeholder.
//
// Searching is defence in depth, not a boundary: a value quoted in part, transformed (base64, hex,
// another case) or cut into pieces the upstream sends apart is not found. A host a credential is
// bound to is trusted not to reflect it.
package redact

import (
	"bytes"
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
	folded     []Pair // pairs with their secrets in lower case (ASCII), for header names
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
		r.folded = append(r.folded, Pair{Secret: lowerASCII(p.Secret), Replacement: p.Replacement})
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
func (r *Replacer) next(b []byte, from int) (int, *Pair) { return nextIn(r.pairs, b, from) }

// nextIn is next for pairs, longest secret first.
func nextIn(pairs []Pair, b []byte, from int) (int, *Pair) {
	best, bp := -1, (*Pair)(nil)
	for i := range pairs {
		p := &pairs[i]
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

// Bytes returns b with every secret replaced: for a message searched whole (a websocket message the
// gateway relays as one), which needs no hold-back, and whose length may change. b itself is
// returned when it holds no secret.
func (r *Replacer) Bytes(b []byte) []byte {
	if r == nil {
		return b
	}
	i, p := r.next(b, 0)
	if i < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	pos := 0
	for ; i >= 0; i, p = r.next(b, pos) {
		out = append(out, b[pos:i]...)
		out = append(out, p.Replacement...)
		pos = i + len(p.Secret)
		r.count.Add(1)
	}
	return append(out, b[pos:]...)
}

// Spans reports whether a secret begins in a and ends in b, which were each searched already (with
// Bytes): a value an upstream split between websocket messages, which replacing each message
// alone cannot find.
func (r *Replacer) Spans(a, b []byte) bool {
	if r == nil || len(a) == 0 || len(b) == 0 {
		return false
	}
	h := r.Hold()
	a, b = a[max(0, len(a)-h):], b[:min(len(b), h)]
	joined := append(append(make([]byte, 0, len(a)+len(b)), a...), b...)
	for from := 0; ; {
		i, p := r.next(joined, from)
		if i < 0 || i >= len(a) {
			return false
		}
		if i+len(p.Secret) > len(a) {
			return true
		}
		from = i + 1
	}
}

// Strings replaces secrets in every value of vs, in place.
func (r *Replacer) Strings(vs []string) {
	for i, v := range vs {
		vs[i] = r.String(v)
	}
}

// Hold is how many bytes at its end a stream always holds back (see Reader): the longest secret's
// length less one, the most of a secret that could be waiting for its last byte.
func (r *Replacer) Hold() int {
	if r == nil {
		return 0
	}
	return r.maxLen - 1
}

// settle decides b[done:], the stream's bytes not yet searched (b[:done] is decided): it replaces
// every secret that starts before the held tail, the last Hold bytes of b (or every secret when
// final, at the end of the stream or at a release), and returns b (changed in place when the
// replacements are as long as their secrets), how far b is now decided, and how far it may be
// released: len(b)-Hold, or all of it when final. That bound depends on len(b) alone, never on what
// the bytes are, so a reader cannot learn from what it is given whether its last bytes begin a
// secret. A secret starting before it lies wholly inside b (it is at most Hold+1 long), and so does
// any longer secret starting at the same place, so the leftmost-longest choice made here is final.
func (r *Replacer) settle(b []byte, done int, final bool) ([]byte, int, int) {
	for {
		limit := len(b)
		if !final {
			limit -= r.Hold()
		}
		i, p := r.next(b, done)
		if i < 0 || i >= limit {
			return b, max(done, limit), max(limit, 0)
		}
		b = slices.Replace(b, i, i+len(p.Secret), []byte(p.Replacement)...)
		done = i + len(p.Replacement)
		r.count.Add(1)
	}
}
