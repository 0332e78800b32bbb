package redact

import "strings"

// The header of an answer is searched field by field, names included. Two things set it apart
// from a body: names are compared without regard to case, and a value can be cut into pieces that
// each field holds a part of, which no replacement in place can mend.

// Name returns a header field's name with every secret replaced, compared without regard to ASCII
// case: HTTP names are case-insensitive, and the transports change their case (Go's canonicalizes
// them, HTTP/2's are lower case), so a name may hold the value in another case than it was sent.
func (r *Replacer) Name(s string) string {
	if r == nil {
		return s
	}
	low := []byte(lowerASCII(s))
	i, p := nextIn(r.folded, low, 0)
	if i < 0 {
		return s
	}
	var out strings.Builder
	pos := 0
	for ; i >= 0; i, p = nextIn(r.folded, low, pos) {
		out.WriteString(s[pos:i])
		out.WriteString(p.Replacement)
		pos = i + len(p.Secret)
		r.count.Add(1)
	}
	out.WriteString(s[pos:])
	return out.String()
}

// Assembled reports whether some secret can be put together from fields (an answer's header
// names and values, after replacement) without any one of them holding it: from the end of one
// field, any number of whole fields, and the start of another (or of the same one), in any order,
// ASCII case aside. Such an answer cannot be redacted in place, and the caller refuses it. A value
// cut anywhere else (the middle of a field), or quoted only in part, is not found: see the package
// comment.
func (r *Replacer) Assembled(fields []string) bool {
	if r == nil {
		return false
	}
	low := make([]string, 0, len(fields))
	for _, f := range fields {
		if f != "" {
			low = append(low, lowerASCII(f))
		}
	}
	for _, p := range r.folded {
		if assembles(p.Secret, low) {
			return true
		}
	}
	return false
}

// assembles reports whether s is the end of one of fields, then whole fields, then the start of
// one, with at least two pieces.
func assembles(s string, fields []string) bool {
	reach := make([]bool, len(s)) // reach[k]: s[:k] is put together, ending where a field does
	for _, f := range fields {
		for k := 1; k < len(s) && k <= len(f); k++ {
			if f[len(f)-k] == s[0] && f[len(f)-k:] == s[:k] {
				reach[k] = true
			}
		}
	}
	for k := 1; k < len(s); k++ {
		if !reach[k] {
			continue
		}
		rest := s[k:]
		for _, f := range fields {
			switch {
			case strings.HasPrefix(f, rest):
				return true
			case strings.HasPrefix(rest, f):
				reach[k+len(f)] = true // shorter than rest, so within s
			}
		}
	}
	return false
}

// lowerASCII lower-cases ASCII letters only, so that offsets in the result are offsets in s.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
