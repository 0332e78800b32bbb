package workspace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkPrepare shows that making a workspace costs the same for 10 and 100,000 files, and how
// that compares with copying the project (cp -a) or cloning it (git clone --local). The trees are
// built before the timer starts, and only when -bench selects this benchmark.
func BenchmarkPrepare(b *testing.B) {
	root := b.TempDir() // outlives each sub-benchmark's invocations
	for _, n := range []int{10, 100_000} {
		// Built once per size: the testing package calls the sub-benchmark more than once.
		var p string
		var cp, clone time.Duration
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			if p == "" {
				p = filepath.Join(root, fmt.Sprint(n), "project")
				makeTree(b, p, n)
				sh(b, p, "git init -q -b main . && git add -A && git commit -qm t")
				tmp := filepath.Join(root, fmt.Sprint(n))
				cp = timeCmd(b, func() *exec.Cmd { return exec.Command("cp", "-a", p, filepath.Join(tmp, "cp")) })
				clone = timeCmd(b, func() *exec.Cmd { return exec.Command("git", "clone", "-q", "--local", p, filepath.Join(tmp, "clone")) })
				// Write back the setup's dirty pages now, or Prepare's fsyncs would wait for them.
				sh(b, "/", "sync")
			}
			b.ResetTimer()
			for range b.N {
				r := testRun(b, p)
				if _, err := Prepare(r, p); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(cp.Nanoseconds())/per, "cp-a/prepare")
			b.ReportMetric(float64(clone.Nanoseconds())/per, "clone/prepare")
			b.ReportMetric(float64(cp.Microseconds()), "cp-a-µs")
			b.ReportMetric(float64(clone.Microseconds()), "clone-µs")
		})
	}
}

// makeTree writes n small files in directories of 100.
func makeTree(b *testing.B, root string, n int) {
	b.Helper()
	for i := range n {
		d := filepath.Join(root, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.go", i)), []byte("package x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// timeCmd runs a command once and returns how long it took.
func timeCmd(b *testing.B, mk func() *exec.Cmd) time.Duration {
	b.Helper()
	cmd := mk()
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %v %s", cmd.Args, err, out)
	}
	return time.Since(start)
}
