package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// logUsage is cordon log's synopsis.
const logUsage = "log [--denied] [--json] RUN"

// cmdLog prints a run's audit log readably: one line per event, details in a stable order. An event
// may stand for many decisions (repeats the log folded, with their count) and the log's own records
// say what it suppressed at its size limit. --denied keeps the refusals (what a reviewer looks for
// first) and those records; --json prints the events as JSON lines for tools.
func (a *app) cmdLog(args []string) int {
	fl := a.flags("log", logUsage)
	denied := fl.Bool("denied", false, "only the refusals")
	asJSON := fl.Bool("json", false, "one JSON object per event, as the log stores them")
	if code, ok := a.parse(fl, logUsage, args); !ok {
		return code
	}
	r, ok := a.getRun("log", fl.Args())
	if !ok {
		return exitUsage
	}
	events, err := audit.Read(r.AuditLogPath())
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(a.stdout, "run %s had no network (no audit log)\n", r.ID())
		return 0
	}
	if *denied {
		events = slices.DeleteFunc(events, func(e audit.Event) bool { return e.Decision != audit.Deny && e.Kind != audit.KindAudit })
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, e := range events {
			if werr := enc.Encode(e); werr != nil {
				a.errorf("log: %v", werr)
				return exitCordon
			}
		}
	} else {
		a.printEvents(events)
		if !*denied {
			// Counted from the events, so that a run still going shows what it spent so far.
			for _, line := range budgetLines(usageOf(events)) {
				fmt.Fprintf(a.stdout, "budget %s\n", line)
			}
		}
	}
	if err != nil {
		a.errorf("log: %v", err)
		return exitCordon
	}
	return 0
}

// printEvents writes events as a table in the order they happened, each event's details sorted by
// key. A folded event shows its count, the span of time it covers, and for names that differed the
// group ("*.evil.test": the domain and the names under it; "*": any name) with a sample of the names.
func (a *app) printEvents(events []audit.Event) {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(x, y audit.Event) int { return x.Time.Compare(y.Time) })
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDECISION\tCOUNT\tNAME\tPORT\tRULE\tREASON\tOUT\tIN\tDETAIL")
	for _, e := range events {
		port := ""
		if e.Port != 0 {
			port = fmt.Sprint(e.Port)
		}
		when := e.Time.Local().Format(time.TimeOnly)
		if last := e.Last.Local().Format(time.TimeOnly); !e.Last.IsZero() && last != when {
			when += "-" + last
		}
		name := e.Name
		switch e.Group {
		case "":
		case "*":
			name = "*"
		default:
			name = "*." + e.Group
		}
		var detail []string
		if e.Group != "" {
			detail = append(detail, "names="+strings.Join(e.Names, ",")+",…")
		}
		for _, k := range slices.Sorted(maps.Keys(e.Detail)) {
			detail = append(detail, k+"="+e.Detail[k])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", when, e.Kind, e.Decision, e.Decisions(),
			name, port, e.Rule, e.Reason, e.BytesOut, e.BytesIn, strings.Join(detail, " "))
	}
	tw.Flush()
}
