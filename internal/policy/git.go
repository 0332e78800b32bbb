package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/cordon-sandbox/cordon/internal/gitref"
)

// The network.git section: what an agent may push to the repositories it works on. Fetching them is
// always allowed; a push is judged by the refs it would change, read by the gateway before the pack
// reaches the server.

// GitRule governs the repositories Repos on Host: fetch and clone always, pushes as Push says. A push
// to another repository on Host is refused unless network.http allows it.
type GitRule struct {
	// Host is the exact host name git talks to over HTTPS (smart HTTP); it must be allowed by
	// network.allow, and the gateway intercepts it.
	Host string
	// Repos are repository paths on Host ("owner/name", or deeper for groups), compared without case
	// and without a ".git" suffix, as git servers find them.
	Repos []string
	Push  GitPush
}

// GitPush is what a push may change.
type GitPush struct {
	// Branches are globs over branch names (without refs/heads/): "*" matches within one
	// "/"-separated part, "?" one character, [...] a class. Empty allows no branch.
	Branches []string
	// Tags allows creating and moving tags.
	Tags bool
	// Delete allows deleting branches the globs cover (and tags, with Tags).
	Delete bool
	// Options allows push options ("git push -o"), which a server may act on beyond the refs
	// judged: GitLab's merge_request.* options can have a branch merged into another.
	Options bool
}

func (d *decoder) gitRules(n *yaml.Node, path string) ([]GitRule, error) {
	var out []GitRule
	first := map[string]int{}
	err := d.list(n, path, func(item *yaml.Node, ip string) error {
		r, err := d.gitRule(item, ip)
		if err != nil {
			return err
		}
		if line, dup := first[r.Host]; dup {
			return d.errf(valueOf(item, "host"), ip+".host", "%s already has a git rule (at line %d); list every repository in that one", r.Host, line)
		}
		first[r.Host] = valueOf(item, "host").Line
		out = append(out, r)
		return nil
	})
	return out, err
}

func (d *decoder) gitRule(n *yaml.Node, path string) (GitRule, error) {
	var r GitRule
	seen, err := d.mapping(n, path,
		field{"host", func(v *yaml.Node, p string) (err error) {
			r.Host, err = d.host(v, p, checkExactHost)
			return err
		}},
		field{"repos", func(v *yaml.Node, p string) (err error) {
			if r.Repos, err = d.strs(v, p, checkGitRepo); err == nil && len(r.Repos) == 0 {
				err = d.errf(v, p, "expected at least one repository (owner/name)")
			}
			return err
		}},
		field{"push", func(v *yaml.Node, p string) error {
			_, err := d.mapping(v, p,
				field{"branches", func(v *yaml.Node, p string) (err error) {
					r.Push.Branches, err = d.strs(v, p, checkBranchGlob)
					return err
				}},
				field{"tags", func(v *yaml.Node, p string) (err error) {
					r.Push.Tags, err = d.boolean(v, p)
					return err
				}},
				field{"delete", func(v *yaml.Node, p string) (err error) {
					r.Push.Delete, err = d.boolean(v, p)
					return err
				}},
				field{"options", func(v *yaml.Node, p string) (err error) {
					r.Push.Options, err = d.boolean(v, p)
					return err
				}},
			)
			return err
		}},
	)
	if err != nil {
		return r, err
	}
	return r, d.require(n, path, seen, "host", "repos")
}

// checkGitRepo validates a repository path: two or more segments of letters, digits, ".", "_" and
// "-", none a dot segment; returned lower-case and without ".git", as it is compared.
func checkGitRepo(s string) (string, error) {
	parts := strings.Split(s, "/")
	ok := len(parts) >= 2
	for _, p := range parts {
		ok = ok && p != "." && p != ".." && allOf(p, func(c byte) bool { return isLower(c) || isUpper(c) || isDigit(c) || strings.IndexByte("._-", c) >= 0 })
	}
	if !ok || strings.HasSuffix(strings.ToLower(s), "/.git") {
		return "", fmt.Errorf("%q is not a repository path (expected owner/name, without a URL or host)", s)
	}
	return strings.TrimSuffix(strings.ToLower(s), ".git"), nil
}

// checkBranchGlob validates a branch glob (gitref.CheckGlob, the syntax the gateway matches by).
func checkBranchGlob(g string) (string, error) {
	return g, gitref.CheckGlob(g)
}

func allOf(s string, ok func(byte) bool) bool {
	return s != "" && matchAll(s, ok, ok)
}

// checkGitHosts refuses a git rule for a host network.allow never admits (or network.deny refuses):
// its pushes could never be made, so the rule is surely a mistake. With presets, whose hosts are
// known only when they are expanded, the gateway makes the same check.
func (d *decoder) checkGitHosts(nw *Network, git *yaml.Node) error {
	for i, r := range nw.Git {
		at := valueOf(git.Content[i], "host")
		where := fmt.Sprintf("network.git[%d].host", i)
		for _, p := range nw.Deny {
			if hostMatches(p, r.Host) {
				return d.errf(at, where, "%s is refused by network.deny (%q)", r.Host, p)
			}
		}
		allowed := len(nw.Presets) > 0
		for _, ep := range nw.Allow {
			allowed = allowed || hostMatches(ep.Host, r.Host)
		}
		if !allowed {
			return d.errf(at, where, "%s is never allowed by the network policy (add it to network.allow)", r.Host)
		}
	}
	return nil
}

// docGitRule is a GitRule as Render writes it.
type docGitRule struct {
	Host  string   `yaml:"host"`
	Repos []string `yaml:"repos,flow"`
	Push  struct {
		Branches []string `yaml:"branches,flow"`
		Tags     bool     `yaml:"tags"`
		Delete   bool     `yaml:"delete"`
		Options  bool     `yaml:"options,omitempty"`
	} `yaml:"push,flow"`
}

func docGitRules(rs []GitRule) []docGitRule {
	var out []docGitRule
	for _, r := range rs {
		dr := docGitRule{Host: r.Host, Repos: r.Repos}
		dr.Push.Branches, dr.Push.Tags, dr.Push.Delete, dr.Push.Options = r.Push.Branches, r.Push.Tags, r.Push.Delete, r.Push.Options
		out = append(out, dr)
	}
	return out
}
