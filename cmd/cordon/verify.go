package main

import (
	"context"
	"fmt"
	"os/signal"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/verify"
)

const verifyUsage = "verify [--policy FILE] [--isolation TIER] [--json]"

// cmdVerify tests the boundary the user actually has (see package verify): a real sandbox with the
// policy cordon run would use, attacked from inside, judged from the host. It exits 1 when any probe
// failed, 125 when the sandbox could not be started, 130 when interrupted.
func (a *app) cmdVerify(args []string) int {
	fl := a.flags("verify", verifyUsage)
	policyFlag := fl.String("policy", "", "policy `file` to verify (default: the one cordon run would use)")
	asJSON := fl.Bool("json", false, "write the scorecard as JSON")
	isolation := fl.String("isolation", "", "verify the tier `TIER`: native or gvisor (default: the policy's sandbox.isolation, else native)")
	if code, ok := a.parse(fl, verifyUsage, args); !ok {
		return code
	}
	if fl.NArg() > 0 {
		a.errorf("verify: unexpected argument %q (usage: cordon %s)", fl.Arg(0), verifyUsage)
		return exitUsage
	}
	// A signal stops the start or kills the sandbox; verify then removes what it planted.
	ctx, stop := signal.NotifyContext(context.Background(), runSignals...)
	defer stop()
	sc, err := verify.Run(ctx, verify.Options{
		LoadPolicy: func(project string) (*policy.Policy, error) { return a.loadPolicy(*policyFlag, project) },
		Env:        a.env,
		StateDir:   a.store().Dir,
		Isolation:  cordon.Isolation(*isolation),
		OnWarning: func(w cordon.Warning) {
			// What the run warned about (a limit degraded to an rlimit, a path not mounted)
			// matters to whoever reads the scorecard.
			if w.Kind == cordon.WarningDegraded {
				fmt.Fprintf(a.stderr, "cordon: %s\n", w)
			}
		},
	})
	switch {
	case err != nil && ctx.Err() != nil:
		a.errorf("verify: interrupted")
		return exitInterrupted
	case err != nil:
		a.errorf("verify: %v", err)
		return exitCordon
	}
	return a.writeScorecard(sc, *asJSON)
}
