// Package udiff writes the unified diff of two texts, line by line, as diff -u and git print it, so
// that a change cordon proposes to a file (cordon policy suggest) reads the way every reviewer and
// every patch tool expects. No module served here does this and is kept up (go-difflib is archived),
// so it is a small Myers diff of its own.
package udiff

import (
	"fmt"
	"strings"
)

// context is how many unchanged lines a hunk shows around a change, as diff -u does.
const context = 3

// op is one line of the edit script.
type op struct {
	kind byte // ' ', '-' or '+'
	line string
}

// Unified returns the unified diff turning a into b, under the headers "--- from" and "+++ to", or ""
// when they are equal. A text without a final newline is marked the way diff marks it.
func Unified(from, to, a, b string) string {
	if a == b {
		return ""
	}
	x, y := split(a), split(b)
	ops := script(x, y)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", from, to)
	for _, h := range hunks(ops) {
		writeHunk(&sb, ops[h.start:h.end], h)
	}
	return sb.String()
}

// split cuts s into lines, each keeping its newline; a last line without one keeps none.
func split(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// script is the shortest edit script from x to y (Myers, "An O(ND) Difference Algorithm", 1986):
// for each number of edits d, the furthest reaching path on every diagonal k, kept per d so that the
// path can be traced back.
func script(x, y []string) []op {
	n, m := len(x), len(y)
	maxD := n + m
	offset := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		trace = append(trace, append([]int(nil), v...))
		for k := -d; k <= d; k += 2 {
			var i int
			if k == -d || k != d && v[offset+k-1] < v[offset+k+1] {
				i = v[offset+k+1] // down: an insertion
			} else {
				i = v[offset+k-1] + 1 // right: a deletion
			}
			j := i - k
			for i < n && j < m && x[i] == y[j] {
				i, j = i+1, j+1
			}
			v[offset+k] = i
			if i >= n && j >= m {
				return backtrack(x, y, trace, offset)
			}
		}
	}
	return nil // not reached: d = n+m always ends
}

// backtrack walks the trace from (n, m) back to (0, 0) and returns the edit script in order. trace[d]
// holds the furthest points after d-1 edits, from which step d was taken.
func backtrack(x, y []string, trace [][]int, offset int) []op {
	var rev []op
	i, j := len(x), len(y)
	for d := len(trace) - 1; d >= 0; d-- {
		v := trace[d]
		k := i - j
		prevK := k - 1
		if k == -d || k != d && v[offset+k-1] < v[offset+k+1] {
			prevK = k + 1
		}
		pi := v[offset+prevK]
		pj := pi - prevK
		for i > pi && j > pj && i > 0 && j > 0 {
			rev = append(rev, op{' ', x[i-1]})
			i, j = i-1, j-1
		}
		if d == 0 {
			break
		}
		if i == pi {
			rev = append(rev, op{'+', y[j-1]})
		} else {
			rev = append(rev, op{'-', x[i-1]})
		}
		i, j = pi, pj
	}
	out := make([]op, len(rev))
	for n, o := range rev {
		out[len(rev)-1-n] = o
	}
	return out
}

// hunk is a run of ops [start, end) and where it begins in each text (0-based line numbers).
type hunk struct {
	start, end int
	a, b       int
}

// hunks groups the changes with up to context unchanged lines around each; changes closer than
// twice the context share a hunk.
func hunks(ops []op) []hunk {
	var out []hunk
	a, b := 0, 0
	ai, bi := make([]int, len(ops)), make([]int, len(ops))
	for i, o := range ops {
		ai[i], bi[i] = a, b
		if o.kind != '+' {
			a++
		}
		if o.kind != '-' {
			b++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-context, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			// A run of unchanged lines: the hunk ends unless another change follows closely.
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*context {
				end = min(end+context, len(ops))
				break
			}
			end = run
		}
		out = append(out, hunk{start: start, end: end, a: ai[start], b: bi[start]})
		i = end
	}
	return out
}

func writeHunk(sb *strings.Builder, ops []op, h hunk) {
	na, nb := 0, 0
	for _, o := range ops {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", span(h.a, na), span(h.b, nb))
	for _, o := range ops {
		sb.WriteByte(o.kind)
		sb.WriteString(o.line)
		if !strings.HasSuffix(o.line, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// span is a hunk's range in one text as diff writes it: "start,count", 1-based, where an empty range
// names the line before it.
func span(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
