package linux

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkStart measures starting `true` in a sandbox (bind-mounted workspace, no cgroup) against
// plain fork/exec of `true` in the same process; the ratio is reported as start-vs-exec.
func BenchmarkStart(b *testing.B) {
	ws := b.TempDir()
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer devnull.Close()
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true")
	}
	var plainNs, sandboxNs int64
	for i := 0; i < b.N; i++ {
		start := nowNano()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		plainNs += nowNano() - start

		spec := testSpecIn(ws, "true")
		spec.Stdin, spec.Stdout, spec.Stderr = devnull, devnull, devnull
		start = nowNano()
		sb, err := (&Backend{}).Start(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		if st, _ := sb.Wait(); st.Code != 0 {
			b.Fatalf("exit %d", st.Code)
		}
		sandboxNs += nowNano() - start
	}
	b.ReportMetric(float64(sandboxNs)/float64(b.N)/1e6, "ms/sandbox")
	b.ReportMetric(float64(plainNs)/float64(b.N)/1e6, "ms/exec")
	b.ReportMetric(float64(sandboxNs)/float64(plainNs), "sandbox/exec")
}
