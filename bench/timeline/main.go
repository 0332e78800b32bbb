// Command timeline shows where the start of `cordon run -- true` goes, step by step, in cordon and
// in the sandbox's init: it runs a cordon built with the cordontrace tag (internal/starttrace), reads
// the timestamps both processes print, and gives for each step the median time after cordon's main
// and the median time since the step before in the same process. With -baseline a second traced build
// runs in the same rounds, interleaved, so that two builds are compared under the same load; with
// -allow every run also attaches the gateway (--allow example.test), whose sockets and rules are
// steps of their own.
//
// perf trace (bench/start/phases.sh) costs ~25 µs per traced system call, a large share of steps
// that each take a few hundred microseconds; these marks cost a clock read and a write each.
//
//	CGO_ENABLED=0 go build -tags cordontrace -o bin/cordon-trace ./cmd/cordon
//	go run ./bench/timeline -cordon bin/cordon-trace -n 40 [-baseline bin/cordon-trace-old] [-allow] [-policy FILE]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/benchstat"
	"github.com/cordon-sandbox/cordon/internal/starttrace"
)

func main() {
	cordon := flag.String("cordon", "bin/cordon-trace", "cordon binary built with -tags cordontrace")
	baseline := flag.String("baseline", "", "another traced cordon binary, run in the same rounds")
	n := flag.Int("n", 40, "runs of each binary")
	allow := flag.Bool("allow", false, "attach the gateway (--allow example.test)")
	policyFile := flag.String("policy", "", "run with this policy `file` (outside the project), to time what it sets up")
	flag.Parse()

	project, err := os.MkdirTemp("", "cordon-timeline-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(project)
	state, err := os.MkdirTemp("", "cordon-timeline-state-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(state)

	bins := []string{*cordon}
	if *baseline != "" {
		bins = append(bins, *baseline)
	}
	args := []string{"run", "--workspace", project}
	if *allow {
		args = append(args, "--allow", "example.test")
	}
	if *policyFile != "" {
		abs, err := filepath.Abs(*policyFile)
		if err != nil {
			fail(err)
		}
		args = append(args, "--policy", abs)
	}
	args = append(args, "--", "true")
	env := append(os.Environ(), "XDG_STATE_HOME="+state)

	traces := make([][]run, len(bins))
	for i := 0; i < *n+2; i++ {
		for b, bin := range bins {
			abs, err := filepath.Abs(bin)
			if err != nil {
				fail(err)
			}
			cmd := exec.Command(abs, args...)
			cmd.Env, cmd.Dir = env, project
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if out, err := cmd.Output(); err != nil {
				fail(fmt.Errorf("%s: %v\n%s%s", bin, err, out, stderr.Bytes()))
			}
			r, err := parse(stderr.Bytes())
			if err != nil {
				fail(fmt.Errorf("%s: %w", bin, err))
			}
			if i >= 2 { // warm-up runs are not counted
				traces[b] = append(traces[b], r)
			}
		}
		os.RemoveAll(filepath.Join(state, "cordon"))
	}

	tables := make([]map[string]stepTimes, len(bins))
	for b := range bins {
		tables[b] = summarize(traces[b])
	}
	steps := order(traces[0])
	fmt.Printf("ms after cordon's main, median of %d runs; in brackets, since the step before in the same process\n", *n)
	fmt.Printf("%-34s", "step")
	for _, bin := range bins {
		fmt.Printf(" %24s", filepath.Base(bin))
	}
	fmt.Println()
	for _, s := range steps {
		fmt.Printf("%-34s", s)
		for b := range bins {
			t, ok := tables[b][s]
			if !ok {
				fmt.Printf(" %24s", "-")
				continue
			}
			fmt.Printf(" %12.2f %11s", benchstat.Median(t.at), fmt.Sprintf("(%.2f)", benchstat.Median(t.since)))
		}
		fmt.Println()
	}
}

// mark is one timestamp: which process (cordon, or init: pid 1 in its namespace) and when.
type mark struct {
	step string
	init bool
	at   float64 // seconds, CLOCK_MONOTONIC
}

// run is one start's marks, in time order.
type run []mark

// parse reads the marks of one run from its standard error. A run whose first mark is not cordon's
// main is an untraced binary.
func parse(b []byte) (run, error) {
	var r run
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) != 4 || f[0] != starttrace.Prefix {
			continue
		}
		at, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("bad mark %q: %w", sc.Text(), err)
		}
		r = append(r, mark{step: f[3], init: f[2] == "1", at: at})
	}
	sort.SliceStable(r, func(i, j int) bool { return r[i].at < r[j].at })
	if len(r) == 0 || r[0].step != "main" || r[0].init {
		return nil, fmt.Errorf("no marks: build it with -tags cordontrace")
	}
	return r, nil
}

// stepTimes are one step's times over the runs: ms after cordon's main, and ms since the step
// before it in the same process.
type stepTimes struct{ at, since []float64 }

// summarize keys each step by its process ("cordon start", "init main"). Init's first step counts
// from cordon's "launch", where the clone of init begins: clone, exec and the runtime's start.
func summarize(runs []run) map[string]stepTimes {
	t := map[string]stepTimes{}
	for _, r := range runs {
		t0 := r[0].at
		last := map[bool]float64{false: t0}
		for _, m := range r {
			if m.step == "launch" && !m.init {
				last[true] = m.at
			}
			prev, ok := last[m.init]
			if !ok {
				prev = m.at
			}
			name := "cordon " + m.step
			if m.init {
				name = "init   " + m.step
			}
			st := t[name]
			st.at = append(st.at, (m.at-t0)*1e3)
			st.since = append(st.since, (m.at-prev)*1e3)
			t[name] = st
			last[m.init] = m.at
		}
	}
	return t
}

// order lists the steps by their median time after cordon's main.
func order(runs []run) []string {
	t := summarize(runs)
	steps := make([]string, 0, len(t))
	for s := range t {
		steps = append(steps, s)
	}
	sort.Slice(steps, func(i, j int) bool { return benchstat.Median(t[steps[i]].at) < benchstat.Median(t[steps[j]].at) })
	return steps
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "timeline:", err)
	os.Exit(1)
}
