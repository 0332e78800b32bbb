package gateway

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestNewInspect: network.tls.inspect alone makes the gateway intercept (so the run's CA exists and
// the sandbox's environment points at the bundle that holds it); an inspected host the policy never
// allows is refused, naming the line, beside the controls.
func TestNewInspect(t *testing.T) {
	allow := []policy.Endpoint{{Host: "pass.test", Ports: []uint16{443}}, {Host: "*.cdn.test", Ports: []uint16{443}}}
	for _, tc := range []struct {
		name    string
		tls     policy.TLS
		want    string // "" means New succeeds
		trustCA bool
	}{
		{"no inspection", policy.TLS{}, "", false},
		{"inspected hosts", policy.TLS{Inspect: []string{"pass.test", "*.cdn.test"}}, "", true},
		{"inspect all", policy.TLS{InspectAll: true}, "", true},
		{"inspected host never allowed", policy.TLS{Inspect: []string{"pass.test", "evil.test"}}, "network.tls.inspect[1]: evil.test is never allowed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := policy.Network{Allow: allow, TLS: tc.tls}
			g, err := New(Config{Network: &nw, Hostname: "cordon", AuditPath: filepath.Join(t.TempDir(), "audit.jsonl")})
			if tc.want != "" {
				if err == nil {
					g.Close()
					t.Fatalf("New succeeded, want an error about %q", tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("New: %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer g.Close()
			if got := g.TrustCA() != nil; got != tc.trustCA {
				t.Errorf("TrustCA present = %v, want %v", got, tc.trustCA)
			}
			hasBundle := slices.ContainsFunc(g.Env(), func(v string) bool { return strings.HasPrefix(v, "SSL_CERT_FILE=") })
			if hasBundle != tc.trustCA {
				t.Errorf("SSL_CERT_FILE set = %v, want %v: %q", hasBundle, tc.trustCA, g.Env())
			}
			if tc.trustCA {
				for _, h := range []string{"pass.test", "a.cdn.test"} {
					if !g.ic.Wants(h) {
						t.Errorf("%s is not intercepted", h)
					}
				}
			}
		})
	}
}
