package gateway

import (
	"slices"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/egress"
)

// TestRefusedConn: the proxy reports every refused connection, and the human is told once per host
// and port, with the fix when there is one; a gateway without a terminal (nil notifier) drops them.
func TestRefusedConn(t *testing.T) {
	var got []string
	n := newNotifier(func(line string) { got = append(got, line) })
	deny := egress.Decision{Reason: "not in network.allow", Fix: `add "denied.test:443" to network.allow`}
	for range 3 {
		n.refusedConn(deny, "denied.test", 443)
		n.refusedConn(egress.Decision{Reason: "not in network.allow"}, "denied.test", 22)
	}
	want := []string{
		`blocked denied.test:443 (not in network.allow) — to allow: add "denied.test:443" to network.allow`,
		"blocked denied.test:22 (not in network.allow)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("notified %q, want %q", got, want)
	}
	var none *notifier
	none.refusedConn(deny, "denied.test", 443)
}
