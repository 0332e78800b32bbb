// Command start measures how long it takes to run `true` inside a cordon sandbox, against plain
// fork/exec of `true` and against bubblewrap with all namespaces unshared, interleaved in one run so
// that the machine's state affects every contender alike. It prints medians and ratios, and cordon's
// own peak memory during a run.
//
//	go build -o bin/cordon ./cmd/cordon && go run ./bench/start -cordon bin/cordon -n 50
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
	n := flag.Int("n", 50, "runs of each contender")
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

	type contender struct {
		name string
		argv []string
		runs []time.Duration
	}
	cs := []*contender{
		{name: "fork/exec true", argv: []string{truePath}},
		{name: "cordon run -- true", argv: []string{bin, "run", "--workspace", project, "--", "true"}},
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		cs = append(cs, &contender{name: "bwrap --unshare-all true", argv: []string{bwrap, "--unshare-all", "--die-with-parent",
			"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
			"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", project, project, "true"}})
	} else {
		fmt.Println("bwrap not installed (apt-get install bubblewrap): skipping that baseline")
	}
	env := append(os.Environ(), "XDG_STATE_HOME="+state)
	for i := 0; i < *n+3; i++ {
		for _, c := range cs {
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Env, cmd.Dir = env, project
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				fail(fmt.Errorf("%s: %v\n%s", c.name, err, out))
			}
			if i >= 3 { // warm-up runs are not counted
				c.runs = append(c.runs, time.Since(start))
			}
		}
		// Runs accumulate state directories; clear them so the store stays small.
		os.RemoveAll(filepath.Join(state, "cordon"))
	}
	med := map[string]time.Duration{}
	fmt.Printf("%-28s %12s %12s\n", "contender", "median", "p90")
	for _, c := range cs {
		sort.Slice(c.runs, func(i, j int) bool { return c.runs[i] < c.runs[j] })
		med[c.name] = c.runs[len(c.runs)/2]
		fmt.Printf("%-28s %12s %12s\n", c.name, med[c.name].Round(time.Microsecond), c.runs[len(c.runs)*9/10].Round(time.Microsecond))
	}
	cordonMed := med["cordon run -- true"]
	fmt.Printf("ratio cordon / fork-exec: %.1fx\n", float64(cordonMed)/float64(med["fork/exec true"]))
	if b, ok := med["bwrap --unshare-all true"]; ok {
		fmt.Printf("ratio cordon / bwrap:     %.2fx (target <= 1.5x)\n", float64(cordonMed)/float64(b))
	}

	// cordon's own memory: peak RSS of the cordon process and of its init while a run is in progress.
	cmd := exec.Command(bin, "run", "--workspace", project, "--", "sleep", "1")
	cmd.Env, cmd.Dir = env, project
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	var cordonHWM, initHWM int
	deadline := time.Now().Add(900 * time.Millisecond)
	for time.Now().Before(deadline) {
		cordonHWM = max(cordonHWM, hwm(cmd.Process.Pid))
		for _, child := range children(cmd.Process.Pid) {
			initHWM = max(initHWM, hwm(child))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Wait()
	fmt.Printf("peak RSS during a run: cordon %.1f MiB, its init (pid 1 inside) %.1f MiB (target: cordon < 15 MiB)\n",
		float64(cordonHWM)/1024, float64(initHWM)/1024)
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

func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
