//go:build linux

package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestUpstreamFailuresLoud: an intercepted upstream whose certificate the gateway cannot verify, and
// an allowed host nothing answers on, each get one line on cordon's stderr however often the agent
// retries (the first naming network.tls.caFile), and the summary counts no credential for requests
// that never reached an upstream. The control is the same run with the upstream's CA in
// network.tls.caFile: no such line, and the credentials counted.
func TestUpstreamFailuresLoud(t *testing.T) {
	requireTool(t, "curl")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		up := newTLSUpstream(t, h, "x-api-key", "api.test")
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		deadPort := dead.Addr().(*net.TCPAddr).Port
		dead.Close() // nothing listens there any more: the gateway's dial is refused
		script := fmt.Sprintf(`for i in 1 2 3; do
  curl -sS -m 10 -o /dev/null -w "api %%{http_code}\n" -H "x-api-key: $API_KEY" https://api.test:%d/x
  curl -sS -m 10 --noproxy '*' -o /dev/null http://dead.test:%d/ 2>/dev/null || echo dead failed
done
true`, up.port, deadPort)
		for _, tc := range []struct {
			name    string
			caFile  string
			status  string
			counted bool
		}{{"control", fmt.Sprintf("\n  tls: {caFile: %q}", up.caFile), "api 200", true}, {"unverified", "", "api 502", false}} {
			t.Run(tc.name, func(t *testing.T) {
				pol := fmt.Sprintf(`network:
  allow:
    - {host: api.test, ports: [%d]}
    - {host: dead.test, ports: [%d]}
  hosts: {api.test: 127.0.0.1, dead.test: 127.0.0.1}%s
credentials:
  - name: API_KEY
    from: {env: CORDON_TEST_API_KEY}
    inject: {host: api.test, header: x-api-key}
`, up.port, deadPort, tc.caFile)
				before := len(up.requests())
				r := h.sandboxed(pol, script, "CORDON_TEST_API_KEY=sk-ant-api03-"+h.canary)
				if r.code != 0 || strings.Count(r.stdout, tc.status) != 3 || strings.Count(r.stdout, "dead failed") != 3 {
					t.Fatalf("want three %q and three refused dials:\n%s", tc.status, r)
				}
				lines := func(sub string) (n int) {
					for _, l := range strings.Split(r.stderr, "\n") {
						if strings.Contains(l, sub) {
							n++
						}
					}
					return n
				}
				if n := lines(fmt.Sprintf("cannot reach dead.test:%d", deadPort)); n != 1 {
					t.Errorf("%d lines about the unreachable host, want 1:\n%s", n, r.stderr)
				}
				verify := lines("network.tls.caFile")
				injected := strings.Contains(r.stderr, "credentials injected into 3 requests")
				reached := len(up.requests()) - before
				if tc.counted {
					if verify != 0 || !injected || reached != 3 {
						t.Errorf("control: %d caFile lines (want 0), injected counted %v, upstream saw %d:\n%s", verify, injected, reached, r.stderr)
					}
					return
				}
				if verify != 1 || !strings.Contains(r.stderr, "certificate of api.test:") {
					t.Errorf("%d lines naming network.tls.caFile for api.test, want 1:\n%s", verify, r.stderr)
				}
				if strings.Contains(r.stderr, "credentials injected") || reached != 0 {
					t.Errorf("credentials counted as injected although the upstream saw %d requests:\n%s", reached, r.stderr)
				}
			})
		}
	})
}
