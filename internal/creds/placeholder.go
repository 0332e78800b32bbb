package creds

import (
	"crypto/rand"
	"errors"
	"math/big"
	"strings"
)

// knownPrefixes are token prefixes that tools check (or that secret scanners
// use to recognise a token): a placeholder keeps the real value's prefix so
// that a client which validates the format still accepts it. Longer prefixes
// come before shorter ones that they extend.
var knownPrefixes = []string{
	"sk-ant-api03-", "sk-ant-oat01-", "sk-ant-admin01-", "sk-proj-", "sk-svcacct-", "sk-",
	"github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
	"glpat-", "xoxb-", "xoxp-", "xoxa-", "xapp-",
	"AKIA", "ASIA", "AIza", "npm_", "hf_", "pypi-", "dop_v1_",
}

// structuredPrefixes are formats whose '-' or '_' separate fields (GitHub's
// fine-grained tokens, Slack's ids and secret): there the separators keep
// their places. In other formats '-' and '_' are letters of a base64url
// alphabet, and their places in the real value are part of the secret, so
// they are drawn at random like every other character.
var structuredPrefixes = map[string]bool{
	"github_pat_": true, "xoxb-": true, "xoxp-": true, "xoxa-": true, "xapp-": true, "dop_v1_": true,
}

// minRandomChars is the least number of random characters in a placeholder:
// with an alphabet of at least 16 symbols that is 128 bits, so a placeholder
// never turns up by chance in other traffic and cannot be guessed.
const minRandomChars = 32

// Character classes a placeholder draws from.
const (
	lowerChars = "abcdefghijklmnopqrstuvwxyz"
	upperChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digitChars = "0123456789"
	hexChars   = "0123456789abcdef"
)

// placeholderFor returns a fresh random placeholder that imitates real's
// format: the same known prefix (shape, when given, overrides the prefix),
// the same length, structural separators ('.' always; '-' and '_' in
// structuredPrefixes formats) at the same places, and random characters from
// the alphabet the rest of real uses. Only the format is taken from real
// (its length, alphabet and structure, which the format makes public); the
// characters are independent of it, so the placeholder is worthless outside
// cordon. When real is too short to hold minRandomChars random characters
// the placeholder is longer than real.
func placeholderFor(real, shape string) (string, error) {
	prefix := shape
	if prefix == "" {
		for _, p := range knownPrefixes {
			if strings.HasPrefix(real, p) && len(real) > len(p) {
				prefix = p
				break
			}
		}
	}
	rest := strings.TrimPrefix(real, prefix)
	if shape != "" && !strings.HasPrefix(real, shape) {
		rest = "" // a shape the real value does not have: nothing to imitate
	}
	structured := structuredPrefixes[prefix]
	alphabet := alphabetOf(rest, structured)
	var b strings.Builder
	b.WriteString(prefix)
	random := 0
	for _, c := range []byte(rest) {
		if c == '.' || structured && isSeparator(c) {
			b.WriteByte(c)
			continue
		}
		if err := writeRandom(&b, alphabet); err != nil {
			return "", err
		}
		random++
	}
	for ; random < minRandomChars; random++ {
		if err := writeRandom(&b, alphabet); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func isSeparator(c byte) bool { return c == '-' || c == '_' || c == '.' }

// alphabetOf returns the smallest of a few familiar alphabets covering the
// characters of s: lower-case hex, or a union of lower-case, upper-case,
// digits and (unless structured, where they are separators) '-' and '_'.
// Anything else (base64's '+' '/' '=', say) is not imitated: the
// placeholder uses letters and digits, which every format accepting those
// also accepts.
func alphabetOf(s string, structured bool) string {
	var lower, upper, digit, nonHex bool
	var extra string
	for _, c := range []byte(s) {
		switch {
		case (c == '-' || c == '_') && !structured:
			if !strings.ContainsRune(extra, rune(c)) {
				extra += string(rune(c))
			}
		case c >= 'a' && c <= 'z':
			lower = true
			nonHex = nonHex || c > 'f'
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= '0' && c <= '9':
			digit = true
		}
	}
	if !upper && !nonHex && extra == "" && (lower || digit) && len(s) >= 16 {
		return hexChars
	}
	var a string
	if lower {
		a += lowerChars
	}
	if upper {
		a += upperChars
	}
	if digit || a == "" {
		a += digitChars
	}
	if len(a) < 16 {
		a += lowerChars // digits alone are too few for minRandomChars to be 128 bits
	}
	return a + extra
}

func writeRandom(b *strings.Builder, alphabet string) error {
	if alphabet == "" {
		return errors.New("placeholder: empty alphabet")
	}
	n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
	if err != nil {
		return err
	}
	b.WriteByte(alphabet[n.Int64()])
	return nil
}
