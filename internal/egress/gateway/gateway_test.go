package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// TestNewRefusesWhatItCannotEnforce: a gateway that would not be what the policy says is not made,
// so the run does not start; the controls beside each refusal are made.
func TestNewRefusesWhatItCannotEnforce(t *testing.T) {
	ca := testpki.NewCA(t, "gateway test CA")
	caFile := ca.WriteFile(t, "")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	allow := []policy.Endpoint{{Host: "api.test", Ports: []uint16{443}}}
	rules := []policy.HTTPRule{{Host: "api.test", Allow: []policy.HTTPAllow{{Methods: []string{"GET"}, Paths: []string{"/*"}}}}}
	for _, tc := range []struct {
		name    string
		network policy.Network
		inject  []string
		want    string // "" means New succeeds
		roots   []byte // Config.Roots
		caPEM   []byte // Config.CAFile
	}{
		{"plain allowlist", policy.Network{Allow: allow}, nil, "", nil, nil},
		{"credential bound to an allowed host", policy.Network{Allow: allow}, []string{"api.test"}, "", nil, nil},
		{"credential bound to a host never allowed", policy.Network{Allow: allow}, []string{"other.test"}, "other.test, which the network policy never allows", nil, nil},
		{"rules with the upstream CA file", policy.Network{Allow: allow, HTTP: rules, TLS: policy.TLS{CAFile: caFile}}, nil, "", nil, nil},
		{"missing CA file", policy.Network{Allow: allow, HTTP: rules, TLS: policy.TLS{CAFile: caFile + ".missing"}}, nil, "network.tls.caFile", nil, nil},
		{"CA file without a certificate", policy.Network{Allow: allow, HTTP: rules, TLS: policy.TLS{CAFile: garbage}}, nil, "holds no PEM certificate", nil, nil},
		{"git rule for an allowed host", policy.Network{Allow: allow, Git: []policy.GitRule{{Host: "api.test", Repos: []string{"a/b"}}}}, nil, "", nil, nil},
		{"git rule for a host never allowed", policy.Network{Allow: allow, Git: []policy.GitRule{{Host: "git.test", Repos: []string{"a/b"}}}}, nil, "network.git[0]: git.test is never allowed", nil, nil},
		{"roots given", policy.Network{Allow: allow, HTTP: rules}, nil, "", ca.PEM, nil},
		{"roots without a certificate", policy.Network{Allow: allow, HTTP: rules}, nil, "roots given hold no PEM certificate", []byte("garbage"), nil},
		{"CA file's content given", policy.Network{Allow: allow, HTTP: rules, TLS: policy.TLS{CAFile: caFile + ".missing"}}, nil, "", nil, ca.PEM},
		{"CA file's content without a certificate", policy.Network{Allow: allow, HTTP: rules}, nil, "holds no PEM certificate", nil, []byte("garbage")},
		{"CA file's content with a key", policy.Network{Allow: allow, HTTP: rules}, nil, "only certificates belong there", nil, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
		{"git rule with a bad glob", policy.Network{Allow: allow, Git: []policy.GitRule{{Host: "api.test", Repos: []string{"a/b"}, Push: policy.GitPush{Branches: []string{"["}}}}}, nil, "network.git[0].push.branches", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := tc.network
			g, err := New(Config{Network: &nw, Hostname: "cordon", AuditPath: filepath.Join(t.TempDir(), "audit.jsonl"), InjectHosts: tc.inject,
				Roots: tc.roots, CAFile: tc.caPEM})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				g.Close()
				return
			}
			if err == nil {
				g.Close()
				t.Fatalf("New succeeded, want an error about %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTrustOnlyWhenIntercepting: the run's CA and the variables pointing at it exist only when some
// host is intercepted; a plain allowlist leaves the sandbox's trust alone.
func TestTrustOnlyWhenIntercepting(t *testing.T) {
	mk := func(nw policy.Network, inject []string) *Gateway {
		g, err := New(Config{Network: &nw, Hostname: "cordon", AuditPath: filepath.Join(t.TempDir(), "audit.jsonl"), InjectHosts: inject})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	allow := []policy.Endpoint{{Host: "api.test", Ports: []uint16{443}}}
	plain := mk(policy.Network{Allow: allow}, nil)
	if plain.TrustCA() != nil || slices.ContainsFunc(plain.Env(), func(kv string) bool { return strings.HasPrefix(kv, "SSL_CERT_FILE=") }) {
		t.Errorf("a gateway that intercepts nothing hands out a CA: %q", plain.Env())
	}
	ic := mk(policy.Network{Allow: allow}, []string{"api.test"})
	if pem := ic.TrustCA(); !strings.Contains(string(pem), "BEGIN CERTIFICATE") || strings.Contains(string(pem), "PRIVATE KEY") {
		t.Errorf("TrustCA = %q, want the certificate alone", pem)
	}
	for _, want := range []string{"SSL_CERT_FILE=" + sandbox.CABundlePath, "NODE_EXTRA_CA_CERTS=" + sandbox.TrustedCAPath, "GIT_SSL_CAINFO=" + sandbox.CABundlePath} {
		if !slices.Contains(ic.Env(), want) {
			t.Errorf("Env lacks %s: %q", want, ic.Env())
		}
	}
}

// TestNotifier: the user's terminal gets the first refusal of each kind, not every retry; names
// under one domain (a DNS tunnel) make one line; and a run prints at most maxNotices lines, then one
// that says where the rest are.
func TestNotifier(t *testing.T) {
	var got []string
	n := newNotifier(func(line string) { got = append(got, line) })
	n.notify("http github.com GET network.http[0]", "first")
	n.notify("http github.com GET network.http[0]", "retry")
	n.notify("http github.com POST network.http[0]", "other method")
	for _, name := range []string{"c2VjcmV0.attacker.example", "bW9yZQ.attacker.example", "x.y.attacker.example"} {
		n.notify(dnsKey(name), "dns "+name)
	}
	n.notify(dnsKey("a.b.example.co.uk"), "dns co.uk 1")
	n.notify(dnsKey("c.example.co.uk"), "dns co.uk 2")
	n.notify(dnsKey("other.co.uk"), "dns co.uk 3")
	want := []string{"first", "other method", "dns c2VjcmV0.attacker.example", "dns co.uk 1", "dns co.uk 3"}
	if !slices.Equal(got, want) {
		t.Fatalf("notified %q, want %q", got, want)
	}
	for i := range 2 * maxNotices {
		n.notify(fmt.Sprintf("tcp 10.0.0.%d:443", i), "scan")
	}
	if len(got) != maxNotices+1 || !strings.Contains(got[len(got)-1], "cordon log --denied") {
		t.Fatalf("%d lines, the last %q; want %d and a pointer to the log", len(got), got[len(got)-1], maxNotices+1)
	}
	var nilNotifier *notifier
	nilNotifier.notify("k", "nothing happens")
}

// TestServeRefusesIncompleteSockets: a box that handed over no transparent listener or no DNS socket
// would leave its traffic with nowhere served to go; the gateway refuses the set, closes what it got,
// and the run must not go on.
func TestServeRefusesIncompleteSockets(t *testing.T) {
	nw := policy.Network{Allow: []policy.Endpoint{{Host: "api.test", Ports: []uint16{443}}}}
	g, err := New(Config{Network: &nw, Hostname: "cordon", AuditPath: filepath.Join(t.TempDir(), "audit.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	if err := g.Serve(sandbox.Listeners{Proxy: []net.Listener{proxy}}); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("Serve without transparent and DNS sockets: %v, want an error", err)
	}
	if _, err := proxy.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the refused set's listener is still open (Accept: %v)", err)
	}
}
