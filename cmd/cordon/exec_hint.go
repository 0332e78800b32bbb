package main

import (
	"fmt"
	"strings"

	"github.com/cordon-sandbox/cordon"
)

// execHint is what follows the reason a command could not be executed: the one fix that applies,
// in the flags of `cordon run` and the policy fields they stand for. A command (or a script's
// interpreter) that is inside but outside the sandbox's PATH needs its directory in the PATH; one
// the host has where the sandbox does not show it needs that directory mounted (and, when the
// PATH lacks it, added); a file without execute permission needs it, or its interpreter named.
func execHint(e *cordon.ExecError) string {
	what := "it"
	if e.Interpreter != "" {
		what = e.Interpreter
	}
	switch {
	case e.NotFound && e.Host == "" && strings.Contains(missingName(e), "/"):
		return fmt.Sprintf("; the host has no %s either", missingName(e))
	case e.NotFound && e.Host == "":
		return fmt.Sprintf("; the host has no %s in your PATH either", missingName(e))
	case e.NotFound && len(e.Hidden) == 0:
		dir := e.PathDir()
		if dir == "" {
			return ""
		}
		return fmt.Sprintf("; %s is at %s, outside that PATH: add %s to it with %s", what, e.Host, dir, pathFix(dir, e.SearchPath))
	case e.NotFound && e.Preset != "":
		return fmt.Sprintf("; %s is at %s on the host, in a toolchain the %s preset shows read-only (and puts in the PATH): add it with network.presets: [%s] in the policy",
			what, e.Host, e.Preset, e.Preset)
	case e.NotFound:
		vols := make([]string, len(e.Hidden))
		for i, d := range e.Hidden {
			vols[i] = "-v " + d + ":ro"
		}
		hint := fmt.Sprintf("; %s is at %s on the host, where the sandbox does not show it: mount it with %s (filesystem.readonly: [%s] in the policy)",
			what, e.Host, strings.Join(vols, " "), strings.Join(e.Hidden, ", "))
		if dir := e.PathDir(); dir != "" {
			hint += fmt.Sprintf(" and add %s to the PATH with %s", dir, pathFix(dir, e.SearchPath))
		}
		return hint
	case e.NoExecBit:
		return fmt.Sprintf("; make it executable (chmod +x %s) or name its interpreter before it (sh %s, say)", e.Path, e.Path)
	}
	return ""
}

// missingName is what was not found: the command, or the script's interpreter.
func missingName(e *cordon.ExecError) string {
	if e.Interpreter != "" {
		return e.Interpreter
	}
	return e.Path
}

// pathFix says how to put dir first in the sandbox's PATH, for this run and in the policy. The new
// value is spelled out once: the sandbox's PATH is long, and the error before the hint names it too.
func pathFix(dir, searchPath string) string {
	p := dir
	if searchPath != "" {
		p += ":" + searchPath
	}
	return fmt.Sprintf("-e PATH=%s (or, in the policy, env.set: {PATH: <that value>})", p)
}
