package kube

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func authHeader(t *testing.T, c *restConfig) string {
	t.Helper()
	r, _ := http.NewRequest(http.MethodGet, c.Host, nil)
	if c.auth != nil {
		if err := c.auth.apply(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return r.Header.Get("Authorization")
}

// TestLoadConfig reads kubeconfigs as kubectl does: the context picks cluster, user and namespace;
// KUBECONFIG's files merge with the first naming an entry winning; each way of authenticating
// gives the header the API server expects.
func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "kubeconfig")
	writeFile(t, dir, "ca.pem", string(ca.PEM))
	writeFile(t, dir, "token", "file-token\n")
	plugin := writeFile(t, dir, "plugin.sh", `#!/bin/sh
case "$KUBERNETES_EXEC_INFO" in *ExecCredential*) ;; *) exit 3 ;; esac
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"plugin-token-'"$EXTRA"'"}}'
`)
	_ = os.Chmod(plugin, 0o755)
	first := writeFile(t, dir, "first", `apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev
  cluster: {server: "https://10.0.0.1:6443/", certificate-authority: ca.pem}
- name: prod
  cluster: {server: "https://prod.example:443", insecure-skip-tls-verify: true}
users:
- name: tok
  user: {token: static-token}
- name: file
  user: {tokenFile: token}
- name: exec
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: `+plugin+`, env: [{name: EXTRA, value: x1}]}
- name: basic
  user: {username: u, password: p}
- name: legacy
  user: {auth-provider: {name: gcp}}
contexts:
- name: dev
  context: {cluster: dev, user: tok, namespace: agents}
- name: file
  context: {cluster: dev, user: file}
- name: exec
  context: {cluster: prod, user: exec}
- name: basic
  context: {cluster: prod, user: basic}
- name: legacy
  context: {cluster: prod, user: legacy}
- name: nocluster
  context: {cluster: gone, user: tok}
`)
	second := writeFile(t, dir, "second", `current-context: other
clusters:
- name: dev
  cluster: {server: "https://shadowed.example"}
contexts:
- name: other
  context: {cluster: dev, user: tok}
`)
	env := func(kc string) func(string) string {
		return func(k string) string {
			if k == "KUBECONFIG" {
				return kc
			}
			return ""
		}
	}
	list := first + string(filepath.ListSeparator) + filepath.Join(dir, "missing") + string(filepath.ListSeparator) + second
	for _, tc := range []struct {
		name, ctx, ns  string
		wantHost, auth string
		wantNS, err    string
	}{
		{name: "current", wantHost: "https://10.0.0.1:6443", auth: "Bearer static-token", wantNS: "agents"},
		{name: "namespace flag", ns: "other", wantHost: "https://10.0.0.1:6443", auth: "Bearer static-token", wantNS: "other"},
		{name: "token file", ctx: "file", auth: "Bearer file-token", wantNS: "default"},
		{name: "exec plugin", ctx: "exec", wantHost: "https://prod.example:443", auth: "Bearer plugin-token-x1"},
		{name: "basic", ctx: "basic", auth: "Basic dTpw"},
		{name: "merged context", ctx: "other", wantHost: "https://10.0.0.1:6443"},
		{name: "auth provider", ctx: "legacy", err: "exec credential plugin"},
		{name: "no such context", ctx: "nope", err: `no context "nope"`},
		{name: "no such cluster", ctx: "nocluster", err: `the cluster "gone"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig("", tc.ctx, tc.ns, env(list))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantHost != "" && c.Host != tc.wantHost {
				t.Errorf("host %q, want %q", c.Host, tc.wantHost)
			}
			if tc.auth != "" && authHeader(t, c) != tc.auth {
				t.Errorf("Authorization %q, want %q", authHeader(t, c), tc.auth)
			}
			if tc.wantNS != "" && c.Namespace != tc.wantNS {
				t.Errorf("namespace %q, want %q", c.Namespace, tc.wantNS)
			}
		})
	}
	c, err := loadConfig(first, "", "", env(""))
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.RootCAs == nil || !c.TLS.RootCAs.Equal(ca.Pool) {
		t.Error("the cluster's CA (a path relative to the kubeconfig) is not the trust root")
	}
}
