package gateway

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// ipLookuper is the method of *net.Resolver the gateway resolves allowed names with.
type ipLookuper interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// exactLookup resolves exactly the name the policy judged, never another one. A resolver applies the
// host's search list (resolv.conf's "search" and "ndots", or the domain of the host's own name) to a
// name that is not fully qualified: with Kubernetes' "ndots:5" an allowed "api.example.com" is first
// asked as "api.example.com.corp.test", and if that name exists the gateway would dial a host the
// policy never named. Asking for the rooted name ("api.example.com.") turns the search list off; the
// same holds for network.dns.upstream, whose resolver reads the host's search list too.
func exactLookup(r ipLookuper) func(ctx context.Context, host string) ([]netip.Addr, error) {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		return r.LookupNetIP(ctx, "ip", rooted(host))
	}
}

// rooted returns host as a fully qualified DNS name: with exactly one trailing dot.
func rooted(host string) string {
	if strings.HasSuffix(host, ".") {
		return host
	}
	return host + "."
}

// upstreamResolver resolves through the DNS servers that network.dns.upstream names, instead of the
// host's resolver. Go's own resolver (PreferGo) is used so that Dial decides every server it talks to.
func upstreamResolver(servers []netip.AddrPort) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		var err error
		for _, s := range servers {
			var c net.Conn
			if c, err = d.DialContext(ctx, network, s.String()); err == nil {
				return c, nil
			}
		}
		return nil, err
	}}
}
