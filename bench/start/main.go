// Command start measures how long it takes to run `true` inside a cordon sandbox, without and with
// the egress gateway attached (--allow, so the gateway's sockets and nftables rules are set up), and
// with a policy whose gateway terminates TLS (network.tls.inspect, as any credential or HTTP rule
// makes it: the run's CA, the sandbox's CA bundle and Java trust store), against plain fork/exec of
// `true` and against bubblewrap with all namespaces unshared. Contenders are interleaved round by
// round, so that the machine's state (other jobs on a shared machine) affects every contender
// alike, and each ratio is taken within a round before its median and spread are reported; beside
// the wall clock's, the ratio of the CPU time the kernel accounted to each run's whole process tree.
// It also prints cordon's own peak memory during a run. With -runsc, the gVisor tier (`cordon run
// --isolation gvisor -- true`) runs too, against bare `runsc do true` (as a shell starts it, and
// with descriptor 255 open as cordon starts its runsc) and against the native tier, and its memory
// beside runsc's (root only: the tier needs root).
//
//	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && go run ./bench/start -cordon bin/cordon -n 50 [-baseline bin/cordon-old] [-runsc $(command -v runsc)]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/benchstat"
	"github.com/cordon-sandbox/cordon/internal/procstat"
)

func main() {
	cordon := flag.String("cordon", "bin/cordon", "cordon binary")
	n := flag.Int("n", 50, "runs of each contender")
	baseline := flag.String("baseline", "", "another cordon binary (an older build) to run as a contender, for before/after figures")
	runsc := flag.String("runsc", "", "runsc binary: also measure the gVisor tier, against `runsc do true`")
	flag.Parse()
	bin, err := filepath.Abs(*cordon)
	if err != nil {
		fail(err)
	}
	project, err := os.MkdirTemp("", "cordon-bench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(project)
	state, err := os.MkdirTemp("", "cordon-bench-state-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(state)
	truePath, err := exec.LookPath("true")
	if err != nil {
		fail(err)
	}
	// The policy lives outside the workspace, as cordon requires.
	inspect := filepath.Join(state, "inspect.yaml")
	if err := os.WriteFile(inspect, []byte("version: 1\nnetwork:\n  allow: [example.test]\n  tls:\n    inspect: [example.test]\n"), 0o644); err != nil {
		fail(err)
	}

	// Every contender starts with the descriptors a shell gives it, 0-2: one inherited from
	// whatever started the benchmark (a harness's pipe at 251, say) would size the descriptor tables
	// of runsc's children and spare bare runsc the RCU grace period its Sentry otherwise waits for
	// when it moves the streams to 253-255 (see runtimeTableFD in internal/sandbox/linux).
	if err := cloexecInherited(); err != nil {
		fail(fmt.Errorf("marking inherited descriptors close-on-exec: %w", err))
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		fail(err)
	}
	defer devnull.Close()
	// tableFiles are ExtraFiles that leave the child descriptor 255 open (/dev/null) and 3-254
	// closed: what cordon hands its runsc, given to bare runsc too as its strictest baseline.
	tableFiles := make([]*os.File, 253)
	tableFiles[252] = devnull

	type contender struct {
		name  string
		argv  []string
		extra []*os.File
		runs  []time.Duration
		cpu   []time.Duration // user and system time of the contender and every descendant it waited for
	}
	cs := []*contender{
		{name: "fork/exec true", argv: []string{truePath}},
		{name: "cordon run -- true", argv: []string{bin, "run", "--workspace", project, "--", "true"}},
		{name: "cordon run --allow -- true", argv: []string{bin, "run", "--workspace", project, "--allow", "example.test", "--", "true"}},
		{name: "cordon run, TLS inspected", argv: []string{bin, "run", "--workspace", project, "--policy", inspect, "--", "true"}},
	}
	if *baseline != "" {
		old, err := filepath.Abs(*baseline)
		if err != nil {
			fail(err)
		}
		cs = append(cs, &contender{name: "baseline run -- true", argv: []string{old, "run", "--workspace", project, "--", "true"}},
			&contender{name: "baseline run --allow -- true", argv: []string{old, "run", "--workspace", project, "--allow", "example.test", "--", "true"}},
			&contender{name: "baseline run, TLS inspected", argv: []string{old, "run", "--workspace", project, "--policy", inspect, "--", "true"}})
	}
	if *runsc != "" {
		rs, err := filepath.Abs(*runsc)
		if err != nil {
			fail(err)
		}
		runscRoot, err := os.MkdirTemp("", "cordon-bench-runsc-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(runscRoot)
		// The tier's platform; runsc do shares the host's root read-only with a memory overlay and,
		// with --network=host, would set up a veth with iptables: no network, as a bare baseline.
		do := []string{rs, "--root", runscRoot, "--platform=systrap", "--network=none", "--ignore-cgroups", "do", "true"}
		cs = append(cs, &contender{name: "runsc do true", argv: do},
			&contender{name: "runsc do true, fd 255 open", argv: do, extra: tableFiles},
			&contender{name: "cordon run --isolation gvisor", argv: []string{bin, "run", "--isolation", "gvisor", "--workspace", project, "--", "true"}},
			&contender{name: "cordon gvisor --allow", argv: []string{bin, "run", "--isolation", "gvisor", "--workspace", project, "--allow", "example.test", "--", "true"}})
		if *baseline != "" {
			old, _ := filepath.Abs(*baseline)
			cs = append(cs, &contender{name: "baseline --isolation gvisor", argv: []string{old, "run", "--isolation", "gvisor", "--workspace", project, "--", "true"}})
		}
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		cs = append(cs, &contender{name: "bwrap --unshare-all true", argv: []string{bwrap, "--unshare-all", "--die-with-parent",
			"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
			"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", project, project, "true"}})
	} else {
		fmt.Println("bwrap not installed (apt-get install bubblewrap): skipping that baseline")
	}
	env := append(os.Environ(), "XDG_STATE_HOME="+state)
	if *runsc != "" {
		rs, _ := filepath.Abs(*runsc)
		env = append(env, "PATH="+filepath.Dir(rs)+":"+os.Getenv("PATH"))
	}
	for i := 0; i < *n+3; i++ {
		for _, c := range cs {
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Env, cmd.Dir, cmd.ExtraFiles = env, project, c.extra
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				fail(fmt.Errorf("%s: %v\n%s", c.name, err, out))
			}
			if i >= 3 { // warm-up runs are not counted
				c.runs = append(c.runs, time.Since(start))
				c.cpu = append(c.cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			}
		}
		// Runs accumulate state directories; clear them so the store stays small.
		os.RemoveAll(filepath.Join(state, "cordon"))
	}
	byName := map[string]*contender{}
	fmt.Printf("%-28s %12s %12s %12s %12s\n", "contender", "p10", "median", "p90", "median CPU")
	for _, c := range cs {
		byName[c.name] = c
		s := c.runs
		fmt.Printf("%-28s %12s %12s %12s %12s\n", c.name, benchstat.Quantile(s, 0.1).Round(time.Microsecond), benchstat.Quantile(s, 0.5).Round(time.Microsecond),
			benchstat.Quantile(s, 0.9).Round(time.Microsecond), benchstat.Quantile(c.cpu, 0.5).Round(time.Microsecond))
	}
	// Ratios are taken round by round (each contender ran once per round, one after the other), so
	// a burst of load on a shared machine moves numerator and denominator together.
	ratio := func(num, den, target string) {
		a, b := byName[num], byName[den]
		if a == nil || b == nil {
			return
		}
		r, cpu := make([]float64, len(a.runs)), make([]float64, 0, len(a.runs))
		for i := range a.runs {
			r[i] = float64(a.runs[i]) / float64(b.runs[i])
			if b.cpu[i] > 0 { // never seen, but a ratio over nothing is no figure
				cpu = append(cpu, float64(a.cpu[i])/float64(b.cpu[i]))
			}
		}
		fmt.Printf("ratio %-27s / %-25s median %5.2fx (p25 %.2fx, p75 %.2fx), CPU %.2fx%s\n", num, den,
			benchstat.Median(r), benchstat.Quantile(r, 0.25), benchstat.Quantile(r, 0.75), benchstat.Median(cpu), target)
	}
	ratio("cordon run -- true", "fork/exec true", "")
	ratio("cordon run -- true", "bwrap --unshare-all true", "  target <= 1.5x (issue 2)")
	ratio("cordon run --allow -- true", "bwrap --unshare-all true", "  target <= 2x (issue 3)")
	ratio("cordon run --allow -- true", "cordon run -- true", "  the gateway's own cost")
	ratio("cordon run -- true", "baseline run -- true", "  against the baseline build")
	ratio("cordon run --allow -- true", "baseline run --allow -- true", "  against the baseline build")
	ratio("cordon run, TLS inspected", "bwrap --unshare-all true", "")
	ratio("cordon run, TLS inspected", "cordon run --allow -- true", "  interception's own cost")
	ratio("cordon run, TLS inspected", "baseline run, TLS inspected", "  against the baseline build")
	ratio("cordon run --isolation gvisor", "runsc do true", "  target <= 1.3x (issue 18)")
	ratio("cordon run --isolation gvisor", "runsc do true, fd 255 open", "  against bare runsc with cordon's descriptor table")
	ratio("runsc do true", "runsc do true, fd 255 open", "  bare runsc's own grace-period wait")
	ratio("cordon gvisor --allow", "runsc do true", "  with the gateway")
	ratio("cordon run --isolation gvisor", "cordon run -- true", "  the gVisor tier against the native one")
	ratio("cordon run --isolation gvisor", "baseline --isolation gvisor", "  against the baseline build")
	ratio("baseline --isolation gvisor", "runsc do true", "  the baseline build's tier")

	// cordon's own memory: peak RSS of the cordon process and of its init while a run is in progress.
	peakRSS(bin, env, project, []string{"run", "--workspace", project, "--", "sleep", "1"}, "its init (pid 1 inside)")
	if *runsc != "" {
		peakRSS(bin, env, project, []string{"run", "--isolation", "gvisor", "--workspace", project, "--", "sleep", "2"}, "init and runsc (sandbox, gofer) together")
	}
}

// peakRSS prints the peak RSS of cordon and of everything below it during one run of args.
func peakRSS(bin string, env []string, project string, args []string, below string) {
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, project
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	var cordonHWM, belowHWM int
	deadline := time.Now().Add(900 * time.Millisecond)
	for time.Now().Before(deadline) {
		cordonHWM = max(cordonHWM, procstat.PeakRSS(cmd.Process.Pid))
		sum := 0
		for _, p := range tree(cmd.Process.Pid) {
			sum += rss(p)
		}
		belowHWM = max(belowHWM, sum)
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Wait()
	fmt.Printf("%s: peak RSS cordon %.1f MiB (target < 15 MiB), %s %.1f MiB\n",
		strings.Join(args[:len(args)-4], " "), float64(cordonHWM)/1024, below, float64(belowHWM)/1024)
}

// tree lists every process below pid.
func tree(pid int) []int {
	var out []int
	for _, c := range procstat.Children(pid) {
		out = append(out, c)
		out = append(out, tree(c)...)
	}
	return out
}

// rss returns a process's current resident set size in KiB.
func rss(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return 0
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
