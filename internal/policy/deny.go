package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// DenyMatcher decides which workspace paths filesystem.deny hides. The globs read like .gitignore:
//
//   - a glob without a slash (other than a trailing one) matches at any depth: "*.pem", ".env";
//   - a glob with a slash is relative to the workspace root: "config/prod.yaml";
//   - "**" as a whole segment matches any number of directories, including none: "**/.env", "logs/**";
//   - a trailing slash matches directories only: "secrets/";
//   - everything under a denied directory is denied;
//   - other segments use path.Match syntax (*, ?, [a-z], \ escapes).
//
// Negation ("!keep") is refused rather than half-supported: a deny list must only ever grow.
type DenyMatcher struct {
	globs []glob
}

// glob is one compiled deny pattern.
type glob struct {
	segs    []string
	dirOnly bool
}

// CompileDeny compiles deny globs, refusing ones that are absolute, escape the workspace with "..", or
// are not valid patterns.
func CompileDeny(globs []string) (*DenyMatcher, error) {
	m := &DenyMatcher{}
	for _, s := range globs {
		g, err := compileGlob(s)
		if err != nil {
			return nil, fmt.Errorf("deny glob: %w", err)
		}
		m.globs = append(m.globs, g)
	}
	return m, nil
}

func compileGlob(s string) (glob, error) {
	switch {
	case s == "":
		return glob{}, errors.New("empty glob")
	case strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~"):
		return glob{}, fmt.Errorf("%q must be relative to the workspace", s)
	case strings.HasPrefix(s, "!"):
		return glob{}, fmt.Errorf("%q: negation is not supported", s)
	case strings.ContainsRune(s, 0):
		return glob{}, fmt.Errorf("%q must not contain a NUL byte", s)
	}
	body, dirOnly := strings.CutSuffix(s, "/")
	var segs []string
	for _, seg := range strings.Split(body, "/") {
		switch seg {
		case "", ".":
			return glob{}, fmt.Errorf("%q has an empty or . segment", s)
		case "..":
			return glob{}, fmt.Errorf("%q must not contain .. (it would reach outside the workspace)", s)
		case "**":
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue // "**/**" means the same as "**"
			}
		default:
			if _, err := path.Match(seg, ""); err != nil {
				return glob{}, fmt.Errorf("%q is not a valid glob: %w", s, err)
			}
		}
		segs = append(segs, seg)
	}
	if len(segs) == 1 && segs[0] != "**" {
		segs = []string{"**", segs[0]} // no slash: match at any depth
	}
	return glob{segs: segs, dirOnly: dirOnly}, nil
}

// Match reports whether rel, a slash-separated path relative to the workspace, is denied: it or one of
// its parent directories matches a glob. isDir says whether rel itself is a directory. The workspace
// root and paths outside it ("..") are never matched.
func (m *DenyMatcher) Match(rel string, isDir bool) bool {
	rel = path.Clean(strings.TrimPrefix(rel, "/"))
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return false
	}
	names := strings.Split(rel, "/")
	for _, g := range m.globs {
		prefixes := g.match(names)
		for i := 1; i <= len(names); i++ {
			dir := i < len(names) || isDir
			if prefixes[i] && (dir || !g.dirOnly) {
				return true
			}
		}
	}
	return false
}

// match reports, for every i, whether the glob matches names[:i]. It runs in time proportional to
// segments times names, however many "**" the glob has, so that a deep tree in the workspace (which
// the agent controls) cannot make masking slow.
func (g glob) match(names []string) []bool {
	ok := make([]bool, len(names)+1) // ok[i]: the segments so far match names[:i]
	ok[0] = true
	for _, seg := range g.segs {
		next := make([]bool, len(names)+1)
		if seg == "**" {
			reach := false
			for i := range next {
				reach = reach || ok[i]
				next[i] = reach
			}
		} else {
			for i := 1; i <= len(names); i++ {
				if ok[i-1] {
					next[i], _ = path.Match(seg, names[i-1])
				}
			}
		}
		ok = next
	}
	return ok
}

// checkGlob validates a workspace glob as Deny and Secrets.Allow take it.
func checkGlob(s string) (string, error) {
	_, err := compileGlob(s)
	return s, err
}
