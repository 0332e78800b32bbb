package gateway

import (
	"errors"
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

// TestUnreachable: an allowed host that cannot be reached is told once per host and port, under the
// key the interceptor uses for the same upstream, so a certificate line and a dial line for one host
// make one line.
func TestUnreachable(t *testing.T) {
	var got []string
	n := newNotifier(func(line string) { got = append(got, line) })
	for range 3 {
		n.unreachable("down.test", 443, errors.New("connection refused"))
	}
	n.notify("upstream down.test:443", "the interceptor's line for the same host")
	n.unreachable("down.test", 8443, errors.New("connection refused"))
	want := []string{
		"cannot reach down.test:443 (connection refused); the sandbox's connections to it fail",
		"cannot reach down.test:8443 (connection refused); the sandbox's connections to it fail",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("notified %q, want %q", got, want)
	}
	var none *notifier
	none.unreachable("down.test", 443, errors.New("x"))
}
