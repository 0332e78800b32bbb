//go:build linux

package probe

import "fmt"

// All returns every probe, grouped by boundary. It is a function, not a variable, so nothing global
// can be changed between runs.
func All() []Probe {
	var out []Probe
	for _, group := range [][]Probe{fileSystemProbes(), networkProbes(), credentialProbes(), processProbes(), resourceProbes(), persistenceProbes(), socketProbes(), streamProbes(), rootProbes()} {
		out = append(out, group...)
	}
	return out
}

// pass, fail and skip make a probe's verdict with its evidence.
func pass(format string, args ...any) Verdict {
	return Verdict{Status: Pass, Evidence: fmt.Sprintf(format, args...)}
}
func fail(format string, args ...any) Verdict {
	return Verdict{Status: Fail, Evidence: fmt.Sprintf(format, args...)}
}
func skip(format string, args ...any) Verdict {
	return Verdict{Status: Skip, Evidence: fmt.Sprintf(format, args...)}
}
