package main

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/probe"
)

const probeUsage = "probe [--json] [--canaries JSON] [--only PREFIX,...]"

// cmdProbe runs the escape probes in the current environment, whatever it is: inside cordon (verify
// starts it so), inside docker or another tool, or on the bare host, where most probes fail, which
// is the proof that they can. It exits 1 when any probe failed.
func (a *app) cmdProbe(args []string) int {
	// Snapshot inherited descriptors before anything else opens one.
	fl := a.flags("probe", probeUsage)
	asJSON := fl.Bool("json", false, "write the scorecard as JSON")
	canaries := fl.String("canaries", "", "coordinates of planted canaries, as JSON (cordon verify passes them)")
	only := fl.String("only", "", "run only probes whose id starts with one of these comma-separated `prefixes`")
	timeout := fl.Duration("timeout", probe.DefaultTimeout, "bound on each probe")
	if code, ok := a.parse(fl, probeUsage, args); !ok {
		return code
	}
	if fl.NArg() > 0 {
		a.errorf("probe: unexpected argument %q (usage: cordon %s)", fl.Arg(0), probeUsage)
		return exitUsage
	}
	var c probe.Canaries
	if *canaries != "" {
		dec := json.NewDecoder(strings.NewReader(*canaries))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			a.errorf("probe: --canaries: %v", err)
			return exitUsage
		}
	}
	env := probe.NewEnv(c)
	opts := probe.Options{Timeout: *timeout}
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
	}
	results := probe.Run(context.Background(), probe.All(), env, opts)
	if len(results) == 0 {
		a.errorf("probe: no probe matches --only %q", *only)
		return exitUsage
	}
	return a.writeScorecard(probe.NewScorecard(results), *asJSON)
}

func (a *app) writeScorecard(sc probe.Scorecard, asJSON bool) int {
	var err error
	if asJSON {
		err = sc.WriteJSON(a.stdout)
	} else {
		err = sc.WriteTable(a.stdout)
	}
	if err != nil {
		a.errorf("%v", err)
		return exitCordon
	}
	if !sc.OK {
		return 1
	}
	return 0
}
