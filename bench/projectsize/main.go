// Command projectsize measures whether a project's size shows in cordon's start: `cordon run -- true`
// in a 10-file project against one of 100,000 files (~400 MB), as a plain directory and as a git
// repository, warm (the secret scan's cache made by an earlier start), with the ratio to the 10-file
// project taken round by round, and the peak memory of cordon and of its init in each. The first
// (cold) start of each project is reported apart: it reads every file once.
//
// -baseline adds an older build, with a state directory of its own (its scan cache), for before/after
// figures in the same rounds.
//
//	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && go run ./bench/projectsize -cordon bin/cordon -n 20 [-files 100000] [-baseline bin/cordon-old]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/benchstat"
	"github.com/cordon-sandbox/cordon/internal/procstat"
)

func main() {
	cordon := flag.String("cordon", "bin/cordon", "cordon binary")
	n := flag.Int("n", 20, "warm runs in each project")
	files := flag.Int("files", 100000, "files in the large projects")
	size := flag.Int("size", 4000, "bytes per file")
	baseline := flag.String("baseline", "", "another cordon binary (an older build) to run as a contender")
	flag.Parse()
	bins := []string{*cordon}
	if *baseline != "" {
		bins = append(bins, *baseline)
	}
	for i, b := range bins {
		abs, err := filepath.Abs(b)
		if err != nil {
			fail(err)
		}
		bins[i] = abs
	}
	tmp, err := os.MkdirTemp("", "cordon-projectsize-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)

	type project struct {
		name, dir string
		cold      time.Duration
		runs, cpu []time.Duration
		bin, env  []string // the binary and its environment (a state directory per binary)
	}
	sizes := []string{"10 files", fmt.Sprintf("%d files", *files), fmt.Sprintf("%d files, git", *files)}
	var ps []*project
	for i, name := range sizes {
		dir := filepath.Join(tmp, fmt.Sprintf("p%d", i))
		count := 10
		if i > 0 {
			count = *files
		}
		t0 := time.Now()
		if err := makeTree(dir, count, *size); err != nil {
			fail(err)
		}
		if strings.HasSuffix(name, "git") {
			git := exec.Command("sh", "-ec", "git init -q && git add -A && git -c gc.auto=0 -c user.name=b -c user.email=b@b commit -qm tree")
			git.Dir = dir
			if out, err := git.CombinedOutput(); err != nil {
				fail(fmt.Errorf("git: %v\n%s", err, out))
			}
		}
		fmt.Printf("built %s in %s\n", name, time.Since(t0).Round(time.Millisecond))
	}
	for b, bin := range bins {
		env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(tmp, fmt.Sprintf("state%d", b)))
		for i, name := range sizes {
			if b > 0 {
				name = "baseline " + name
			}
			ps = append(ps, &project{name: name, dir: filepath.Join(tmp, fmt.Sprintf("p%d", i)), bin: []string{bin}, env: env})
		}
	}
	// The scan's cache trusts only what changed more than a second before it scanned.
	time.Sleep(1100 * time.Millisecond)
	// run returns the wall time of one start and the CPU time cordon used (its own and that of the
	// children it waited for), which load from other jobs on a shared machine moves far less.
	run := func(p *project, argv ...string) (time.Duration, time.Duration) {
		cmd := exec.Command(p.bin[0], append([]string{"run", "--workspace", p.dir, "--"}, argv...)...)
		cmd.Env, cmd.Dir = p.env, p.dir
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			fail(fmt.Errorf("%s: %v\n%s", p.name, err, out))
		}
		return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	for _, p := range ps {
		p.cold, _ = run(p, "true")
		run(p, "true") // the first warm start writes nothing; warm the page cache for the binary too
	}
	for range *n {
		for _, p := range ps {
			wall, cpu := run(p, "true")
			p.runs, p.cpu = append(p.runs, wall), append(p.cpu, cpu)
		}
		for b := range bins {
			os.RemoveAll(filepath.Join(tmp, fmt.Sprintf("state%d", b), "cordon", "runs"))
		}
	}
	fmt.Printf("%-31s %10s %10s %10s %10s\n", "cordon run -- true", "cold", "p10", "median", "p90")
	for _, p := range ps {
		s := p.runs
		fmt.Printf("%-31s %10s %10s %10s %10s\n", p.name, p.cold.Round(time.Millisecond), benchstat.Quantile(s, 0.1).Round(time.Microsecond),
			benchstat.Quantile(s, 0.5).Round(time.Microsecond), benchstat.Quantile(s, 0.9).Round(time.Microsecond))
	}
	ratio := func(what string, num, den *project, target string) {
		a, b := num.runs, den.runs
		if what == "cpu" {
			a, b = num.cpu, den.cpu
		}
		r := make([]float64, len(a))
		for i := range r {
			r[i] = float64(a[i]) / float64(b[i])
		}
		fmt.Printf("%-4s %-29s / %-22s median %.2fx (p25 %.2fx, p75 %.2fx)%s\n",
			what, num.name, den.name, benchstat.Median(r), benchstat.Quantile(r, 0.25), benchstat.Quantile(r, 0.75), target)
	}
	for _, p := range ps {
		s := p.cpu
		fmt.Printf("cpu (cordon and what it reaped) %-29s median %s\n", p.name, benchstat.Quantile(s, 0.5).Round(time.Microsecond))
	}
	for _, what := range []string{"wall", "cpu"} {
		for b := range bins {
			small := ps[b*len(sizes)]
			for _, p := range ps[b*len(sizes)+1 : (b+1)*len(sizes)] {
				ratio(what, p, small, "  target <= 1.2x (issue 20)")
			}
		}
		for i := len(sizes); i < len(ps); i++ {
			ratio(what, ps[i-len(sizes)], ps[i], "  against the baseline build")
		}
	}
	// Peak memory of cordon and of its init during a warm run (their high-water marks include the
	// scan, which ends before the command starts).
	for _, p := range ps {
		cmd := exec.Command(p.bin[0], "run", "--workspace", p.dir, "--", "sleep", "1")
		cmd.Env, cmd.Dir = p.env, p.dir
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		var cordonHWM, initHWM int
		for deadline := time.Now().Add(900 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			cordonHWM = max(cordonHWM, procstat.PeakRSS(cmd.Process.Pid))
			for _, child := range procstat.Children(cmd.Process.Pid) {
				initHWM = max(initHWM, procstat.PeakRSS(child))
			}
		}
		cmd.Wait()
		fmt.Printf("peak RSS, %-30s cordon %.1f MiB, its init %.1f MiB, both %.1f MiB (target: cordon < 15 MiB)\n",
			p.name+":", float64(cordonHWM)/1024, float64(initHWM)/1024, float64(cordonHWM+initHWM)/1024)
	}
}

// makeTree writes count files of about size bytes of source-like text into 100-file directories,
// ten to a package directory, as a large code base lays them out.
func makeTree(root string, count, size int) error {
	for i := range count {
		dir := filepath.Join(root, fmt.Sprintf("pkg%03d", i/1000), fmt.Sprintf("mod%04d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		var b strings.Builder
		for j := 0; b.Len() < size; j++ {
			fmt.Fprintf(&b, "def f%d_%d(x):\n    return x * %d + 1\n", i, j, j)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d.py", i)), []byte(b.String()[:size]), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
