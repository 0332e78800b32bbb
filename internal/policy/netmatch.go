package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Decision is the network policy's answer for one host and port. It is the policy's own type, so that
// the policy stays data that knows nothing of the gateway enforcing it; the egress packages name it
// egress.Decision (an alias), which is how a *NetMatcher is the gateway's egress.Policy as it is.
type Decision struct {
	Allow bool
	// Rule names the policy line that decided ("network.allow[2]", "network.deny[0]", "default").
	Rule string
	// Reason says why in a few words ("not in network.allow").
	Reason string
	// Fix says which policy line would allow it, for the one-line denial message; empty when allowed
	// or when the denial is not a policy matter (a mismatch, a metadata address).
	Fix string
	// Upstream, when valid, is the address the policy pins the name to (network.hosts); the gateway
	// then dials it and nothing else, and may dial a private or loopback address only in this case.
	Upstream netip.Addr
}

// PresetSource expands a preset named in network.presets into the endpoints it allows. It is an
// interface because a preset is not a fixed list: it reads the tool's own configuration (npm's
// registry, GOPROXY, pip's index-url) at run time, so private mirrors work and nothing stale is baked
// into cordon. The expansion lives outside this package, which stays data and matching only.
type PresetSource interface {
	// Preset returns the endpoints the named preset allows. Host patterns are validated like
	// network.allow entries; an endpoint without ports means port 443.
	Preset(name string) ([]Endpoint, error)
}

// NetMatcher decides egress by the network section: which host names the sandbox may reach, on which
// TCP ports, and where the gateway must dial a pinned name; it is the gateway's egress.Policy. It is
// built once per run and is read-only afterwards, so it is safe for concurrent use without locks.
type NetMatcher struct {
	// none is set for a policy without a network section: everything is denied.
	none  bool
	allow []netRule
	deny  []netRule
	// allowExact and allowWild index allow by exact host and by wildcard suffix (the part after
	// "*."), so a decision costs one map look-up per label instead of a scan of every rule.
	allowExact, allowWild map[string][]int
	denyExact, denyWild   map[string][]int
	hosts                 map[string]netip.Addr
}

// netRule is one allow or deny entry, remembered with the policy line it came from so that every
// decision can name it.
type netRule struct {
	pattern string // "api.example.com" or "*.example.com"
	ports   []uint16
	// where names the line: `network.allow[2]`, `network.deny[0]`, or `network.presets[1] "github"`.
	where string
	// preset is set for entries a preset contributed: the user cannot edit those in place.
	preset bool
}

// Matcher compiles the network section into a NetMatcher, expanding presets through presets. A nil
// Network (no network section) yields a matcher that denies everything. Entries are validated again,
// since a Network may also be assembled in code (cordon run --allow), and naming a preset while
// presets is nil is an error rather than a silent narrowing of what the user asked for.
func (n *Network) Matcher(presets PresetSource) (*NetMatcher, error) {
	m := &NetMatcher{
		allowExact: map[string][]int{}, allowWild: map[string][]int{},
		denyExact: map[string][]int{}, denyWild: map[string][]int{},
		hosts: map[string]netip.Addr{},
	}
	if n == nil {
		m.none = true
		return m, nil
	}
	for i, ep := range n.Allow {
		if err := m.addAllow(ep, fmt.Sprintf("network.allow[%d]", i), false); err != nil {
			return nil, fmt.Errorf("network.allow[%d]: %w", i, err)
		}
	}
	for i, name := range n.Presets {
		if presets == nil {
			return nil, fmt.Errorf("network.presets[%d]: preset %q cannot be expanded: no preset source is available", i, name)
		}
		eps, err := presets.Preset(name)
		if err != nil {
			return nil, fmt.Errorf("network.presets[%d]: expanding preset %q: %w", i, name, err)
		}
		where := fmt.Sprintf("network.presets[%d] %q", i, name)
		for j, ep := range eps {
			if err := m.addAllow(ep, where, true); err != nil {
				return nil, fmt.Errorf("network.presets[%d]: preset %q entry %d: %w", i, name, j, err)
			}
		}
	}
	for i, pat := range n.Deny {
		p, err := checkHostPattern(pat)
		if err != nil {
			return nil, fmt.Errorf("network.deny[%d]: %w", i, err)
		}
		m.deny = append(m.deny, netRule{pattern: p, where: fmt.Sprintf("network.deny[%d]", i)})
		index(m.denyExact, m.denyWild, p, len(m.deny)-1)
	}
	for name, addr := range n.Hosts {
		h, err := checkExactHost(name)
		if err != nil {
			return nil, fmt.Errorf("network.hosts: %w", err)
		}
		if !addr.IsValid() {
			return nil, fmt.Errorf("network.hosts: %q has no address", name)
		}
		m.hosts[h] = addr.Unmap()
	}
	return m, nil
}

func (m *NetMatcher) addAllow(ep Endpoint, where string, preset bool) error {
	p, err := checkHostPattern(ep.Host)
	if err != nil {
		return err
	}
	ports := ep.Ports
	if len(ports) == 0 {
		ports = []uint16{443}
	}
	for _, port := range ports {
		if port == 0 {
			return fmt.Errorf("%q: port 0 is not a TCP port", ep.Host)
		}
	}
	m.allow = append(m.allow, netRule{pattern: p, ports: append([]uint16(nil), ports...), where: where, preset: preset})
	index(m.allowExact, m.allowWild, p, len(m.allow)-1)
	return nil
}

func index(exact, wild map[string][]int, pattern string, i int) {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		wild[suffix] = append(wild[suffix], i)
		return
	}
	exact[pattern] = append(exact[pattern], i)
}

// lookup returns the indexes of the rules matching host, most specific first: exact entries, then
// wildcards from the longest suffix to the shortest, each group in policy order. A wildcard matches
// proper subdomains only, at any depth, never the apex.
func lookup(exact, wild map[string][]int, host string) []int {
	out := append([]int(nil), exact[host]...)
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			out = append(out, wild[host[i+1:]]...)
		}
	}
	return out
}

// Decide says whether the sandbox may connect to host:port, naming the
// policy line that decided and, for a denial the user can lift, the exact edit that would allow it.
// Host names are compared lower-case without a trailing dot; IP literals and anything that is not a
// plain host name are always denied; a deny entry wins over every allow entry, on every port.
func (m *NetMatcher) Decide(host string, port uint16) Decision {
	h := normalizeHost(host)
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return Decision{Rule: "default", Reason: "an IP address, not a host name"}
	}
	if !validQueryHost(h) {
		return Decision{Rule: "default", Reason: "not a valid host name"}
	}
	if m == nil || m.none {
		return Decision{Rule: "default", Reason: "no network section in the policy", Fix: addHostFix(h, port)}
	}
	if d := lookup(m.denyExact, m.denyWild, h); len(d) > 0 {
		r := m.deny[d[0]]
		return Decision{
			Rule:   fmt.Sprintf("%s %q", r.where, r.pattern),
			Reason: "in network.deny",
			Fix:    fmt.Sprintf("remove %q from network.deny", r.pattern),
		}
	}
	cands := lookup(m.allowExact, m.allowWild, h)
	for _, i := range cands {
		r := m.allow[i]
		for _, p := range r.ports {
			if p == port {
				return Decision{Allow: true, Rule: r.describe(), Upstream: m.hosts[h]}
			}
		}
	}
	if len(cands) == 0 {
		return Decision{Rule: "default", Reason: "not in network.allow", Fix: addHostFix(h, port)}
	}
	r := m.allow[cands[0]]
	d := Decision{Rule: r.describe(), Reason: fmt.Sprintf("port %d not allowed for this host", port)}
	if r.preset {
		d.Fix = addHostFix(h, port)
	} else {
		d.Fix = fmt.Sprintf("add port %d to %s", port, r.where)
	}
	return d
}

// Known reports whether some allow entry admits host on some port and no
// deny entry refuses it, which is what decides whether the sandbox's DNS answers the name at all.
func (m *NetMatcher) Known(host string) bool {
	h := normalizeHost(host)
	// validQueryHost also refuses every IP literal: IPv6 has colons, IPv4 a numeric last label.
	if m == nil || m.none || !validQueryHost(h) {
		return false
	}
	return len(lookup(m.denyExact, m.denyWild, h)) == 0 && len(lookup(m.allowExact, m.allowWild, h)) > 0
}

// Explain names the rule behind Known(host), for the DNS audit event: the most specific allow entry
// that admits the name, or for an unknown name the deny entry that refuses it or "default" and why.
// The sandbox's DNS finds it as an optional method, so it needs no import of this package.
func (m *NetMatcher) Explain(host string) (rule, reason string) {
	h := normalizeHost(host)
	switch {
	case !validQueryHost(h):
		return "default", "not a valid host name"
	case m == nil || m.none:
		return "default", "no network section in the policy"
	}
	if d := lookup(m.denyExact, m.denyWild, h); len(d) > 0 {
		r := m.deny[d[0]]
		return fmt.Sprintf("%s %q", r.where, r.pattern), "in network.deny"
	}
	if a := lookup(m.allowExact, m.allowWild, h); len(a) > 0 {
		return m.allow[a[0]].describe(), ""
	}
	return "default", "not in network.allow"
}

// describe names the rule the way a user finds it in the file: `network.allow[2] "*.github.com" ports [443]`.
func (r netRule) describe() string {
	ps := make([]string, len(r.ports))
	for i, p := range r.ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return fmt.Sprintf("%s %q ports [%s]", r.where, r.pattern, strings.Join(ps, ", "))
}

// addHostFix is the policy edit that would allow host:port by a new allow entry.
func addHostFix(host string, port uint16) string {
	if port == 443 {
		return fmt.Sprintf("add %q to network.allow", host)
	}
	return fmt.Sprintf("add {host: %q, ports: [%d]} to network.allow", host, port)
}

// normalizeHost lower-cases ASCII letters and drops one trailing dot, the form policy entries are
// stored in. Only ASCII is folded: strings.ToLower would turn the Kelvin sign (U+212A) into "k", so a
// name the gateway never dials could match a rule for one it does.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			b := []byte(h)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return h
}

// validQueryHost reports whether h (normalized) is a plain host name: labels of letters, digits, '-'
// and '_' (seen in real host names), 1 to 63 bytes each, at most 253 in all, and a top-level label
// that is not all digits (which resolvers may read as an IPv4 address: "2130706433", "127.1"). Anything
// else (wildcards, escapes, control bytes, empty labels) can never match a rule by accident.
func validQueryHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}
