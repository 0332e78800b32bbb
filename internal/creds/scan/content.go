package scan

import (
	"bytes"
	"strings"
)

// emitFunc receives one content match: its byte offset, kind and redacted preview. It returns false
// when no more matches are wanted.
type emitFunc func(off int, kind, preview string) bool

// matchContent runs the content rules over data (text; the caller has ruled out binary content). Every
// rule's match holds one of a few anchor bytes ('_' '-' ':' 'A') at a fixed place, so it jumps from
// anchor to anchor with bytes.IndexByte (vectorised) and looks closer only there: the cost stays near
// that of reading the file.
func matchContent(data []byte, c fileClass, emit emitFunc) {
	const anchors = "_-:A"
	var next [len(anchors)]int // the next offset of each anchor, or -1
	for k := range next {
		next[k] = bytes.IndexByte(data, anchors[k])
	}
	pos := 0 // where the last match ended: matches do not overlap
	for {
		k := -1
		for j := range next {
			if next[j] >= 0 && (k < 0 || next[j] < next[k]) {
				k = j
			}
		}
		if k < 0 {
			return
		}
		at := next[k]
		start, end, kind, preview := matchAnchor(data, at, c)
		if kind != "" && start >= pos {
			if !emit(start, kind, preview) {
				return
			}
			pos = end
		}
		resume := max(at+1, pos)
		for j := range next {
			if next[j] >= 0 && next[j] < resume {
				if n := bytes.IndexByte(data[resume:], anchors[j]); n >= 0 {
					next[j] = resume + n
				} else {
					next[j] = -1
				}
			}
		}
	}
}

// tokenBacks are, for each anchor, how far before it a token's prefix starts: gh?_ and aws_ 3, github_
// 6, sk_ and rk_ 2; sk- 2, xox?- 4, glpat- 5; AKIA and AIza 0.
func tokenBacks(anchor byte) []int {
	switch anchor {
	case '_':
		return []int{3, 6, 2}
	case '-':
		return []int{2, 4, 5}
	case 'A':
		return []int{0}
	}
	return nil
}

// matchAnchor tries the rules whose match holds the anchor byte at data[at]. It returns where the
// match starts and ends.
func matchAnchor(data []byte, at int, c fileClass) (start, end int, kind, preview string) {
	switch data[at] {
	case ':':
		if kind, preview = matchURL(data, at); kind == "" {
			kind, preview = matchOracleThin(data, at)
		}
		return at, at + 3, kind, preview
	case '-':
		if kind, preview, skip := matchPEM(data, at); kind != "" {
			return at, at + skip, kind, preview
		}
		if s := at - 5; s >= 0 {
			if kind, preview := matchPuTTY(data, s); kind != "" {
				return s, at + 1, kind, preview
			}
		}
	}
	for _, back := range tokenBacks(data[at]) {
		s := at - back
		if s < 0 || s > 0 && isAlnum(data[s-1]) {
			continue // a token starts a word
		}
		if kind, preview, skip := matchToken(data, s); kind != "" {
			return s, s + skip, kind, preview
		}
	}
	return 0, 0, "", ""
}

// matchToken matches the tokens known by their prefix, at data[i:]. skip is how many bytes the caller
// may pass over. It looks at the second byte before comparing whole prefixes, as most starts are the
// first letter of an ordinary word.
func matchToken(data []byte, i int) (kind, preview string, skip int) {
	rest := data[i:]
	if len(rest) < 20 {
		return "", "", 0 // shorter than any token
	}
	switch rest[0] {
	case 'g':
		switch {
		case rest[1] == 'h' && rest[3] == '_' && bytes.IndexByte([]byte("pousr"), rest[2]) >= 0:
			// Classic GitHub tokens: 36 base62 characters after the prefix.
			if n := runLen(rest[4:], isAlnum); n >= 36 && !fakeToken(rest[4:4+n]) {
				return "GitHub token", string(rest[:4]) + "…", 4 + n
			}
		case rest[1] == 'i' && hasPrefix(rest, "github_pat_"):
			if n := runLen(rest[11:], isWordChar); n >= 70 && !fakeToken(rest[11:11+n]) {
				return "GitHub token", "github_pat_…", 11 + n
			}
		case rest[1] == 'l' && hasPrefix(rest, "glpat-"):
			if n := runLen(rest[6:], isTokenChar); n >= 20 && !fakeToken(rest[6:6+n]) {
				return "GitLab token", "glpat-…", 6 + n
			}
		}
	case 'x':
		if rest[1] == 'o' && rest[2] == 'x' && rest[4] == '-' && bytes.IndexByte([]byte("abposr"), rest[3]) >= 0 {
			if n := runLen(rest[5:], isTokenChar); n >= 20 && hasDigit(rest[5:5+n]) && !fakeToken(rest[5:5+n]) {
				return "Slack token", string(rest[:5]) + "…", 5 + n
			}
		}
	case 's', 'r':
		if rest[1] != 'k' {
			break
		}
		switch {
		case rest[0] == 's' && hasPrefix(rest, "sk-ant-"):
			if n := runLen(rest[7:], isTokenChar); n >= 32 && !fakeToken(rest[7:7+n]) {
				return "Anthropic API key", "sk-ant-…", 7 + n
			}
		case rest[0] == 's' && rest[2] == '-':
			// OpenAI: "sk-" + 48 letters and digits (legacy), or "sk-proj-", "sk-svcacct-",
			// "sk-admin-", "sk-None-" + a long run; both mixing digits and cases, which words
			// joined by dashes do not.
			var p string
			for _, kind := range []string{"sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-"} {
				if hasPrefix(rest, kind) {
					p = kind
				}
			}
			n := 0
			if p != "" {
				if n = runLen(rest[len(p):], isTokenChar); n < 40 {
					break
				}
			} else if p, n = "sk-", runLen(rest[3:], isAlnum); n != 48 || len(rest) > 51 && isTokenChar(rest[51]) {
				break
			}
			body := rest[len(p) : len(p)+n]
			if hasDigit(body) && hasUpper(body) && hasLower(body) && !fakeToken(body) {
				return "OpenAI API key", p + "…", len(p) + n
			}
		case hasPrefix(rest[2:], "_live_"):
			if n := runLen(rest[8:], isAlnum); n >= 20 && !fakeToken(rest[8:8+n]) {
				return "Stripe live key", string(rest[:8]) + "…", 8 + n
			}
		}
	case 'A', 'a':
		switch {
		case rest[0] == 'A' && (hasPrefix(rest, "AKIA") || hasPrefix(rest, "ASIA") || hasPrefix(rest, "ABIA") || hasPrefix(rest, "ACCA")):
			if runLen(rest[4:], isUpperOrDigit) == 16 && (len(rest) == 20 || !isAlnum(rest[20])) && !fakeToken(rest[4:20]) {
				return "AWS access key ID", string(rest[:4]) + "…", 20
			}
		case rest[0] == 'A' && hasPrefix(rest, "AIza"):
			if n := runLen(rest[4:], isTokenChar); n == 35 && !fakeToken(rest[4:39]) {
				return "Google API key", "AIza…", 39
			}
		case (rest[1] == 'w' || rest[1] == 'W') && hasPrefixFold(rest, "aws_secret_access_key"):
			if v := assignedValue(rest[len("aws_secret_access_key"):]); len(v) == 40 &&
				runLen(v, isBase64Char) == 40 && !fakeToken(v) {
				return "AWS secret access key", "aws_secret_access_key=…", len("aws_secret_access_key")
			}
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

// matchPuTTY matches a PuTTY private key file: a line "PuTTY-User-Key-File-<n>: <algorithm>" and,
// further on, a line "Private-Lines: <count>" followed by key material. Code that names the format
// (this file, for one) has neither line.
func matchPuTTY(data []byte, i int) (kind, preview string) {
	const head = "PuTTY-User-Key-File-"
	rest := data[i:]
	if i > 0 && data[i-1] != '\n' || !hasPrefix(rest, head) || len(rest) < len(head)+3 ||
		rest[len(head)] < '1' || rest[len(head)] > '9' || rest[len(head)+1] != ':' {
		return "", ""
	}
	p := bytes.Index(rest, []byte("\nPrivate-Lines: "))
	if p < 0 {
		return "", ""
	}
	body := rest[p+len("\nPrivate-Lines: "):]
	if nl := bytes.IndexByte(body, '\n'); nl < 0 || runLen(body[nl+1:], isBase64Char) < 16 {
		return "", ""
	}
	return "PuTTY private key", head + "…"
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

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
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
