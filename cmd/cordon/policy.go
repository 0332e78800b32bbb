package main

import (
	"fmt"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

const policyUsage = "policy check [FILE]"

// cmdPolicy validates a policy and prints the effective one (defaults and presets merged), so users
// see exactly what is in force rather than what they think they wrote, followed by a note on each line
// that lets more through than it may seem to (a wildcard is a DNS channel, see policy.Policy.Notes).
func (a *app) cmdPolicy(args []string) int {
	if len(args) == 0 || args[0] != "check" {
		a.errorf("policy: expected a subcommand (usage: cordon %s)", policyUsage)
		return exitUsage
	}
	fl := a.flags("policy check", policyUsage)
	if code, ok := a.parse(fl, policyUsage, args[1:]); !ok {
		return code
	}
	if fl.NArg() > 1 {
		a.errorf("policy check: too many arguments (usage: cordon %s)", policyUsage)
		return exitUsage
	}
	path, err := policy.Locate(fl.Arg(0), policy.LocateEnv{UID: a.uid, Home: a.getenv("HOME"), XDGConfigHome: a.getenv("XDG_CONFIG_HOME")})
	if err != nil {
		a.errorf("policy: %v", err)
		return 1
	}
	pol := policy.Default()
	if path != "" {
		if pol, err = policy.Load(path, policy.Options{Home: a.getenv("HOME")}); err != nil {
			a.errorf("%v", err)
			return 1
		}
	}
	out, err := pol.Render()
	if err != nil {
		a.errorf("policy: rendering: %v", err)
		return exitCordon
	}
	fmt.Fprintf(a.stdout, "# effective policy, from %s\n%s", pol.Source, out)
	// Notes are YAML comments, so the output still parses as the policy it shows.
	for _, n := range pol.Notes() {
		fmt.Fprintf(a.stdout, "# note: %s\n", n)
	}
	return 0
}
