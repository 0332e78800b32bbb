package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-sandbox/cordon"
)

// printEnd says how a run ended, in at most two lines that each fit in 100 columns for an ordinary
// invocation (and one more per host with a budget, its usage): the gateway's summary when the run
// had a network, then what became of the run. The run's id appears once, in the command to type
// next, spelled with the name cordon was invoked by, so that it can be copied as it is. A run removed because it changed nothing and allowed only
// connections goes with its audit log, which the line says; one removed without network leaves no
// line at all (as docker run --rm prints nothing).
func (a *app) printEnd(id string, exit cordon.Exit) {
	net := exit.Network != nil
	if net {
		fmt.Fprintf(a.stderr, "cordon: network: %s\n", exit.Network)
	}
	for _, line := range budgetLines(exit.Budgets) {
		fmt.Fprintf(a.stderr, "cordon: budget %s\n", line)
	}
	me := a.invokedName()
	switch exit.Kept {
	case "":
		if net {
			fmt.Fprintf(a.stderr, "cordon: no changes: the run and its audit log were removed (--keep keeps them)\n")
		}
	case cordon.KeptChanges:
		then := "then apply or discard"
		if net {
			then = "also log, apply, discard"
		}
		paths := "paths"
		if exit.Changed == 1 {
			paths = "path"
		}
		fmt.Fprintf(a.stderr, "cordon: changed %d %s: %s diff %s (%s)\n", exit.Changed, paths, me, id, then)
	default:
		why := keptWhy[exit.Kept]
		if why == "" {
			why = string(exit.Kept)
		}
		if net {
			fmt.Fprintf(a.stderr, "cordon: no changes; kept (%s): %s log %s\n", why, me, id)
		} else {
			fmt.Fprintf(a.stderr, "cordon: no changes; run %s kept (%s)\n", id, why)
		}
	}
}

// keptWhy words why a run that changed nothing was kept.
var keptWhy = map[cordon.KeepReason]string{
	cordon.KeptAsked:   "--keep",
	cordon.KeptNetwork: "its audit log flags requests",
	cordon.KeptListing: "it lists the masked files",
	cordon.KeptFailed:  "cordon ended it",
}

// invokedName is how the user can type cordon again from where they are: os.Args[0] as typed
// (bin/cordon, ./cordon, an absolute path), or its base name when that is what the PATH finds
// (a shell passes the name as typed, which then has no slash; a launcher may pass the full path of
// what it found there). A name a shell would split or expand is quoted.
func (a *app) invokedName() string {
	name := a.argv0
	if name == "" {
		return "cordon"
	}
	if strings.Contains(name, "/") {
		base := filepath.Base(name)
		if found := a.lookPath(base); found != "" && sameFile(found, name) {
			name = base
		}
	}
	return shellQuote(name)
}

// lookPath returns the file the caller's PATH finds for name, or "".
func (a *app) lookPath(name string) string {
	for _, dir := range filepath.SplitList(a.getenv("PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // "." and relative entries depend on the directory: not a stable name
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// shellQuote returns s as a POSIX shell word: as it is when it holds only characters no shell
// treats specially, else in single quotes.
func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
