package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// cmdLog prints a run's audit log readably: one line per decision.
func (a *app) cmdLog(args []string) int {
	fl := a.flags("log", "log RUN")
	if code, ok := a.parse(fl, "log RUN", args); !ok {
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
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDECISION\tNAME\tPORT\tRULE\tREASON\tOUT\tIN\tDETAIL")
	for _, e := range events {
		port := ""
		if e.Port != 0 {
			port = fmt.Sprint(e.Port)
		}
		var detail []string
		for k, v := range e.Detail {
			detail = append(detail, k+"="+v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", e.Time.Local().Format(time.TimeOnly), e.Kind, e.Decision,
			e.Name, port, e.Rule, e.Reason, e.BytesOut, e.BytesIn, strings.Join(detail, " "))
	}
	tw.Flush()
	if err != nil {
		a.errorf("log: %v", err)
		return exitCordon
	}
	return 0
}
