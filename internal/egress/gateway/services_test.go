package gateway

import (
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestWithServices: a service's name is known and allowed on its port only, and no other name under
// cordon.internal is ever known or allowed, whatever network.allow says (its wildcard would otherwise
// send a made-up service name to the host's resolver). Names outside the domain are the policy's.
func TestWithServices(t *testing.T) {
	net := &policy.Network{Allow: []policy.Endpoint{{Host: "*.cordon.internal"}, {Host: "example.com", Ports: []uint16{443}}}}
	m, err := net.Matcher(nil)
	if err != nil {
		t.Fatal(err)
	}
	w := newWithServices(m, []Service{{Name: "db", Port: 5432, Socket: "/s/db"}})
	tests := []struct {
		host  string
		port  uint16
		known bool
		allow bool
		sock  string
	}{
		{"db.cordon.internal", 5432, true, true, "/s/db"},
		{"db.cordon.internal", 22, true, false, ""},
		{"other.cordon.internal", 5432, false, false, ""},
		{"cordon.internal", 5432, false, false, ""},
		{"x.db.cordon.internal", 5432, false, false, ""},
		{"example.com", 443, true, true, ""}, // control: the policy's own
	}
	if _, reason := w.Explain("nowhere.test"); reason != "not in network.allow" {
		t.Errorf("the policy's explanation is lost: %q", reason)
	}
	for _, tt := range tests {
		if got := w.Known(tt.host); got != tt.known {
			t.Errorf("Known(%s) = %v, want %v", tt.host, got, tt.known)
		}
		if d := w.Decide(tt.host, tt.port); d.Allow != tt.allow {
			t.Errorf("Decide(%s, %d) = %+v, want allow %v", tt.host, tt.port, d, tt.allow)
		}
		if _, reason := w.Explain(tt.host); tt.host == "other.cordon.internal" && reason != "no such service in the policy" {
			t.Errorf("Explain(%s) = %q", tt.host, reason)
		}
		if sock, ok := w.socket(tt.host, tt.port); sock != tt.sock || ok != (tt.sock != "") {
			t.Errorf("socket(%s, %d) = %q, %v", tt.host, tt.port, sock, ok)
		}
	}
}
