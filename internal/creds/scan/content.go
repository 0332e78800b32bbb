package scan

import (
	"bytes"
	"strings"
)

// emitFunc receives one content match: its byte offset, kind and redacted preview. It returns false
// when no more matches are wanted.
type emitFunc func(off int, kind, preview string) bool

// matchContent runs the content rules over data (text; the caller has ruled out binary content). It
// makes one pass over the bytes, looking closer only where a byte can start a match, so that its cost
// stays near that of reading the file.
func matchContent(data []byte, c fileClass, emit emitFunc) {
	for i := 0; i < len(data); i++ {
		b := data[i]
		if !startByte[b] {
			continue
		}
		var kind, preview string
		var skip int
		switch b {
		case '-':
			kind, preview, skip = matchPEM(data, i)
		case ':':
			kind, preview = matchURL(data, i, c.gitConfig)
		case 'P':
			kind, preview = matchPuTTY(data, i)
		default:
			if i > 0 && isAlnum(data[i-1]) {
				continue // inside a word: no token starts here
			}
			kind, preview, skip = matchToken(data, i)
		}
		if kind != "" && !emit(i, kind, preview) {
			return
		}
		i += skip
	}
}

// startByte marks the bytes a rule can start at.
var startByte = func() (t [256]bool) {
	for _, b := range []byte("gxsrAa-:P") {
		t[b] = true
	}
	return t
}()

// matchToken matches the tokens known by their prefix, at data[i:]. skip is how many bytes the caller
// may pass over.
func matchToken(data []byte, i int) (kind, preview string, skip int) {
	rest := data[i:]
	switch {
	case len(rest) > 4 && rest[0] == 'g' && rest[1] == 'h' && bytes.IndexByte([]byte("pousr"), rest[2]) >= 0 && rest[3] == '_':
		// Classic GitHub tokens: 36 base62 characters after the prefix.
		if n := runLen(rest[4:], isAlnum); n >= 36 && !fakeToken(rest[4:4+n]) {
			return "GitHub token", string(rest[:4]) + "…", 4 + n
		}
	case bytes.HasPrefix(rest, []byte("github_pat_")):
		if n := runLen(rest[11:], isWordChar); n >= 70 && !fakeToken(rest[11:11+n]) {
			return "GitHub token", "github_pat_…", 11 + n
		}
	case bytes.HasPrefix(rest, []byte("glpat-")):
		if n := runLen(rest[6:], isTokenChar); n >= 20 && !fakeToken(rest[6:6+n]) {
			return "GitLab token", "glpat-…", 6 + n
		}
	case len(rest) > 5 && bytes.HasPrefix(rest, []byte("xox")) && bytes.IndexByte([]byte("abposr"), rest[3]) >= 0 && rest[4] == '-':
		if n := runLen(rest[5:], isTokenChar); n >= 20 && hasDigit(rest[5:5+n]) && !fakeToken(rest[5:5+n]) {
			return "Slack token", string(rest[:5]) + "…", 5 + n
		}
	case bytes.HasPrefix(rest, []byte("sk-ant-")):
		if n := runLen(rest[7:], isTokenChar); n >= 32 && !fakeToken(rest[7:7+n]) {
			return "Anthropic API key", "sk-ant-…", 7 + n
		}
	case bytes.HasPrefix(rest, []byte("sk-")):
		// OpenAI: "sk-" + 48 characters, or "sk-proj-", "sk-svcacct-", "sk-admin-" + more. A long run
		// with digits and both cases, which words joined by dashes do not have.
		n := runLen(rest[3:], isTokenChar)
		body := rest[3 : 3+n]
		if n >= 32 && hasDigit(body) && hasUpper(body) && hasLower(body) && !fakeToken(body) {
			p := "sk-"
			if d := bytes.IndexByte(body, '-'); d > 0 && d <= 8 {
				p += string(body[:d+1])
			}
			return "OpenAI API key", p + "…", 3 + n
		}
	case bytes.HasPrefix(rest, []byte("sk_live_")) || bytes.HasPrefix(rest, []byte("rk_live_")):
		if n := runLen(rest[8:], isAlnum); n >= 20 && !fakeToken(rest[8:8+n]) {
			return "Stripe live key", string(rest[:8]) + "…", 8 + n
		}
	case len(rest) >= 20 && (bytes.HasPrefix(rest, []byte("AKIA")) || bytes.HasPrefix(rest, []byte("ASIA")) ||
		bytes.HasPrefix(rest, []byte("ABIA")) || bytes.HasPrefix(rest, []byte("ACCA"))):
		if runLen(rest[4:], isUpperOrDigit) == 16 && (len(rest) == 20 || !isAlnum(rest[20])) && !fakeToken(rest[4:20]) {
			return "AWS access key ID", string(rest[:4]) + "…", 20
		}
	case bytes.HasPrefix(rest, []byte("AIza")):
		if n := runLen(rest[4:], isTokenChar); n == 35 && !fakeToken(rest[4:39]) {
			return "Google API key", "AIza…", 39
		}
	case hasPrefixFold(rest, "aws_secret_access_key"):
		if v := assignedValue(rest[len("aws_secret_access_key"):]); len(v) == 40 &&
			runLen(v, isBase64Char) == 40 && !fakeToken(v) {
			return "AWS secret access key", "aws_secret_access_key=…", len("aws_secret_access_key")
		}
	}
	return "", "", 0
}

// assignedValue returns the value after a key: optional quotes and spaces, '=' or ':' (or "=>"), more
// quotes and spaces, then the run of non-space, non-quote bytes.
func assignedValue(b []byte) []byte {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '"' || b[i] == '\'') {
		i++
	}
	if i >= len(b) || (b[i] != '=' && b[i] != ':') {
		return nil
	}
	i++
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '"' || b[i] == '\'' || b[i] == '>') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' && b[j] != '"' &&
		b[j] != '\'' && b[j] != ',' {
		j++
	}
	return b[i:j]
}

// matchPEM matches a PEM private key at data[i:]: the BEGIN line for a private key followed, within a
// few lines, by key material. A lone header (in code that writes or parses keys) is not a key.
func matchPEM(data []byte, i int) (kind, preview string, skip int) {
	const begin = "-----BEGIN "
	rest := data[i:]
	if !bytes.HasPrefix(rest, []byte(begin)) {
		return "", "", 0
	}
	n := runLen(rest[len(begin):], func(b byte) bool { return b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == ' ' })
	label := rest[len(begin) : len(begin)+n]
	end := len(begin) + n
	if !bytes.HasPrefix(rest[end:], []byte("-----")) ||
		!(bytes.HasSuffix(label, []byte("PRIVATE KEY")) || bytes.HasSuffix(label, []byte("PRIVATE KEY BLOCK"))) {
		return "", "", 0
	}
	end += len("-----")
	window := rest[end:min(len(rest), end+512)]
	for j := 0; j < len(window); j++ {
		if m := runLen(window[j:], isBase64Char); m >= 40 {
			return "private key", "-----BEGIN " + string(label) + "-----", end
		} else {
			j += m
		}
	}
	return "", "", 0
}

// matchPuTTY matches a PuTTY private key file's first line, when the file has private lines.
func matchPuTTY(data []byte, i int) (kind, preview string) {
	const head = "PuTTY-User-Key-File-"
	if bytes.HasPrefix(data[i:], []byte(head)) && bytes.Contains(data[i:], []byte("Private-Lines:")) {
		return "PuTTY private key", head + "…"
	}
	return "", ""
}

// fakeToken reports whether a token body is a documentation example or a placeholder rather than a
// random secret: it says EXAMPLE or xxxx, counts up (0123456789, abcdefgh), or has few distinct bytes.
func fakeToken(body []byte) bool {
	lower := strings.ToLower(string(body))
	for _, w := range []string{"example", "xxxx", "0123456789", "123456789", "abcdefgh", "redacted", "dummy", "fake"} {
		if strings.Contains(lower, w) {
			return true
		}
	}
	var seen [256]bool
	distinct := 0
	for _, b := range body {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	return distinct < min(8, len(body)/2)
}

func runLen(b []byte, ok func(byte) bool) int {
	n := 0
	for n < len(b) && ok(b[n]) {
		n++
	}
	return n
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

func isWordChar(b byte) bool { return isAlnum(b) || b == '_' }

func isTokenChar(b byte) bool { return isAlnum(b) || b == '_' || b == '-' }

func isUpperOrDigit(b byte) bool { return b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }

func isBase64Char(b byte) bool { return isAlnum(b) || b == '+' || b == '/' || b == '=' }

func hasDigit(b []byte) bool { return bytes.ContainsAny(b, "0123456789") }

func hasUpper(b []byte) bool {
	return bytes.ContainsFunc(b, func(r rune) bool { return r >= 'A' && r <= 'Z' })
}

func hasLower(b []byte) bool {
	return bytes.ContainsFunc(b, func(r rune) bool { return r >= 'a' && r <= 'z' })
}
