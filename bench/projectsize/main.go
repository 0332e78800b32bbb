// Command projectsize measures whether a project's size shows in cordon's start: `cordon run -- true`
// in a 10-file project against one of 100,000 files (~400 MB), as a plain directory and as a git
// repository, warm (the secret scan's cache made by an earlier start), with the ratio to the 10-file
// project taken round by round, and the peak memory of cordon and of its init in each. The first
// (cold) start of each project is reported apart: it reads every file once.
//
//	go build -o bin/cordon ./cmd/cordon && go run ./bench/projectsize -cordon bin/cordon -n 20 [-files 100000]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	cordon := flag.String("cordon", "bin/cordon", "cordon binary")
	n := flag.Int("n", 20, "warm runs in each project")
	files := flag.Int("files", 100000, "files in the large projects")
	size := flag.Int("size", 4000, "bytes per file")
	flag.Parse()
	bin, err := filepath.Abs(*cordon)
	if err != nil {
		fail(err)
	}
	tmp, err := os.MkdirTemp("", "cordon-projectsize-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(tmp, "state"))

	type project struct {
		name, dir string
		cold      time.Duration
		runs, cpu []time.Duration
	}
	ps := []*project{{name: "10 files"}, {name: fmt.Sprintf("%d files", *files)}, {name: fmt.Sprintf("%d files, git", *files)}}
	for i, p := range ps {
		p.dir = filepath.Join(tmp, fmt.Sprintf("p%d", i))
		count := 10
		if i > 0 {
			count = *files
		}
		t0 := time.Now()
		if err := makeTree(p.dir, count, *size); err != nil {
			fail(err)
		}
		if strings.HasSuffix(p.name, "git") {
			git := exec.Command("sh", "-ec", "git init -q && git add -A && git -c gc.auto=0 -c user.name=b -c user.email=b@b commit -qm tree")
			git.Dir = p.dir
			if out, err := git.CombinedOutput(); err != nil {
				fail(fmt.Errorf("git: %v\n%s", err, out))
			}
		}
		fmt.Printf("built %s in %s\n", p.name, time.Since(t0).Round(time.Millisecond))
	}
	// The scan's cache trusts only what changed more than a second before it scanned.
	time.Sleep(1100 * time.Millisecond)
	// run returns the wall time of one start and the CPU time cordon used (its own and that of the
	// children it waited for), which load from other jobs on a shared machine moves far less.
	run := func(p *project, argv ...string) (time.Duration, time.Duration) {
		cmd := exec.Command(bin, append([]string{"run", "--workspace", p.dir, "--"}, argv...)...)
		cmd.Env, cmd.Dir = env, p.dir
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
		os.RemoveAll(filepath.Join(tmp, "state", "cordon", "runs"))
	}
	fmt.Printf("%-22s %10s %10s %10s %10s\n", "cordon run -- true", "cold", "p10", "median", "p90")
	for _, p := range ps {
		s := append([]time.Duration(nil), p.runs...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		fmt.Printf("%-22s %10s %10s %10s %10s\n", p.name, p.cold.Round(time.Millisecond), q(s, 0.1).Round(time.Microsecond),
			q(s, 0.5).Round(time.Microsecond), q(s, 0.9).Round(time.Microsecond))
	}
	ratio := func(what string, p *project, num, den []time.Duration) {
		r := make([]float64, len(num))
		for i := range r {
			r[i] = float64(num[i]) / float64(den[i])
		}
		sort.Float64s(r)
		fmt.Printf("%s ratio %-20s / 10 files: median %.2fx (p25 %.2fx, p75 %.2fx)  target <= 1.2x (issue 20)\n",
			what, p.name, r[len(r)/2], r[len(r)/4], r[len(r)*3/4])
	}
	for _, p := range ps[1:] {
		ratio("wall", p, p.runs, ps[0].runs)
	}
	for _, p := range ps {
		s := append([]time.Duration(nil), p.cpu...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		fmt.Printf("cpu (cordon and what it reaped) %-20s median %s\n", p.name, q(s, 0.5).Round(time.Microsecond))
	}
	for _, p := range ps[1:] {
		ratio("cpu", p, p.cpu, ps[0].cpu)
	}
	// Peak memory of cordon and of its init during a warm run (their high-water marks include the
	// scan, which ends before the command starts).
	for _, p := range ps {
		cmd := exec.Command(bin, "run", "--workspace", p.dir, "--", "sleep", "1")
		cmd.Env, cmd.Dir = env, p.dir
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		var cordonHWM, initHWM int
		for deadline := time.Now().Add(900 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			cordonHWM = max(cordonHWM, hwm(cmd.Process.Pid))
			for _, child := range children(cmd.Process.Pid) {
				initHWM = max(initHWM, hwm(child))
			}
		}
		cmd.Wait()
		fmt.Printf("peak RSS, %-20s cordon %.1f MiB, its init %.1f MiB, both %.1f MiB (target: cordon < 15 MiB)\n",
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

// q returns the p-quantile of sorted durations.
func q(s []time.Duration, p float64) time.Duration {
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// hwm returns a process's peak resident set size in KiB.
func hwm(pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return 0
}

// children lists pid's child processes, whichever of its threads forked them (Go forks from any).
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
