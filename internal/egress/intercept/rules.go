package intercept

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/internal/httpoverride"
)

// Access is one thing a host's rule allows: any of Methods on any of Paths. An empty Methods allows
// every method and an empty Paths every path.
type Access struct {
	Methods []string
	// Paths are globs over the decoded, canonical path (see the package doc): "*" matches any run of
	// characters, "/" included; everything else matches itself.
	Paths []string
	// Body allows a request body on GET, HEAD, OPTIONS, DELETE and TRACE, where a body has no defined
	// meaning and is otherwise refused: a lenient server may read it as another request or as the
	// parameters of another action.
	Body bool
	// Websocket allows a websocket upgrade (a well-formed handshake, and only that protocol) on these
	// methods and paths; every other upgrade, and a websocket where this is false, is refused.
	Websocket bool
	// Headers names the method-override and URL-rewrite headers (X-HTTP-Method-Override,
	// X-Original-URL and the like, see internal/httpoverride) allowed on these requests; they are refused
	// otherwise, since the upstream may act on the method or path they name rather than the one judged.
	// Names are case-insensitive, and "_" matches "-".
	Headers []string
}

// Rule restricts the HTTP requests the sandbox may make to the hosts Host names. A request to such a
// host must be allowed by some Access of some rule that names it; a Rule with no Access allows nothing.
type Rule struct {
	// Host is a name ("github.com") or "*." and a name ("*.github.com"), which covers every name below
	// it, at any depth, but not the name itself.
	Host  string
	Allow []Access
	// Source says where the rule came from ("network.http[0]"), for messages and the audit log.
	Source string
}

// hostPattern is a validated Rule.Host or Config.Hosts entry.
type hostPattern struct {
	exact  string // "github.com"
	suffix string // ".github.com" for "*.github.com"
}

func parseHostPattern(s string) (hostPattern, error) {
	h := strings.ToLower(strings.TrimSuffix(s, "."))
	rest, wild := strings.CutPrefix(h, "*.")
	if err := checkLeafName(rest); err != nil || strings.Contains(rest, "*") || strings.HasPrefix(rest, ".") || strings.Contains(rest, "..") {
		return hostPattern{}, fmt.Errorf("host %q: want a name or *.name", s)
	}
	if wild {
		return hostPattern{suffix: "." + rest}, nil
	}
	return hostPattern{exact: rest}, nil
}

func (p hostPattern) matches(name string) bool {
	if p.suffix != "" {
		return len(name) > len(p.suffix) && strings.HasSuffix(name, p.suffix)
	}
	return name == p.exact
}

// normalName is how names are compared: lower case, no trailing dot.
func normalName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

type access struct {
	methods   []string // upper case; nil = any
	paths     []string // nil = any
	body      bool
	websocket bool
	headers   []string // httpoverride.Key form
	source    string   // "network.http[0].allow[1]", for denials
}

type rule struct {
	host   hostPattern
	allow  []access
	source string
}

// ruleSet is the compiled Config.Rules.
type ruleSet []rule

func compileRules(in []Rule) (ruleSet, error) {
	var out ruleSet
	for i, r := range in {
		src := r.Source
		if src == "" {
			src = fmt.Sprintf("rule %d", i)
		}
		hp, err := parseHostPattern(r.Host)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		c := rule{host: hp, source: src}
		for j, a := range r.Allow {
			ca := access{body: a.Body, websocket: a.Websocket, source: fmt.Sprintf("%s.allow[%d]", src, j)}
			for _, m := range a.Methods {
				if m == "" || strings.Trim(strings.ToUpper(m), "ABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
					return nil, fmt.Errorf("%s: allow[%d]: method %q is not an HTTP method", src, j, m)
				}
				ca.methods = append(ca.methods, strings.ToUpper(m))
			}
			for _, p := range a.Paths {
				if err := checkGlob(p); err != nil {
					return nil, fmt.Errorf("%s: allow[%d]: %w", src, j, err)
				}
				ca.paths = append(ca.paths, p)
			}
			for _, h := range a.Headers {
				if !validHeaderName(h) || !httpoverride.Is(h) {
					return nil, fmt.Errorf("%s: allow[%d]: header %q is not a method-override or URL-rewrite header (only those are refused)", src, j, h)
				}
				ca.headers = append(ca.headers, httpoverride.Key(h))
			}
			c.allow = append(c.allow, ca)
		}
		out = append(out, c)
	}
	return out, nil
}

// checkGlob refuses path globs that could never match a canonical path, so that a typo in the policy
// is an error rather than a rule that silently allows nothing.
func checkGlob(g string) error {
	if !strings.HasPrefix(g, "/") {
		return fmt.Errorf("path %q: must start with /", g)
	}
	for i := 0; i < len(g); i++ {
		if c := g[i]; c < 0x20 || c == 0x7f || strings.IndexByte(`?#%\`, c) >= 0 {
			return fmt.Errorf("path %q: %q has no place in a path glob (globs match the decoded path, without the query)", g, c)
		}
	}
	for _, seg := range strings.Split(g[1:], "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("path %q: dot segments never match (requests with them are refused)", g)
		}
	}
	if strings.Contains(g, "//") {
		return fmt.Errorf("path %q: empty segments never match (requests with them are refused)", g)
	}
	return nil
}

// covers reports whether some rule names the host.
func (rs ruleSet) covers(name string) bool {
	for _, r := range rs {
		if r.host.matches(name) {
			return true
		}
	}
	return false
}

// verdict is the rules' answer for one request.
type verdict struct {
	allow  bool
	rule   string // the rule that allowed, or the rules that were consulted
	reason string
	fix    string
}

// judge decides a request to name with the given method and request-target (as sent: r.RequestURI for
// HTTP/1.1, :path for HTTP/2) that asks for nothing else (see judgeExtras). A name no rule covers is
// allowed: it is intercepted for another reason (credential injection) and the connection-level
// policy already allowed it.
func (rs ruleSet) judge(name, method, target string) verdict {
	return rs.judgeExtras(name, method, target, extras{})
}

// judgeExtras is judge for a request that also asks for x: it is allowed by an access that allows
// its method, its path and every one of x; when accesses allow the method and path but not all of
// x, the denial names the first of them and what to add to it.
func (rs ruleSet) judgeExtras(name, method, target string, x extras) verdict {
	var sources []string
	var matched []*rule
	for i := range rs {
		if rs[i].host.matches(name) {
			matched = append(matched, &rs[i])
			sources = append(sources, rs[i].source)
		}
	}
	if len(matched) == 0 {
		return verdict{allow: true}
	}
	p, err := canonicalPath(target)
	if err != nil {
		return verdict{rule: strings.Join(sources, ", "), reason: err.Error()}
	}
	var short *access // the first access that allows the method and path but not all of x
	for _, r := range matched {
		for k := range r.allow {
			a := &r.allow[k]
			if !a.allows(method, p) {
				continue
			}
			if reason, _ := a.missing(method, x); reason == "" {
				return verdict{allow: true, rule: r.source}
			}
			if short == nil {
				short = a
			}
		}
	}
	if short != nil {
		reason, fix := short.missing(method, x)
		return verdict{rule: short.source, reason: reason, fix: fix}
	}
	first := matched[0]
	return verdict{
		rule:   strings.Join(sources, ", "),
		reason: fmt.Sprintf("%s %s is not allowed by %s", method, p, describe(matched)),
		fix:    fmt.Sprintf("add {methods: [%s], paths: [%s]} to %s.allow", method, strconv.Quote(p), first.source),
	}
}

// describe lists what the rules allow, for a denial message.
func describe(rs []*rule) string {
	var parts []string
	for _, r := range rs {
		var as []string
		for _, a := range r.allow {
			m, p := "any method", "any path"
			if a.methods != nil {
				m = strings.Join(a.methods, ",")
			}
			if a.paths != nil {
				p = strings.Join(a.paths, " ")
			}
			as = append(as, m+" on "+p)
		}
		if len(as) == 0 {
			as = []string{"nothing"}
		}
		parts = append(parts, fmt.Sprintf("%s (which allows %s)", r.source, strings.Join(as, "; ")))
	}
	return strings.Join(parts, ", ")
}

func (a access) allows(method, p string) bool {
	if a.methods != nil {
		ok := false
		for _, m := range a.methods {
			if m == method {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if a.paths == nil {
		return true
	}
	for _, g := range a.paths {
		if globMatch(g, p) {
			return true
		}
	}
	return false
}

// globMatch reports whether s matches the glob g, in which "*" matches any run of bytes and every
// other byte matches itself. Matching is anchored at both ends and takes linear time in practice:
// each "*"-separated literal is found at its leftmost place, which is always safe for this language.
func globMatch(g, s string) bool {
	parts := strings.Split(g, "*")
	if len(parts) == 1 {
		return g == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// Reasons a request-target is refused before any rule is consulted.
var (
	errNotOrigin   = errors.New("request target is not a path (origin-form)")
	errBadEscape   = errors.New("path has a malformed percent-escape")
	errEncodedSep  = errors.New("path encodes a slash, backslash, percent sign or control character")
	errBadByte     = errors.New("path has a byte that is not allowed in a request target")
	errEmptySeg    = errors.New("path has an empty segment (//)")
	errDotSeg      = errors.New("path has a dot segment (. or ..)")
	errNotCanon    = errors.New("path does not clean to itself")
	errBackslashes = errors.New("path has a backslash")
	errBadUTF8     = errors.New("path does not decode to valid UTF-8 (an overlong or broken encoding)")
	errLookalike   = errors.New("path has a character a server may read as a dot, slash, backslash or percent sign")
)

// canonicalPath returns the decoded path of an origin-form request-target, or an error when the target
// is anything but one plain, canonical path: the rules then refuse rather than guess at how the
// upstream would read it.
func canonicalPath(target string) (string, error) {
	if !strings.HasPrefix(target, "/") {
		return "", errNotOrigin
	}
	raw, _, _ := strings.Cut(target, "?")
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return "", errBadEscape
			}
			d := unhex(raw[i+1])<<4 | unhex(raw[i+2])
			if d == '/' || d == '\\' || d == '%' || d < 0x20 || d == 0x7f {
				return "", errEncodedSep
			}
			b.WriteByte(d)
			i += 2
		case c == '\\':
			return "", errBackslashes
		case c <= 0x20 || c >= 0x7f || c == '#':
			return "", errBadByte
		default:
			b.WriteByte(c)
		}
	}
	p := b.String()
	// Decoded bytes outside ASCII must be UTF-8, and not a look-alike of the characters the checks
	// below are about: a lenient upstream decodes "%c0%ae" (an overlong ".") or folds "．" (U+FF0E) to
	// "." and would read "/allowed/%c0%ae%c0%ae/secret" as "/secret".
	if !utf8.ValidString(p) {
		return "", errBadUTF8
	}
	for _, r := range p {
		if r >= utf8.RuneSelf && lookalike(r) {
			return "", errLookalike
		}
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		if seg == "" && i != len(segs)-1 {
			return "", errEmptySeg
		}
		if s, _, _ := strings.Cut(seg, ";"); s == "." || s == ".." {
			return "", errDotSeg
		}
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if clean != p {
		return "", errNotCanon
	}
	return p, nil
}

// lookalike reports whether r is a character that Unicode normalisation (NFKC, which IIS, Python's
// and Java's normalisers and some file systems apply) or a best-fit code page conversion turns into
// ".", "/", "\\" or "%", or that is drawn as one: full-width and small forms, leaders, and the
// mathematical slashes.
func lookalike(r rune) bool {
	switch r {
	case '\uff0e', '\ufe52', '\u2024', '\u2025', '\u2026', '\u3002', '\uff61', '\u0701', '\u0702', '\ua4f8', '\u2e33', '\u30fb', // dots
		'\uff0f', '\u2044', '\u2215', '\u29f8', '\u2571', '\u27cb', '\u1735', // slashes
		'\uff3c', '\ufe68', '\u2216', '\u29f5', '\u29f9', '\u2572', '\u27cd', // backslashes
		'\uff05', '\ufe6a', '\u2052', // percent signs
		'\u0338', '\u20e5', '\u20eb': // combining overlays drawn as slashes
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
