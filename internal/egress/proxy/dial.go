package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cordon-sandbox/cordon/internal/egress"
)

// refusal is a dial the gateway would not make: every address the name resolves to is one the
// sandbox must not reach through it.
type refusal struct{ d egress.Decision }

func (r *refusal) Error() string { return "proxy: " + r.d.Reason }

// Ranges that are neither private nor loopback by netip's definition, yet lead somewhere other than the
// public internet.
var (
	thisNetwork   = netip.MustParsePrefix("0.0.0.0/8")
	sharedCGNAT   = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT, and overlay VPNs such as Tailscale
	ietfProtocol  = netip.MustParsePrefix("192.0.0.0/24")
	benchmarking  = netip.MustParsePrefix("198.18.0.0/15")
	reserved4     = netip.MustParsePrefix("240.0.0.0/4") // includes 255.255.255.255
	v4Compatible  = netip.MustParsePrefix("::/96")
	nat64         = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local    = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	siteLocal6    = netip.MustParsePrefix("fec0::/10")
	discardOnly6  = netip.MustParsePrefix("100::/64")
	v4Translated6 = netip.MustParsePrefix("::ffff:0:0:0/96")
)

// addressClass says why the gateway must not dial a, or "" when it may: the gateway runs on the
// host, so an address that is not on the public internet would let the sandbox reach the host itself,
// its network, or the cloud metadata service, which is exactly what the network namespace took away.
func addressClass(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return "link-local" // 169.254.169.254, fe80::/10
	case a.IsMulticast() || a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private" // 10/8, 172.16/12, 192.168/16, fc00::/7
	case a.Zone() != "":
		return "scoped"
	}
	for _, p := range []netip.Prefix{thisNetwork, sharedCGNAT, ietfProtocol, benchmarking, reserved4, siteLocal6, discardOnly6, v4Translated6} {
		if p.Contains(a) {
			return "reserved"
		}
	}
	// IPv6 forms that carry an IPv4 address the packet may end up at.
	b := a.As16()
	switch {
	case v4Compatible.Contains(a), nat64.Contains(a):
		if why := addressClass(netip.AddrFrom4([4]byte(b[12:16]))); why != "" {
			return why + " (embedded IPv4)"
		}
	case nat64Local.Contains(a):
		return "reserved"
	case sixToFour.Contains(a):
		if why := addressClass(netip.AddrFrom4([4]byte(b[2:6]))); why != "" {
			return why + " (6to4)"
		}
	}
	if !a.IsGlobalUnicast() {
		return "not global unicast"
	}
	return ""
}

// dial connects to the upstream for name:port the way d says: the pinned address if there is one
// (that is the only case in which any address goes), otherwise the resolver's answers minus every
// address the gateway refuses. A name left with no address is a *refusal.
func (s *session) dial(ctx context.Context, name string, port uint16, d egress.Decision) (net.Conn, error) {
	c, err := s.dialAddrs(ctx, name, port, d)
	var r *refusal
	if err != nil && !errors.As(err, &r) && ctx.Err() == nil && s.g.cfg.Unreachable != nil {
		// An allowed host that cannot be reached is the user's to know (a name that does not
		// resolve, a server that is down): the sandbox sees only a reset or a 502.
		s.g.cfg.Unreachable(name, port, err)
	}
	return c, err
}

// dialAddrs is dial without telling Config.Unreachable.
func (s *session) dialAddrs(ctx context.Context, name string, port uint16, d egress.Decision) (net.Conn, error) {
	g := s.g
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	if g.cfg.Services != nil {
		if sock, ok := g.cfg.Services(name, port); ok {
			// A fixture service: its server listens on a unix socket only cordon can reach.
			s.detail("service", sock)
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, fmt.Errorf("proxy: dialing the service %s:%d: %w", name, port, err)
			}
			return c, nil
		}
	}
	var addrs []netip.Addr
	if d.Upstream.IsValid() {
		addrs = []netip.Addr{d.Upstream.Unmap()}
		s.detail("pinned", "true")
	} else {
		found, err := g.cfg.LookupNetIP(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("proxy: resolving %s: %w", name, err)
		}
		var why string
		var bad netip.Addr
		for _, a := range found {
			a = a.Unmap()
			class := addressClass(a)
			if class == "" {
				local, err := g.isLocal(a)
				if err != nil {
					return nil, err
				}
				if local {
					class = "this host's own"
				}
			}
			if class != "" {
				if why == "" {
					why, bad = class, a
				}
				continue
			}
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			if why == "" {
				return nil, fmt.Errorf("proxy: %s resolves to no address", name)
			}
			r := &refusal{egress.Decision{Rule: gatewayRule,
				Reason: fmt.Sprintf("resolves to a %s address (%s)", why, bad)}}
			if why != "link-local" {
				r.d.Fix = fmt.Sprintf("only if %s is meant to reach %s: pin it in network.hosts", name, bad)
			}
			return nil, r
		}
	}
	var errs []error
	for _, a := range addrs {
		addr := netip.AddrPortFrom(a, port).String()
		c, err := g.cfg.DialContext(ctx, "tcp", addr)
		if err == nil {
			s.detail("upstream", addr)
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("proxy: dialing %s:%d: %w", name, port, errors.Join(errs...))
}
