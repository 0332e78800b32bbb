//go:build linux

package linux

import (
	"context"
	"os/exec"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// BenchmarkStart measures starting `true` in a sandbox (bind-mounted workspace, no cgroup) against
// plain fork/exec of `true` in the same process; the ratio is reported as start-vs-exec.
func BenchmarkStart(b *testing.B) {
	ws := b.TempDir()
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Skip("no true")
	}
	var plainNs, sandboxNs int64
	for i := 0; i < b.N; i++ {
		begin := nowNano()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		plainNs += nowNano() - begin

		spec := testSpecIn(ws, "true")
		begin = nowNano()
		sb, err := start(&sandbox.LaunchSpec{}, spec)
		if err != nil {
			b.Fatal(err)
		}
		if st, _ := sb.Wait(context.Background()); st.Code != 0 {
			b.Fatalf("exit %d", st.Code)
		}
		sandboxNs += nowNano() - begin
	}
	b.ReportMetric(float64(sandboxNs)/float64(b.N)/1e6, "ms/sandbox")
	b.ReportMetric(float64(plainNs)/float64(b.N)/1e6, "ms/exec")
	b.ReportMetric(float64(sandboxNs)/float64(plainNs), "sandbox/exec")
}
