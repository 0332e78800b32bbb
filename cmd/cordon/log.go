package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// logUsage is cordon log's synopsis.
const logUsage = "log [--denied] [--json] RUN"

// cmdLog prints a run's audit log readably: one line per decision, details in a stable order.
// --denied keeps the refusals (what a reviewer looks for first); --json prints the events as JSON
// lines for tools.
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
	events, err := audit.Read(filepath.Join(r.Dir, "audit.jsonl"))
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(a.stdout, "run %s had no network (no audit log)\n", r.Meta.ID)
		return 0
	}
	if *denied {
		events = slices.DeleteFunc(events, func(e audit.Event) bool { return e.Decision != "deny" })
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
	}
	if err != nil {
		a.errorf("log: %v", err)
		return exitCordon
	}
	return 0
}

// printEvents writes events as a table, each event's details sorted by key.
func (a *app) printEvents(events []audit.Event) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDECISION\tNAME\tPORT\tRULE\tREASON\tOUT\tIN\tDETAIL")
	for _, e := range events {
		port := ""
		if e.Port != 0 {
			port = fmt.Sprint(e.Port)
		}
		var detail []string
		for _, k := range slices.Sorted(maps.Keys(e.Detail)) {
			detail = append(detail, k+"="+e.Detail[k])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", e.Time.Local().Format(time.TimeOnly), e.Kind, e.Decision,
			e.Name, port, e.Rule, e.Reason, e.BytesOut, e.BytesIn, strings.Join(detail, " "))
	}
	tw.Flush()
}
