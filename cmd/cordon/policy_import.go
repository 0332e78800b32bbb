package main

import (
	"flag"

	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/policyimport"
)

const importUsage = "policy import --from srt|claude-code FILE"

// importer is the translation for a --from format, or nil.
func importer(format string) func(string, []byte) ([]byte, error) {
	switch format {
	case "srt":
		return policyimport.SRT
	case "claude-code":
		return policyimport.ClaudeCode
	}
	return nil
}

func (a *app) importFlags(from *string) *flag.FlagSet {
	fl := a.flags("policy import", importUsage)
	fl.StringVar(from, "from", "", "the `FORMAT` of FILE: srt (sandbox-runtime settings JSON) or claude-code (a Claude Code settings.json)")
	return fl
}

// cmdPolicyImport prints the cordon policy equivalent to another sandbox's settings, each line
// commented with the setting it came from and every setting without an equivalent listed as a
// comment. It writes nothing: the user saves, reads and checks the output. The output is loaded with
// cordon's own parser before it is printed, so what is shown is a policy cordon accepts.
func (a *app) cmdPolicyImport(args []string) int {
	from := new(string)
	fl := a.importFlags(from)
	if code, ok := a.parse(fl, importUsage, args); !ok {
		return code
	}
	conv := importer(*from)
	if conv == nil || fl.NArg() != 1 {
		a.errorf("policy import: expected --from srt or --from claude-code and one FILE (usage: cordon %s)", importUsage)
		return exitUsage
	}
	name := fl.Arg(0)
	data, err := readCapped(name)
	if err != nil {
		a.errorf("policy import: %v", err)
		return 1
	}
	out, err := conv(name, data)
	if err != nil {
		a.errorf("policy import: %v", err)
		return 1
	}
	if _, err := policy.Parse("(imported from "+name+")", out, policy.Options{Home: a.getenv("HOME")}); err != nil {
		a.errorf("policy import: the translation does not load (a bug of the importer): %v", err)
		return exitCordon
	}
	if _, err := a.stdout.Write(out); err != nil {
		a.errorf("policy import: %v", err)
		return exitCordon
	}
	return 0
}
