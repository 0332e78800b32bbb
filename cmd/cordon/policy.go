package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
)

const (
	policyCheckUsage = "policy check [--workspace DIR] [FILE]"
	// policyUsage is every policy subcommand, for the overview and cordon policy --help.
	policyUsage = policyCheckUsage + "\n       cordon " + suggestUsage + "\n       cordon " + importUsage
)

// cmdPolicy dispatches the policy subcommands; --help shows them all with their flags.
func (a *app) cmdPolicy(args []string) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		a.help(a.stdout, a.checkFlags(new(string)), policyUsage)
		flagTable(a.stdout, a.suggestFlags(new(bool)), "Flags of policy suggest")
		flagTable(a.stdout, a.importFlags(new(string)), "Flags of policy import")
		return 0
	}
	if len(args) == 0 {
		a.errorf("policy: expected a subcommand: check, suggest or import (usage: cordon %s)", policyCheckUsage)
		return exitUsage
	}
	switch args[0] {
	case "check":
		return a.cmdPolicyCheck(args[1:])
	case "suggest":
		return a.cmdPolicySuggest(args[1:])
	case "import":
		return a.cmdPolicyImport(args[1:])
	}
	a.errorf("policy: unknown subcommand %q: check, suggest or import (see cordon policy --help)", args[0])
	return exitUsage
}

func (a *app) checkFlags(ws *string) *flag.FlagSet {
	fl := a.flags("policy check", policyCheckUsage)
	fl.StringVar(ws, "workspace", "", "check against the project `DIR` as cordon run --workspace DIR would (default: the current directory)")
	return fl
}

// cmdPolicyCheck validates a policy and prints the effective one (defaults merged, presets expanded), so
// users see exactly what is in force rather than what they think they wrote, followed by a note on
// each line that lets more through than it may seem to (a wildcard is a DNS channel, see
// policy.Policy.Notes). The policy is found and checked as cordon run would for the same workspace:
// one that run would refuse (inside the workspace or a writable mount) is refused here with the same
// message, so a check that passes means a run will accept the file.
func (a *app) cmdPolicyCheck(args []string) int {
	wsFlag := new(string)
	fl := a.checkFlags(wsFlag)
	if code, ok := a.parse(fl, policyCheckUsage, args); !ok {
		return code
	}
	if fl.NArg() > 1 {
		a.errorf("policy check: too many arguments (usage: cordon %s)", policyCheckUsage)
		return exitUsage
	}
	pol, where, err := a.checkPolicy(fl.Arg(0), *wsFlag)
	if err != nil {
		a.errorf("%v", err)
		return 1
	}
	out, err := pol.Render()
	if err != nil {
		a.errorf("policy: rendering: %v", err)
		return exitCordon
	}
	// Render's output begins with the header (the source); what follows are YAML comments, so the
	// output still parses as the policy it shows.
	fmt.Fprintf(a.stdout, "%s# %s\n", out, where)
	code := 0
	if pol.Network != nil {
		// The tools are asked in the workspace, as cordon run asks them (its project config counts).
		src := presets.Source{Env: a.env}
		if project, err := cordon.ResolveWorkspace(*wsFlag, a.getenv("HOME")); err == nil {
			src.Workspace = project
		}
		for _, name := range pol.Network.Presets {
			eps, err := src.Preset(name)
			if err != nil {
				// cordon run would not start with this preset either.
				a.errorf("policy check: %v", err)
				code = 1
				continue
			}
			fmt.Fprintf(a.stdout, "# preset %s allows: %s\n", name, describeEndpoints(eps))
		}
	}
	for _, n := range pol.Notes() {
		fmt.Fprintf(a.stdout, "# note: %s\n", n)
	}
	return code
}

// checkPolicy loads the policy at path (or the one cordon run would find) and checks where it lives
// exactly as cordon run does for the workspace wsDir, saying which workspace it was checked against.
// Without --workspace, a current directory that cannot be a workspace (the home directory, a system
// directory) is not an error: the file is then checked against its writable mounts only, and says so.
func (a *app) checkPolicy(path, wsDir string) (*policy.Policy, string, error) {
	project, wsErr := cordon.ResolveWorkspace(wsDir, a.getenv("HOME"))
	if wsErr == nil {
		pol, err := a.loadPolicy(path, project)
		var inside *policy.InsideError
		if errors.As(err, &inside) {
			return nil, "", fmt.Errorf("%w (cordon run in %s refuses it the same way)", err, project)
		}
		if err != nil {
			return nil, "", err
		}
		return pol, "checked for the workspace " + project + " as cordon run checks it: the file is outside it and every writable mount", nil
	}
	if wsDir != "" {
		return nil, "", fmt.Errorf("policy check: %w", wsErr)
	}
	located, err := policy.Locate(path, policy.LocateEnv{UID: a.uid, Home: a.getenv("HOME"), XDGConfigHome: a.getenv("XDG_CONFIG_HOME")})
	if err != nil {
		return nil, "", fmt.Errorf("policy: %w", err)
	}
	if located == "" {
		return policy.Default(), "not checked for a workspace (the current directory is not one: pass --workspace DIR)", nil
	}
	pol, err := policy.Load(located, policy.Options{Home: a.getenv("HOME")})
	if err != nil {
		return nil, "", err
	}
	if err := policy.CheckOutside(located, pol.Filesystem.ReadWrite); err != nil {
		return nil, "", fmt.Errorf("%w (cordon run refuses it the same way)", err)
	}
	return pol, "not checked for a workspace (the current directory is not one: pass --workspace DIR)", nil
}

// describeEndpoints lists endpoints as --allow writes them: host for port 443, host:port otherwise.
func describeEndpoints(eps []policy.Endpoint) string {
	var out []string
	for _, ep := range eps {
		if len(ep.Ports) == 0 {
			out = append(out, ep.Host)
		}
		for _, p := range ep.Ports {
			if p == 443 {
				out = append(out, ep.Host)
			} else {
				out = append(out, ep.Host+":"+strconv.Itoa(int(p)))
			}
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}
