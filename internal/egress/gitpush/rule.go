package gitpush

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/gitref"
)

// Rule is what a push to one repository may change: branches whose names match Branches (created or
// updated, force included: the gateway cannot see ancestry), tags when Tags, and deletions of either
// when Delete. Every other ref is refused, and so is a push carrying push options unless Options.
type Rule struct {
	// Branches are globs over branch names (without "refs/heads/") in path.Match syntax: "*" matches
	// within one "/"-separated part, so "agent/*" covers "agent/x" but not "agent/x/y".
	Branches []string
	Tags     bool
	Delete   bool
	// Options allows push options, which a server may act on beyond the refs (GitLab's
	// merge_request.* options merge a branch into another).
	Options bool
	// Source names the rule in denials ("network.git[0]"); the fields are named below it.
	Source string
}

// Check refuses a glob that is malformed or could never match a branch name.
func (r Rule) Check() error {
	for _, g := range r.Branches {
		if err := gitref.CheckGlob(g); err != nil {
			return fmt.Errorf("%s.push.branches: %w", r.Source, err)
		}
	}
	return nil
}

// Refused is a command a rule refuses, why, and the policy change that would allow it ("" when none
// would: a ref git itself would refuse, or one outside branches and tags). Rule names the policy
// entry that refused it: "network.git[0].push.branches", ".push.tags", ".push.delete", or the rule
// itself for a ref no setting could allow.
type Refused struct {
	Command
	Rule, Reason, Fix string
}

// Judge returns the commands of req the rule refuses, in order; none means the push is allowed. One
// refused command refuses the whole push; push options the rule does not allow refuse every command.
func (r Rule) Judge(req *Request) []Refused {
	if n := len(req.PushOptions); n > 0 && !r.Options {
		out := make([]Refused, len(req.Commands))
		for k, c := range req.Commands {
			out[k] = Refused{Command: c, Rule: r.Source + ".push.options",
				Reason: fmt.Sprintf("push options (%d given) are not allowed by %s: a server may act on them beyond the refs", n, r.Source),
				Fix:    fmt.Sprintf("set %s.push.options: true", r.Source)}
		}
		return out
	}
	var out []Refused
	for _, c := range req.Commands {
		if rf := r.judge(c); rf.Reason != "" {
			rf.Command = c
			out = append(out, rf)
		}
	}
	return out
}

func (r Rule) judge(c Command) Refused {
	field := func(name, reason, fix string) Refused {
		return Refused{Rule: r.Source + ".push." + name, Reason: reason, Fix: fix}
	}
	if !strings.HasPrefix(c.Ref, "refs/") || !gitref.ValidName(c.Ref[len("refs/"):]) {
		return Refused{Rule: r.Source, Reason: fmt.Sprintf("%s is not a valid ref name", strconv.Quote(c.Ref))}
	}
	if name, ok := strings.CutPrefix(c.Ref, "refs/heads/"); ok {
		if !gitref.Match(r.Branches, name) {
			what := "the branches " + strings.Join(r.Branches, ", ")
			if len(r.Branches) == 0 {
				what = "no branches"
			}
			return field("branches", fmt.Sprintf("branch %s is not in %s.push.branches (which allows %s)", name, r.Source, what),
				fmt.Sprintf("add %s to %s.push.branches", strconv.Quote(name), r.Source))
		}
		if c.Delete() && !r.Delete {
			return field("delete", fmt.Sprintf("deleting branch %s is not allowed by %s", name, r.Source), fmt.Sprintf("set %s.push.delete: true", r.Source))
		}
		return Refused{}
	}
	if name, ok := strings.CutPrefix(c.Ref, "refs/tags/"); ok {
		if !r.Tags {
			return field("tags", fmt.Sprintf("pushing tag %s is not allowed by %s", name, r.Source), fmt.Sprintf("set %s.push.tags: true", r.Source))
		}
		if c.Delete() && !r.Delete {
			return field("delete", fmt.Sprintf("deleting tag %s is not allowed by %s", name, r.Source), fmt.Sprintf("set %s.push.delete: true", r.Source))
		}
		return Refused{}
	}
	return Refused{Rule: r.Source, Reason: fmt.Sprintf("%s is neither a branch nor a tag (only refs/heads/ and refs/tags/ may be pushed)", c.Ref)}
}
