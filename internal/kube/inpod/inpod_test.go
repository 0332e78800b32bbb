package inpod

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// The gateway refuses, before it listens or writes a ready file, a config it does not read and a
// policy it cannot enforce in a pod; the control beside the refusals starts.
func TestGatewayRefuses(t *testing.T) {
	ca := testpki.NewCA(t, "refusals CA")
	good := func() kubepod.GatewayConfig {
		return kubepod.GatewayConfig{Version: kubepod.Version, RunID: "r", PolicyName: "p.yaml",
			Policy: []byte("version: 1\nnetwork: {allow: [api.test]}\n")}
	}
	with := func(f func(*kubepod.GatewayConfig)) kubepod.GatewayConfig { c := good(); f(&c); return c }
	policyOf := func(y string) kubepod.GatewayConfig {
		return with(func(c *kubepod.GatewayConfig) { c.Policy = []byte("version: 1\n" + y) })
	}
	cred := creds.Exported{Name: "TOKEN", Inject: creds.Inject{Hosts: []string{"api.test"}, Header: "X-Token"},
		Placeholder: strings.Repeat("p", 40), Value: "real-value-0123456789"}
	tests := []struct {
		name string
		cfg  any // a GatewayConfig, or raw bytes
		want string
	}{
		{"not JSON", []byte("{"), "config"},
		{"a field this cordon does not know", []byte(`{"version":1,"policy":"dmVyc2lvbjogMQo=","extra":1}`), "unknown field"},
		{"another version", with(func(c *kubepod.GatewayConfig) { c.Version = 2 }), "version 2"},
		{"no policy", with(func(c *kubepod.GatewayConfig) { c.Policy = nil }), "without a policy"},
		{"a broken policy", with(func(c *kubepod.GatewayConfig) { c.Policy = []byte("version: 1\nnetwrk: {}\n") }), "p.yaml"},
		{"a bad --allow", with(func(c *kubepod.GatewayConfig) { c.Allow = []string{"a b"} }), "--allow a b"},
		{"budgets", policyOf("network: {allow: [api.test], http: [{host: api.test, allow: [{methods: [GET], paths: [\"/*\"]}]}]}\nbudgets: [{host: api.test, maxRequests: 5}]\n"), "has budgets"},
		{"services", policyOf("network: {allow: [api.test]}\nservices:\n  cache:\n    redis: {}\n"), "has services"},
		{"presets", policyOf("network: {presets: [npm]}\n"), "preset"},
		{"a CA file the config does not carry", policyOf("network: {allow: [api.test], tls: {caFile: /ca.pem}}\n"), "no CA file"},
		{"a credential that does not restore", with(func(c *kubepod.GatewayConfig) {
			x := cred
			x.Placeholder = "short"
			c.Credentials = []creds.Exported{x}
		}), "shorter than"},
		{"a credential for a host never allowed", with(func(c *kubepod.GatewayConfig) {
			x := cred
			x.Inject.Hosts = []string{"other.test"}
			c.Credentials = []creds.Exported{x}
		}), "other.test, which the network policy never allows"},
		{"roots that are not certificates", with(func(c *kubepod.GatewayConfig) { c.Roots = []byte("garbage") }), "roots"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var b []byte
			switch c := tc.cfg.(type) {
			case []byte:
				b = c
			default:
				var err error
				if b, err = json.Marshal(c); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, kubepod.ConfigFile)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			listen := func(sandbox.EgressPorts) (*sandbox.Listeners, error) {
				t.Error("the gateway listened although its config is refused")
				return nil, os.ErrInvalid
			}
			err := Gateway(context.Background(), GatewayOptions{ConfigPath: path, TrustDir: dir, AuditDir: dir, Listen: listen})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Gateway: %v, want an error about %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
			if strings.Contains(err.Error(), cred.Value) || strings.Contains(err.Error(), cred.Placeholder) {
				t.Errorf("the error holds a credential: %v", err)
			}
			if Ready(dir) == nil {
				t.Error("a refused gateway wrote its ready file")
			}
		})
	}

	// The control: the same configs with what is refused taken out get as far as listening, with
	// the credential and the CA file carried.
	dir := t.TempDir()
	cfg := good()
	cfg.Policy = []byte("version: 1\nnetwork: {allow: [api.test], tls: {caFile: ~/ca.pem}}\n")
	cfg.Credentials, cfg.CAFile, cfg.Roots, cfg.Allow = []creds.Exported{cred}, ca.PEM, ca.PEM, []string{"more.test:8443"}
	path := writeConfigFile(t, dir, cfg)
	listened := false
	listen := func(sandbox.EgressPorts) (*sandbox.Listeners, error) {
		listened = true
		return nil, os.ErrInvalid
	}
	if err := Gateway(context.Background(), GatewayOptions{ConfigPath: path, TrustDir: dir, AuditDir: dir, Listen: listen}); !listened {
		t.Fatalf("the control did not get as far as listening: %v", err)
	}
}

// Ready says yes only for a regular ready file.
func TestReady(t *testing.T) {
	dir := t.TempDir()
	if Ready(dir) == nil {
		t.Error("Ready without a ready file")
	}
	if err := os.Mkdir(filepath.Join(dir, kubepod.ReadyFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if Ready(dir) == nil {
		t.Error("Ready with a directory for a ready file")
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, kubepod.ReadyFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Ready(other); err != nil {
		t.Errorf("Ready with a ready file: %v", err)
	}
}

// Setup refuses to go on without a binary to copy or a place to put it, before it installs anything
// (these run in the test's own namespace, so they must fail first).
func TestSetupRefusesBeforeItInstalls(t *testing.T) {
	dir := t.TempDir()
	for name, opts := range map[string]SetupOptions{
		"no copy path":      {GatewayUID: kubepod.GatewayUID},
		"a missing binary":  {CopyTo: filepath.Join(dir, "cordon"), Self: filepath.Join(dir, "missing"), GatewayUID: kubepod.GatewayUID},
		"a missing dir":     {CopyTo: filepath.Join(dir, "no", "cordon"), GatewayUID: kubepod.GatewayUID},
		"a cancelled start": {CopyTo: filepath.Join(dir, "cordon"), GatewayUID: kubepod.GatewayUID},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if name == "a cancelled start" {
				cancel()
			}
			if err := Setup(ctx, opts); err == nil {
				t.Fatal("Setup succeeded")
			}
		})
	}
}

// writeConfigFile writes cfg as JSON into dir and returns its path.
func writeConfigFile(t *testing.T, dir string, cfg kubepod.GatewayConfig) string {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, kubepod.ConfigFile)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
