// Package egress is cordon's gateway: the only way out of the sandbox's network namespace. It answers
// DNS for allowed names with addresses from a private range that map back to the name, takes every TCP
// connection the sandbox makes (redirected by nftables, or through the explicit proxy), works out the
// name the connection is for (mapped address, TLS SNI, HTTP Host, CONNECT target, which must agree),
// decides by the policy, dials the real host itself and relays, recording every decision.
//
// The pieces meet through the small interfaces below, so each can be tested on its own.
package egress

import (
	"net/netip"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// Decision is the policy's answer for one host and port: allow or not, the policy line that decided,
// why, the edit that would allow it, and where a pinned name must be dialled. The type is the policy's
// (policy.Decision): the policy is data and imports nothing of the gateway, so the dependency runs
// from enforcement to rules and never back. The alias keeps the gateway's vocabulary.
type Decision = policy.Decision

// Policy decides whether the sandbox may reach host:port. Host is lower-case, without a trailing dot.
type Policy interface {
	Decide(host string, port uint16) Decision
	// Known reports whether any rule could allow host on some port, which decides whether DNS answers
	// it at all.
	Known(host string) bool
}

// Names maps the private addresses the sandbox's DNS hands out back to host names. Every address
// belongs to exactly one name for the whole run.
type Names interface {
	// Assign returns the name's IPv4 (and IPv6, if the mapper has an IPv6 range) address, assigning it on
	// first use.
	Assign(name string) (v4, v6 netip.Addr, err error)
	// Lookup returns the name an address was assigned to.
	Lookup(addr netip.Addr) (name string, ok bool)
}
