package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// The review commands: a run's changes stay in its own directory until the user looks at them and
// decides.

func (a *app) cmdRuns(args []string) int {
	fl := a.flags("runs", "runs")
	if code, ok := a.parse(fl, "runs", args); !ok {
		return code
	}
	runs, err := a.store().List()
	if err != nil {
		a.errorf("runs: %v", err)
		return exitCordon
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROJECT\tCOMMAND\tSTARTED\tSTATE\tCHANGED")
	for _, r := range runs {
		changed := "?"
		if cs, err := r.Changes(); err == nil {
			changed = fmt.Sprint(len(cs))
		}
		m := r.Info()
		state := m.State
		if state == runstate.StateExited {
			state = fmt.Sprintf("exited(%d)", m.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Project, abbreviate(strings.Join(m.Command, " "), 40),
			m.Started.Local().Format(time.DateTime), state, changed)
	}
	tw.Flush()
	return 0
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// getRun resolves the single RUN argument of a review command.
func (a *app) getRun(name string, args []string) (*cordon.FinishedRun, bool) {
	if len(args) != 1 {
		a.errorf("%s: expected one RUN: an id, a unique prefix of one, or last (see cordon runs)", name)
		return nil, false
	}
	if args[0] == "last" {
		r, err := a.store().Last()
		if err != nil {
			a.errorf("%s: no runs yet", name)
			return nil, false
		}
		return r, true
	}
	r, err := a.store().Open(args[0])
	if err != nil {
		a.errorf("%s: %v", name, err)
		return nil, false
	}
	return r, true
}

func (a *app) cmdDiff(args []string) int {
	const usage = "diff [--stat] RUN"
	fl := a.flags("diff", usage)
	stat := fl.Bool("stat", false, "summarize: one line per changed path")
	if code, ok := a.parse(fl, usage, args); !ok {
		return code
	}
	r, ok := a.getRun("diff", fl.Args())
	if !ok {
		return exitUsage
	}
	if err := r.Diff(a.stdout, *stat); err != nil {
		a.errorf("diff: %v", err)
		return exitCordon
	}
	return 0
}

func (a *app) cmdApply(args []string) int {
	const usage = "apply [--include-risky] RUN"
	fl := a.flags("apply", usage)
	risky := fl.Bool("include-risky", false, "also carry changes that could run code on the host later (after reviewing the list apply prints)")
	if code, ok := a.parse(fl, usage, args); !ok {
		return code
	}
	r, ok := a.getRun("apply", fl.Args())
	if !ok {
		return exitUsage
	}
	rep, err := r.Apply(cordon.ApplyOptions{IncludeRisky: *risky})
	if err != nil {
		a.errorf("apply: %v", err)
		return 1
	}
	fmt.Fprintf(a.stdout, "applied %s to %s: %d added, %d modified, %d deleted\n", r.ID(), r.Info().Project,
		len(rep.Added), len(rep.Modified), len(rep.Deleted))
	for _, risk := range rep.Risky {
		fmt.Fprintf(a.stdout, "  carried (--include-risky): %v\n", risk)
	}
	return 0
}

func (a *app) cmdExport(args []string) int {
	const usage = "export --branch NAME [--include-risky] RUN"
	fl := a.flags("export", usage)
	branch := fl.String("branch", "", "new branch to commit the run's result on")
	risky := fl.Bool("include-risky", false, "also carry changes that could run code on the host later")
	if code, ok := a.parse(fl, usage, args); !ok {
		return code
	}
	if *branch == "" {
		a.errorf("export: --branch is required (usage: cordon %s)", usage)
		return exitUsage
	}
	r, ok := a.getRun("export", fl.Args())
	if !ok {
		return exitUsage
	}
	commit, err := r.Export(*branch, cordon.ApplyOptions{IncludeRisky: *risky})
	if err != nil {
		a.errorf("export: %v", err)
		return 1
	}
	fmt.Fprintf(a.stdout, "exported %s as %s on branch %s\n", r.ID(), commit, *branch)
	return 0
}

func (a *app) cmdDiscard(args []string) int {
	fl := a.flags("discard", "discard RUN")
	if code, ok := a.parse(fl, "discard RUN", args); !ok {
		return code
	}
	r, ok := a.getRun("discard", fl.Args())
	if !ok {
		return exitUsage
	}
	if err := r.Discard(); err != nil {
		a.errorf("discard: %v", err)
		return exitCordon
	}
	fmt.Fprintf(a.stdout, "discarded %s\n", r.ID())
	return 0
}

func (a *app) cmdGC(args []string) int {
	const usage = "gc [--older-than 7d]"
	fl := a.flags("gc", usage)
	older := fl.String("older-than", "7d", "remove applied and discarded runs (exported ones are kept) older than this (e.g. 36h, 7d)")
	if code, ok := a.parse(fl, usage, args); !ok {
		return code
	}
	d, err := parseAge(*older)
	if err != nil {
		a.errorf("gc: --older-than: %v", err)
		return exitUsage
	}
	removed, err := a.store().GC(d)
	for _, id := range removed {
		fmt.Fprintf(a.stdout, "removed %s\n", id)
	}
	if err != nil {
		a.errorf("gc: %v", err)
		return exitCordon
	}
	return 0
}

// parseAge accepts Go durations and whole days ("7d").
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(d, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != d {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
