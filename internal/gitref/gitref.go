// Package gitref is the one reading of git's ref-name syntax (git check-ref-format) that the policy,
// which checks branch globs, and the gateway, which judges the refs a push names, agree on: a ref the
// gateway would call valid is one a glob the policy accepts could match.
package gitref

import (
	"fmt"
	"path"
	"strings"
)

// ValidName reports whether s is a valid ref name below "refs/" (or a branch name) by git's
// check-ref-format rules: no control characters, space or ~^:?*[\, no "..", "@{" or "//", no part
// starting with "." or ending with ".lock", and not empty, "@", or ending with "/" or ".".
func ValidName(s string) bool {
	if s == "" || s == "@" || strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".") ||
		strings.Contains(s, "..") || strings.Contains(s, "@{") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	for _, part := range strings.Split(s, "/") {
		if part == "" || part[0] == '.' || strings.HasSuffix(part, ".lock") {
			return false
		}
	}
	return true
}

// CheckGlob refuses a branch glob (path.Match syntax: "*" within one "/"-separated part, "?", [...])
// that path.Match cannot read, that is written with refs/heads/, or that could match no valid branch
// name: what is left when each glob character stands for a plain one must be a valid name.
func CheckGlob(g string) error {
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob (an unclosed [ or a trailing \\)", g)
	}
	if strings.HasPrefix(g, "refs/") {
		return fmt.Errorf("%q: write the branch name without refs/heads/", g)
	}
	if !ValidName(strings.NewReplacer("*", "x", "?", "x", "[", "x", "]", "x", "\\", "").Replace(g)) {
		return fmt.Errorf("%q can match no valid branch name (see git check-ref-format)", g)
	}
	return nil
}

// Match reports whether the branch name matches one of globs (each checked by CheckGlob).
func Match(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
