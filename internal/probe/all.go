package probe

// All returns every probe, grouped by boundary. It is a function, not a variable, so nothing global
// can be changed between runs.
func All() []Probe {
	var out []Probe
	for _, group := range [][]Probe{fileSystemProbes(), networkProbes(), credentialProbes(), processProbes(), resourceProbes(), persistenceProbes(), socketProbes(), streamProbes()} {
		out = append(out, group...)
	}
	return out
}
