package intercept

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/egress/gitpush"
)

// BenchmarkGitPush uploads a 32 MiB push (one ref update, then the "pack") through the interceptor
// under a git rule, which reads the ref update before it forwards the body, and under an HTTP rule
// allowing the same POST (the baseline), over HTTP/1.1 and HTTP/2, and reports both throughputs and
// their ratio.
func BenchmarkGitPush(b *testing.B) {
	const size = 32 << 20
	head := fmt.Sprintf("%04x%s", 4+len(strings.Repeat("1", 40)+" "+strings.Repeat("2", 40)+" refs/heads/agent/x\x00report-status\n"),
		strings.Repeat("1", 40)+" "+strings.Repeat("2", 40)+" refs/heads/agent/x\x00report-status\n") + "0000"
	body := make([]byte, size)
	_, _ = rand.Read(body)
	copy(body, head)
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}), false)
	git := newSetup(b, up, "github.com", false, withGit(GitRule{Host: "github.com", Repos: []string{"acme/app"},
		Push: gitpush.Rule{Branches: []string{"agent/*"}, Source: "bench"}}), func(c *Config) { c.Recorder = &countRecorder{} })
	plain := newSetup(b, up, "github.com", false, withRules(Rule{Host: "github.com", Allow: []Access{{Methods: []string{"POST"}, Paths: []string{"/acme/app.git/git-receive-pack"}}}, Source: "bench"}),
		func(c *Config) { c.Recorder = &countRecorder{} })
	push := func(c *http.Client, url string) time.Duration {
		start := time.Now()
		resp, err := c.Post(url, "application/x-git-receive-pack-request", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("push: %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	for _, h2 := range []bool{false, true} {
		b.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(b *testing.B) {
			viaGit, viaHTTP := git.client(h2), plain.client(h2)
			gitURL, httpURL := git.url("/acme/app.git/git-receive-pack"), plain.url("/acme/app.git/git-receive-pack")
			push(viaGit, gitURL) // warm up: connections, leaves
			push(viaHTTP, httpURL)
			var dGit, dHTTP time.Duration
			for b.Loop() {
				dGit += push(viaGit, gitURL)
				dHTTP += push(viaHTTP, httpURL)
			}
			mb := float64(size) / (1 << 20) * float64(b.N)
			b.ReportMetric(mb/dHTTP.Seconds(), "http-rule-MiB/s")
			b.ReportMetric(mb/dGit.Seconds(), "git-rule-MiB/s")
			b.ReportMetric(dHTTP.Seconds()/dGit.Seconds(), "git/http")
		})
	}
}
