package intercept

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCanonicalPath attacks the path check with arbitrary request-targets: a path it accepts must read
// the same to a lenient server that decodes overlong UTF-8 and folds look-alike characters to the
// ASCII they resemble, so no spelling of "." or "/" gets past the rules as something else.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/ok/a", "/ok/%c0%ae%c0%ae/secret", "/ok/%ef%bc%8e%ef%bc%8e/secret", "/ok/..%c0%afsecret",
		"/ok/%e2%81%84", "/ok/%5c", "/ok/%00", "/ok/caf%C3%A9", "/ok/%ed%a0%80", "/ok/%f0%80%80%ae"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		p, err := canonicalPath(target)
		if err != nil {
			return
		}
		if !utf8.ValidString(p) {
			t.Fatalf("accepted %q, which decodes to invalid UTF-8 %q", target, p)
		}
		raw, _, _ := strings.Cut(target, "?")
		dec, err := url.PathUnescape(raw)
		if err != nil || dec != p {
			t.Fatalf("accepted %q as %q, but it decodes to %q (%v)", target, p, dec, err)
		}
		if read := lenientRead(p); read != p {
			t.Fatalf("accepted %q as %q, which a lenient server reads as %q", target, p, read)
		}
	})
}

// lenientRead is how a lenient server might read a decoded path: two-byte overlong sequences decoded
// to the ASCII they encode, and look-alikes folded to what they look like.
func lenientRead(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); {
		if c := p[i]; (c == 0xc0 || c == 0xc1) && i+1 < len(p) && p[i+1]&0xc0 == 0x80 {
			b.WriteByte((c&0x1f)<<6 | p[i+1]&0x3f)
			i += 2
			continue
		}
		r, n := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteByte(p[i])
		case lookalike(r):
			b.WriteByte('?') // some ASCII punctuation: differs from the original either way
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}
