package workspace

import (
	"bytes"
	"fmt"
	"strings"
)

// configEntry is one variable of a git config file. Section and Name are lower-cased (git treats
// them case-insensitively); Subsection keeps its case, as git does.
type configEntry struct {
	Section, Subsection, Name string
	// HasSub distinguishes [s ""] (an empty subsection) from [s].
	HasSub bool
	Value  string
	// NoValue marks a bare "key" line, which git reads as boolean true.
	NoValue bool
	Line    int
}

// Key is the variable's canonical name, as `git config --list` prints it.
func (e configEntry) Key() string {
	if e.Section == "" {
		return e.Name
	}
	if e.HasSub {
		return e.Section + "." + e.Subsection + "." + e.Name
	}
	return e.Section + "." + e.Name
}

// parseGitConfig reads a git config file the way git's config.c does: sections with quoted or
// old-style dotted subsections, keys after a header on the same line, quoted values, escapes,
// backslash-newline continuation, and '#'/';' comments outside quotes. Anything git would reject
// is an error: the persistence guard treats an unreadable config as risky rather than guessing.
func parseGitConfig(data []byte) ([]configEntry, error) {
	p := &cfgParser{b: bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), line: 1}
	var out []configEntry
	section, sub, hasSub := "", "", false // git accepts variables before any section
	for {
		c, ok := p.next()
		if !ok {
			return out, nil
		}
		switch {
		case c == '\n', c == ' ', c == '\t', c == '\r':
			continue
		case c == '#' || c == ';':
			p.skipLine()
		case c == '[':
			var err error
			section, sub, hasSub, err = p.header()
			if err != nil {
				return nil, err
			}
		case isAlpha(c):
			e, err := p.variable(c)
			if err != nil {
				return nil, err
			}
			e.Section, e.Subsection, e.HasSub = section, sub, hasSub
			out = append(out, e)
		default:
			return nil, p.errorf("unexpected %q", c)
		}
	}
}

type cfgParser struct {
	b    []byte
	i    int
	line int
}

func (p *cfgParser) next() (byte, bool) {
	if p.i >= len(p.b) {
		return 0, false
	}
	c := p.b[p.i]
	p.i++
	if c == '\n' {
		p.line++
	}
	return c, true
}

func (p *cfgParser) peek() (byte, bool) {
	if p.i >= len(p.b) {
		return 0, false
	}
	return p.b[p.i], true
}

func (p *cfgParser) skipLine() {
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return
		}
	}
}

func (p *cfgParser) errorf(format string, args ...any) error {
	return fmt.Errorf("git config line %d: %s", p.line, fmt.Sprintf(format, args...))
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }

// isSpace is git's isspace (sane_ctype): no vertical tab or form feed.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// header reads a section header after '['.
func (p *cfgParser) header() (section, sub string, hasSub bool, err error) {
	var name []byte
	for {
		c, ok := p.next()
		if !ok {
			return "", "", false, p.errorf("unterminated section header")
		}
		switch {
		case c == ']':
			if len(name) == 0 {
				return "", "", false, p.errorf("empty section name")
			}
			s := strings.ToLower(string(name))
			// Old style [section.sub]: the whole of it is lower-cased and the first dot splits.
			if i := strings.IndexByte(s, '.'); i >= 0 {
				return s[:i], s[i+1:], true, nil
			}
			return s, "", false, nil
		case isSpace(c):
			sec, sub, err := p.subsection(strings.ToLower(string(name)))
			return sec, sub, err == nil, err
		case isAlnum(c) || c == '-' || c == '.':
			name = append(name, c)
		default:
			return "", "", false, p.errorf("invalid character %q in section name", c)
		}
	}
}

// subsection reads ` "sub"]` after a section name.
func (p *cfgParser) subsection(section string) (string, string, error) {
	if section == "" {
		return "", "", p.errorf("empty section name")
	}
	for {
		c, ok := p.next()
		if !ok {
			return "", "", p.errorf("unterminated section header")
		}
		if isSpace(c) {
			continue
		}
		if c != '"' {
			return "", "", p.errorf("expected quoted subsection")
		}
		break
	}
	var sub []byte
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return "", "", p.errorf("unterminated subsection")
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			if c, ok = p.next(); !ok || c == '\n' {
				return "", "", p.errorf("unterminated subsection")
			}
		}
		sub = append(sub, c)
	}
	if c, ok := p.next(); !ok || c != ']' {
		return "", "", p.errorf("expected ] after subsection")
	}
	return section, string(sub), nil
}

// variable reads "name [= value]" whose first character is first.
func (p *cfgParser) variable(first byte) (configEntry, error) {
	e := configEntry{Line: p.line}
	name := []byte{first}
	for {
		c, ok := p.peek()
		if !ok || !(isAlnum(c) || c == '-') {
			break
		}
		p.next()
		name = append(name, c)
	}
	e.Name = strings.ToLower(string(name))
	for {
		c, ok := p.peek()
		if !ok || !isSpace(c) {
			break
		}
		p.next()
	}
	c, ok := p.next()
	if !ok || c == '\n' {
		e.NoValue = true
		return e, nil
	}
	if c != '=' {
		return e, p.errorf("invalid key %q", string(name)+string(c))
	}
	v, err := p.value()
	if err != nil {
		return e, err
	}
	e.Value = v
	return e, nil
}

// value reads a value up to the end of its (possibly continued) line.
func (p *cfgParser) value() (string, error) {
	var out []byte
	quoted := false
	pendingSpace := 0 // whitespace kept only between other characters
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			if quoted {
				return "", p.errorf("unterminated quoted value")
			}
			return string(out), nil
		}
		if !quoted && (c == '#' || c == ';') {
			p.skipLine()
			return string(out), nil
		}
		if !quoted && isSpace(c) {
			if len(out) > 0 {
				pendingSpace++
			}
			continue
		}
		if pendingSpace > 0 {
			out = append(out, bytes.Repeat([]byte{' '}, pendingSpace)...)
			pendingSpace = 0
		}
		switch c {
		case '"':
			quoted = !quoted
			continue
		case '\\':
			e, ok := p.next()
			if !ok {
				return "", p.errorf("backslash at end of file")
			}
			switch e {
			case '\n':
				continue
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case 'n':
				c = '\n'
			case '\\', '"':
				c = e
			default:
				return "", p.errorf("bad escape \\%c", e)
			}
		}
		out = append(out, c)
	}
}

// gitAttr is one attribute assignment of a .gitattributes line.
type gitAttr struct {
	Pattern, Name, Value string
	Line                 int
}

// parseGitAttributes reads a .gitattributes file: a pattern (possibly C-quoted) and attributes per
// line, `[attr]name` macro definitions included. It only keeps attributes with a value (`a=b`),
// which are the ones that can name a driver; set, unset and unspecified attributes cannot.
func parseGitAttributes(data []byte) ([]gitAttr, error) {
	var out []gitAttr
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimLeft(line, " \t\r")
		if line == "" || line[0] == '#' {
			continue
		}
		var pattern, rest string
		if line[0] == '"' {
			end := -1
			for i := 1; i < len(line); i++ {
				if line[i] == '\\' {
					i++
					continue
				}
				if line[i] == '"' {
					end = i
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("gitattributes line %d: unterminated quoted pattern", n+1)
			}
			pattern, rest = line[:end+1], line[end+1:]
		} else {
			i := strings.IndexAny(line, " \t\r")
			if i < 0 {
				continue // a pattern with no attributes
			}
			pattern, rest = line[:i], line[i:]
		}
		for _, f := range strings.Fields(rest) {
			name, value, ok := strings.Cut(f, "=")
			if !ok || strings.HasPrefix(name, "-") || strings.HasPrefix(name, "!") {
				continue
			}
			out = append(out, gitAttr{Pattern: pattern, Name: name, Value: value, Line: n + 1})
		}
	}
	return out, nil
}
