package verify

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
)

// TestMain lets the test binary serve as the canary process, as the cordon binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 0 && os.Args[0] == canary.ProcessArg0 {
		os.Exit(canary.ProcessMain())
	}
	os.Exit(m.Run())
}

// TestRunCancelled: a cancelled context stops verify before the sandbox starts, the error says so,
// and nothing planted is left behind (neither the throwaway project nor the canary in the home).
func TestRunCancelled(t *testing.T) {
	tmp, home := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var loaded string
	_, err := Run(ctx, Options{
		LoadPolicy: func(project string) (*policy.Policy, error) {
			// The policy is loaded once the project exists, so it can be checked against it.
			if _, err := os.Stat(filepath.Join(project, ".git/config")); err != nil {
				t.Errorf("LoadPolicy called before the project exists: %v", err)
			}
			loaded = project
			return policy.Default(), nil
		},
		Env:      []string{"HOME=" + home},
		StateDir: t.TempDir(),
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a cancelled context: %v, want context.Canceled", err)
	}
	if loaded == "" {
		t.Fatal("the policy was never loaded")
	}
	for _, dir := range []string{tmp, home} {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("verify left %v in %s", entries, dir)
		}
	}
}

// TestRunPolicyRefused: a policy the loader refuses ends verify with the loader's error, before
// anything is planted.
func TestRunPolicyRefused(t *testing.T) {
	tmp, home := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	refused := errors.New("the policy is inside the workspace")
	_, err := Run(context.Background(), Options{
		LoadPolicy: func(string) (*policy.Policy, error) { return nil, refused },
		Env:        []string{"HOME=" + home},
		StateDir:   t.TempDir(),
	})
	if !errors.Is(err, refused) {
		t.Fatalf("Run: %v, want the loader's error", err)
	}
	for _, dir := range []string{tmp, home} {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("verify left %v in %s", entries, dir)
		}
	}
}

// TestAllowedEndpoints: literal hosts become endpoints (port 443 when none is given), wildcards are
// left out, and only the ports of names DNS resolves get a loopback listener.
func TestAllowedEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name      string
		net       *policy.Network
		wantEps   []probe.Endpoint
		wantPorts []int
	}{
		{name: "no network"},
		{
			name: "literal, wildcard and pinned",
			net: &policy.Network{
				Allow: []policy.Endpoint{
					{Host: "api.test", Ports: []uint16{8443, 9443}},
					{Host: "*.cdn.test"},
					{Host: "docs.test"},
				},
				Hosts: map[string]netip.Addr{"api.test": netip.MustParseAddr("127.0.0.1")},
			},
			wantEps:   []probe.Endpoint{{Host: "api.test", Port: 8443}, {Host: "api.test", Port: 9443}, {Host: "docs.test", Port: 443}},
			wantPorts: []int{443},
		},
	} {
		eps, ports := allowedEndpoints(&policy.Policy{Network: tc.net})
		if !reflect.DeepEqual(eps, tc.wantEps) || !reflect.DeepEqual(ports, tc.wantPorts) {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, eps, ports, tc.wantEps, tc.wantPorts)
		}
	}
}

// TestInjectedCoords: a credential is probed on the allowed endpoints of its hosts; AWS keys, which
// sign rather than travel, on none.
func TestInjectedCoords(t *testing.T) {
	allowed := []probe.Endpoint{{Host: "a.test", Port: 443}, {Host: "a.test", Port: 8443}, {Host: "b.test", Port: 443}}
	tok := policy.Credential{Name: "TOKEN", From: policy.Source{Env: "T"}, Inject: policy.Inject{Hosts: []string{"a.test", "c.test"}, Header: "x-api-key"}}
	in := injectedCoords(tok, allowed)
	if want := allowed[:2]; !reflect.DeepEqual(in.Hosts, want) || in.Name != "TOKEN" || in.Header != "x-api-key" {
		t.Errorf("injectedCoords(token) = %+v, want hosts %v", in, want)
	}
	aws := policy.Credential{Name: "AWS", From: policy.Source{AWS: &policy.AWS{Env: true}}, Inject: policy.Inject{Hosts: []string{"a.test"}}}
	if in := injectedCoords(aws, allowed); len(in.Hosts) != 0 {
		t.Errorf("injectedCoords(aws) = %+v, want no hosts", in)
	}
}
