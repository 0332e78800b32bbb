package intercept

import (
	"context"
	"errors"
	"net"
	"testing"
)

// TestWantsInspect: network.tls.inspect's hosts are intercepted through Hosts (without rules), and
// All intercepts every name; without either, a name no rule or host covers passes through.
func TestWantsInspect(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dial := func(context.Context, string, uint16) (net.Conn, error) {
		return nil, errors.New("no dial in this test")
	}
	for _, tc := range []struct {
		name  string
		hosts []string
		all   bool
		want  map[string]bool
	}{
		{"nothing", nil, false, map[string]bool{"pass.test": false, "a.cdn.test": false}},
		{"hosts", []string{"pass.test", "*.cdn.test"}, false, map[string]bool{"pass.test": true, "Pass.Test.": true, "a.cdn.test": true, "cdn.test": false, "other.test": false}},
		{"all", nil, true, map[string]bool{"pass.test": true, "other.test": true, "x.y.z.test": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, err := New(Config{CA: ca, Dial: dial, Hosts: tc.hosts, All: tc.all})
			if err != nil {
				t.Fatal(err)
			}
			defer i.Close()
			for name, want := range tc.want {
				if got := i.Wants(name); got != want {
					t.Errorf("Wants(%q) = %v, want %v", name, got, want)
				}
			}
		})
	}
}
