package cordon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// TestGatewayEnv: the gateway's variables join the policy's without replacing one silently: lists
// merged, a CA bundle's certificates taken into the sandbox's (with a notice), a conflicting trust
// store or an unreadable bundle refused, a proxy variable replaced with a notice.
func TestGatewayEnv(t *testing.T) {
	ca := testpki.NewCA(t, "policy CA")
	bundle := ca.WriteFile(t, t.TempDir())
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificates here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	add := []string{"HTTPS_PROXY=http://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1", "SSL_CERT_FILE=" + sandbox.CABundlePath,
		"NODE_EXTRA_CA_CERTS=" + sandbox.TrustedCAPath, "JAVA_TOOL_OPTIONS=" + gateway.JavaOptions()}
	for _, tc := range []struct {
		name    string
		set     map[string]string
		want    []string // variables the result must hold
		extra   bool     // the policy's certificates join TrustCA
		notice  string
		refused string
	}{
		{name: "untouched", want: add},
		{name: "lists merged", set: map[string]string{"NO_PROXY": "corp.internal,localhost"}, want: []string{"NO_PROXY=corp.internal,localhost,127.0.0.1"}},
		{name: "bundle merged", set: map[string]string{"SSL_CERT_FILE": bundle}, want: []string{"SSL_CERT_FILE=" + sandbox.CABundlePath}, extra: true, notice: "env.set SSL_CERT_FILE: the certificates of " + bundle},
		{name: "extra merged", set: map[string]string{"NODE_EXTRA_CA_CERTS": bundle}, want: []string{"NODE_EXTRA_CA_CERTS=" + sandbox.TrustedCAPath}, extra: true, notice: "NODE_EXTRA_CA_CERTS"},
		{name: "java options joined", set: map[string]string{"JAVA_TOOL_OPTIONS": "-Xmx1g"}, want: []string{"JAVA_TOOL_OPTIONS=-Xmx1g " + gateway.JavaOptions()}},
		{name: "java trust store", set: map[string]string{"JAVA_TOOL_OPTIONS": "-Djavax.net.ssl.trustStore=/x"}, refused: "names a trust store"},
		{name: "missing bundle", set: map[string]string{"SSL_CERT_FILE": "/nonexistent.pem"}, refused: "no such file"},
		{name: "relative bundle", set: map[string]string{"SSL_CERT_FILE": "ca.pem"}, refused: "not an absolute path"},
		{name: "bundle without certificates", set: map[string]string{"SSL_CERT_FILE": empty}, refused: "holds no PEM certificate"},
		{name: "proxy replaced", set: map[string]string{"HTTPS_PROXY": "http://corp:8080"}, want: []string{"HTTPS_PROXY=http://127.0.0.1:3128"}, notice: "env.set HTTPS_PROXY: replaced by cordon's gateway proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &builder{warn: newWarnings(nil)}
			var env []string
			for k, v := range tc.set {
				env = append(env, k+"="+v)
			}
			got, extra, err := b.gatewayEnv(append([]string{"PATH=/usr/bin"}, env...), add, policy.Env{Set: tc.set})
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "network.tls.caFile") {
					t.Fatalf("error %v, want one saying %q and naming network.tls.caFile", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("env lacks %q: %q", w, got)
				}
			}
			seen := map[string]bool{}
			for _, kv := range got {
				k, _, _ := strings.Cut(kv, "=")
				if seen[k] {
					t.Errorf("%s twice: %q", k, got)
				}
				seen[k] = true
			}
			if tc.extra != (string(extra) == string(ca.PEM)) {
				t.Errorf("extra certificates %q, want the policy's: %v", extra, tc.extra)
			}
			ws := b.warn.all()
			if tc.notice == "" && len(ws) > 0 || tc.notice != "" && (len(ws) != 1 || !strings.Contains(ws[0].Message, tc.notice)) {
				t.Errorf("warnings %v, want a notice with %q", ws, tc.notice)
			}
		})
	}
}
