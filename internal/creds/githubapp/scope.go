package githubapp

import (
	"errors"
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/warn"
	"slices"
	"sort"
	"strings"
)

// maxRepositories is GitHub's limit on repositories named in one token request.
const maxRepositories = 500

// scope is what a token is asked for, normalised from Config: repository names without their owner
// (what the API expects) and the owner they named, if any, to check the grant against.
type scope struct {
	owner       string            // "" when no entry named an owner
	repos       []string          // names within the installation's owner, no duplicates (case-insensitive)
	permissions map[string]string // permission name -> "read" | "write" | "admin"
}

// levels orders permission levels, so that "broader than asked" is a comparison.
var levels = map[string]int{"read": 1, "write": 2, "admin": 3}

// implicitPermission is the one permission GitHub adds to every installation token whether asked or
// not: read access to repository metadata is mandatory for every app, and the response lists it.
const implicitPermission, implicitLevel = "metadata", "read"

func parseScope(repos []string, perms map[string]string) (scope, error) {
	// An empty list would not mean "nothing": GitHub reads an absent repositories or permissions field as
	// "everything the installation has". A sandbox's token is scoped on purpose, so both are required.
	if len(repos) == 0 {
		return scope{}, errors.New("no repositories: a token for all of the installation's repositories is not offered; name them")
	}
	if len(perms) == 0 {
		return scope{}, errors.New("no permissions: a token with all of the installation's permissions is not offered; name them")
	}
	if len(repos) > maxRepositories {
		return scope{}, fmt.Errorf("%d repositories; GitHub accepts at most %d per token", len(repos), maxRepositories)
	}
	sc := scope{permissions: make(map[string]string, len(perms))}
	for _, r := range repos {
		owner, name, err := splitRepository(r)
		if err != nil {
			return scope{}, err
		}
		if owner != "" {
			switch {
			case sc.owner == "":
				sc.owner = owner
			case !strings.EqualFold(sc.owner, owner):
				return scope{}, fmt.Errorf("repository %q: owner differs from %q; an installation token covers one owner's repositories", r, sc.owner)
			}
		}
		if !slices.ContainsFunc(sc.repos, func(s string) bool { return strings.EqualFold(s, name) }) {
			sc.repos = append(sc.repos, name)
		}
	}
	for p, level := range perms {
		if !validPermissionName(p) {
			return scope{}, fmt.Errorf("permission name %q: want lower-case letters and underscores", p)
		}
		if _, ok := levels[level]; !ok {
			return scope{}, fmt.Errorf("permission %s: level %q, want read, write or admin", p, level)
		}
		sc.permissions[p] = level
	}
	return sc, nil
}

// splitRepository accepts "owner/name" or "name" and checks both against GitHub's character rules, so
// nothing odd reaches a request body or an error message.
func splitRepository(s string) (owner, name string, err error) {
	name = s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		owner, name = s[:i], s[i+1:]
		if !validOwner(owner) {
			return "", "", fmt.Errorf("repository %q: owner must be 1-39 letters, digits or hyphens", s)
		}
	}
	if !validRepoName(name) {
		return "", "", fmt.Errorf("repository %q: want \"owner/name\" or \"name\", the name 1-100 letters, digits, '.', '-' or '_'", s)
	}
	return owner, name, nil
}

func validOwner(s string) bool {
	if len(s) == 0 || len(s) > 39 {
		return false
	}
	for _, c := range []byte(s) {
		if !isAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

func validRepoName(s string) bool {
	if len(s) == 0 || len(s) > 100 || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func validPermissionName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// grantedRepository is the part of a repository object in the token response that the check reads.
type grantedRepository struct {
	Name     string `json:"name"`
	FullName string `json:"full_name"`
}

// checkGrant fails closed unless the token GitHub issued is exactly what was asked: the same
// repositories (under the named owner, if one was named) and the same permission levels, with only
// read access to metadata tolerated on top. Broader is refused because the token would carry more
// authority than the policy granted; narrower is refused too, since GitHub answers 422 rather than
// narrowing, so a narrower grant means the server is not behaving as GitHub does and the agent would
// fail later with an obscure 403 instead of this clear error.
func (sc scope) checkGrant(selection string, repos []grantedRepository, perms map[string]string) error {
	if selection != "" && selection != "selected" {
		return fmt.Errorf("token covers repository_selection %q, asked for %d selected repositories", printable(selection), len(sc.repos))
	}
	if repos == nil {
		return errors.New("response lists no repositories; cannot confirm the token is limited to the ones asked for")
	}
	var seen []string
	for _, r := range repos {
		i := slices.IndexFunc(sc.repos, func(s string) bool { return strings.EqualFold(s, r.Name) })
		if i < 0 {
			return fmt.Errorf("token grants repository %q, which was not asked for", printable(r.FullName))
		}
		owner, name, ok := strings.Cut(r.FullName, "/")
		if !ok || !strings.EqualFold(name, r.Name) {
			return fmt.Errorf("token grants repository %q with full name %q; cannot confirm its owner", printable(r.Name), printable(r.FullName))
		}
		if sc.owner != "" && !strings.EqualFold(owner, sc.owner) {
			return fmt.Errorf("token grants %q, asked for %s/%s", printable(r.FullName), sc.owner, sc.repos[i])
		}
		seen = append(seen, strings.ToLower(r.Name))
	}
	for _, want := range sc.repos {
		if !slices.Contains(seen, strings.ToLower(want)) {
			return fmt.Errorf("token does not cover repository %q, which was asked for", want)
		}
	}

	names := make([]string, 0, len(perms))
	for p := range perms {
		names = append(names, p)
	}
	sort.Strings(names) // deterministic errors
	for _, p := range names {
		got := perms[p]
		want, asked := sc.permissions[p]
		if !asked {
			if p == implicitPermission && got == implicitLevel {
				continue
			}
			return fmt.Errorf("token grants permission %s:%s, which was not asked for", printable(p), printable(got))
		}
		g, ok := levels[got]
		if !ok {
			return fmt.Errorf("token grants permission %s at unknown level %q", p, printable(got))
		}
		if g > levels[want] {
			return fmt.Errorf("token grants %s:%s, broader than the %s asked for", p, got, want)
		}
	}
	for p, want := range sc.permissions {
		if got := perms[p]; got != want {
			return fmt.Errorf("token grants %s:%q, asked for %s", p, printable(got), want)
		}
	}
	return nil
}

// printable keeps text from a server's response fit for an error message.
func printable(s string) string { return warn.Printable(s, 200) }
