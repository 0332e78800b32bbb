package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// The review commands: a run's changes stay in its own directory until the user looks at them and
// decides.

// runsUsage is cordon runs' synopsis.
const runsUsage = "runs [--all] [-q] [--json]"

// cmdRuns lists the runs of the current directory's project (every project's with --all): a table,
// ids only (-q, for scripts: cordon discard $(cordon runs -q)), or one JSON object per run.
func (a *app) cmdRuns(args []string) int {
	fl := a.flags("runs", runsUsage)
	all := fl.Bool("all", false, "list the runs of every project, not only the current directory's")
	quiet := fl.Bool("q", false, "print only the run ids")
	asJSON := fl.Bool("json", false, "one JSON object per run")
	if code, ok := a.parse(fl, runsUsage, args); !ok {
		return code
	}
	project := ""
	if !*all {
		var ok bool
		if project, ok = a.project("runs"); !ok {
			return exitCordon
		}
	}
	runs, err := a.store().ListProject(project)
	if err != nil {
		a.errorf("runs: %v", err)
		return exitCordon
	}
	if len(runs) == 0 && project != "" {
		if every, err := a.store().List(); err == nil && len(every) > 0 {
			fmt.Fprintf(a.stderr, "cordon: no runs of this project (%s); %d of other projects: cordon runs --all\n", project, len(every))
		}
	}
	switch {
	case *quiet:
		for _, r := range runs {
			fmt.Fprintln(a.stdout, r.ID())
		}
	case *asJSON:
		enc := json.NewEncoder(a.stdout)
		for _, r := range runs {
			if err := enc.Encode(runJSON(r)); err != nil {
				a.errorf("runs: %v", err)
				return exitCordon
			}
		}
	default:
		a.printRuns(runs)
	}
	return 0
}

// runRecord is a run as runs --json prints it. Changed is null when the changes cannot be read.
type runRecord struct {
	ID       string    `json:"id"`
	Name     string    `json:"name,omitempty"`
	Project  string    `json:"project"`
	Command  []string  `json:"command"`
	Started  time.Time `json:"started"`
	State    string    `json:"state"`
	ExitCode int       `json:"exit_code"`
	Changed  *int      `json:"changed"`
	// Budgets are the run's spend per host with a budget (policy budgets), once it ended.
	Budgets map[string]cordon.BudgetTotals `json:"budgets,omitempty"`
}

func runJSON(r *cordon.FinishedRun) runRecord {
	m := r.Info()
	rec := runRecord{ID: m.ID, Name: m.Name, Project: m.Project, Command: m.Command, Started: m.Started, State: m.State, ExitCode: m.ExitCode}
	if cs, err := r.Changes(); err == nil {
		n := len(cs)
		rec.Changed = &n
	}
	rec.Budgets, _ = r.Budgets()
	return rec
}

func (a *app) printRuns(runs []*cordon.FinishedRun) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROJECT\tCOMMAND\tSTARTED\tSTATE\tCHANGED\tCOST")
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
		id := m.ID
		if m.Name != "" {
			id += " (" + m.Name + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, m.Project, abbreviate(strings.Join(m.Command, " "), 40),
			m.Started.Local().Format(time.DateTime), state, changed, runCost(r))
	}
	tw.Flush()
}

// project is the project of the current directory, by which "last" and run-id prefixes resolve.
func (a *app) project(name string) (string, bool) {
	p, err := cordon.ProjectOf(".")
	if err != nil {
		a.errorf("%s: %v", name, err)
		return "", false
	}
	return p, true
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// getRun resolves the single RUN argument of a review command: "last" and id prefixes among the
// runs of the current directory's project, a full id among every run (applying a run of another
// project takes typing its id).
func (a *app) getRun(name string, args []string) (*cordon.FinishedRun, bool) {
	if len(args) != 1 {
		a.errorf("%s: expected one RUN: an id, a unique prefix of one, or last (see cordon runs)", name)
		return nil, false
	}
	project, ok := a.project(name)
	if !ok {
		return nil, false
	}
	r, err := a.store().Find(args[0], project)
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

// gcUsage is cordon gc's synopsis.
const gcUsage = "gc [--all] [--unapplied --older-than D]"

// cmdGC removes the runs of the current directory's project (every project's with --all) that hold
// nothing to lose: applied, discarded, and finished without changes. Runs with changes nobody
// applied go only when asked for with an age (--unapplied --older-than D), each named as it goes.
func (a *app) cmdGC(args []string) int {
	fl := a.flags("gc", gcUsage)
	all := fl.Bool("all", false, "the runs of every project, not only the current directory's")
	unapplied := fl.Bool("unapplied", false, "also remove runs whose changes were never applied or discarded (needs --older-than)")
	older := fl.String("older-than", "", "only runs whose state changed longer ago than this (e.g. 36h, 7d)")
	if code, ok := a.parse(fl, gcUsage, args); !ok {
		return code
	}
	if fl.NArg() != 0 {
		a.errorf("gc: unexpected argument %q (usage: cordon %s)", fl.Arg(0), gcUsage)
		return exitUsage
	}
	if err := cordon.SweepServices(a.env); err != nil {
		a.errorf("gc: %v", err)
	}
	// Kubernetes runs whose cordon was interrupted: their pods and Secrets go first, whatever
	// happens to their local records below.
	cleaned, err := a.store().CleanKube(context.Background(), a.env)
	for _, c := range cleaned {
		if c.Recovered {
			fmt.Fprintf(a.stdout, "recovered %s from its pod: %d changed paths (cordon diff %s)\n", c.ID, c.Changes, c.ID)
		}
		if c.Note != "" {
			fmt.Fprintf(a.stdout, "%s: %s\n", c.ID, c.Note)
		}
		fmt.Fprintf(a.stdout, "deleted the pod and Secret of %s from its cluster\n", c.ID)
	}
	if err != nil {
		a.errorf("gc: %v", err)
	}
	opts := cordon.GCOptions{Unapplied: *unapplied}
	if *older != "" {
		d, err := parseAge(*older)
		if err != nil {
			a.errorf("gc: --older-than: %v", err)
			return exitUsage
		}
		opts.OlderThan = d
	} else if *unapplied {
		a.errorf("gc: --unapplied throws work away: say how old it must be with --older-than D (e.g. 7d)")
		return exitUsage
	}
	if !*all {
		var ok bool
		if opts.Project, ok = a.project("gc"); !ok {
			return exitCordon
		}
	}
	opts.Removing = func(m cordon.RunInfo, changes int) {
		n := fmt.Sprint(changes)
		if changes < 0 {
			n = "unreadable"
		}
		fmt.Fprintf(a.stdout, "removing %s of %s (%s, %s): %s unapplied changes\n", m.ID, m.Project,
			abbreviate(strings.Join(m.Command, " "), 40), m.State, n)
	}
	removed, err := a.store().GC(opts)
	for _, m := range removed {
		fmt.Fprintf(a.stdout, "removed %s (%s)\n", m.ID, m.State)
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

// runCost is what a run spent on hosts with a budget, at the policy's prices: "-" for a run without
// budgets (or still going), "?" when its totals cannot be read.
func runCost(r *cordon.FinishedRun) string {
	totals, err := r.Budgets()
	switch {
	case err != nil:
		return "?"
	case totals == nil:
		return "-"
	}
	var usd float64
	for _, t := range totals {
		usd += t.CostUSD
	}
	return dollars(usd)
}
