package cordon

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestCheckKubeRepo: a kubernetes run's repository must be an http(s) URL without a user or token,
// which would reach the pod's spec, the checkout's .git/config and the run record.
func TestCheckKubeRepo(t *testing.T) {
	for _, tc := range []struct{ repo, want string }{
		{"https://git.example/acme/app.git", ""},
		{"http://git.example:8080/app", ""},
		{"https://x-access-token:ghp_secret@git.example/acme/app.git", "has a user or token in it"},
		{"https://ghp_secret@git.example/acme/app.git", "has a user or token in it"},
		{"ext::sh -c id", "not an http(s) repository URL"},
		{"file:///etc", "not an http(s) repository URL"},
		{"https:///path", "not an http(s) repository URL"},
	} {
		err := CheckKubeRepo(tc.repo)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.repo, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "ghp_secret") {
			t.Errorf("%q: the error quotes the token: %v", tc.repo, err)
		}
	}
}

// TestKubeRefuses: what a pod cannot hold is refused by name, not dropped: gVisor asked for
// without a RuntimeClass to give it, a workdir, services, host mounts, presets, budgets.
func TestKubeRefuses(t *testing.T) {
	parse := func(y string) *policy.Policy {
		p, err := policy.Parse("p.yaml", []byte("version: 1\n"+y), policy.Options{Home: "/nonexistent"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, policy, runtimeClass, want string
	}{
		{"nothing", "", "", ""},
		{"gvisor without a class", "sandbox: {isolation: gvisor}\n", "", "sandbox.isolation: gvisor without a RuntimeClass"},
		{"gvisor with a class", "sandbox: {isolation: gvisor}\n", "gvisor", ""},
		{"workdir", "sandbox: {workdir: src}\n", "", "sandbox.workdir"},
		{"budgets", "network: {allow: [api.test], http: [{host: api.test, allow: [{methods: [GET], paths: [\"/*\"]}]}]}\nbudgets: [{host: api.test, maxRequests: 5}]\n", "", "budgets"},
	} {
		err := kubeRefuses(parse(tc.policy), tc.runtimeClass)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
