package policy

import (
	"fmt"
	"net/netip"

	"go.yaml.in/yaml/v3"
)

// The network section: where the agent may connect, how names resolve, and which TLS the gateway
// inspects or intercepts.

// Network is the egress policy. Hosts are lower-case; a wildcard "*.example.com" matches subdomains
// only, never the apex.
type Network struct {
	// Allow lists the hosts and ports the sandbox may connect to.
	Allow []Endpoint
	// Deny lists host patterns refused even when Allow or a preset would admit them.
	Deny []string
	// Hosts pins names to upstream addresses instead of resolving them.
	Hosts map[string]netip.Addr
	// Presets names bundles of hosts (see KnownPresets) whose expansion is defined elsewhere.
	Presets []string
	DNS     DNS
	TLS     TLS
	// HTTP restricts requests to a host by method and path; it implies TLS interception for that host.
	HTTP []HTTPRule
	// Git says what may be pushed to repositories on a host (git.go); it implies TLS interception
	// for that host.
	Git []GitRule
}

// Endpoint is a host pattern and the TCP ports allowed on it.
type Endpoint struct {
	Host  string
	Ports []uint16
}

// DNS configures how the gateway resolves allowed names.
type DNS struct {
	// Upstream are resolvers to query; empty means the host's resolver configuration.
	Upstream []netip.AddrPort
}

// TLS configures the gateway's upstream TLS connections.
type TLS struct {
	// CAFile is an extra PEM bundle trusted for upstream servers (a corporate CA, a test server).
	CAFile string
	// Inspect lists host patterns whose TLS the gateway terminates only to check that every request's
	// Host or :authority is the name the TLS was for (its SNI). A host that is not intercepted passes
	// through as TLS the gateway cannot read, so a request inside may name any host the upstream
	// serves: domain fronting through a shared front (a CDN). No rules or credentials are needed.
	Inspect []string
	// InspectAll inspects every allowed host that way (written "inspect: all").
	InspectAll bool
}

// InspectAll is how network.tls.inspect is written to inspect every allowed host.
const InspectAll = "all"

// HTTPRule restricts the requests allowed to Host to those matching one of Allow.
type HTTPRule struct {
	Host  string
	Allow []HTTPAllow
}

// HTTPAllow admits requests whose method is one of Methods and whose path matches one of Paths, and
// that ask for nothing else unless it is allowed here: each of the fields below is something a lenient
// upstream may act on beyond the method and path judged.
type HTTPAllow struct {
	Methods []string
	Paths   []string
	// Body allows a request body on GET, HEAD, OPTIONS, DELETE and TRACE (refused otherwise).
	Body bool
	// Websocket allows a websocket upgrade; every other upgrade is refused.
	Websocket bool
	// Headers are method-override and URL-rewrite headers (X-HTTP-Method-Override, X-Original-URL,
	// ...) allowed on these requests; they are refused otherwise.
	Headers []string
}

func (d *decoder) network(n *yaml.Node, path string) (*Network, error) {
	nw := &Network{}
	seen, err := d.mapping(n, path,
		field{"allow", func(v *yaml.Node, p string) error {
			seen := map[string]bool{}
			return d.list(v, p, func(item *yaml.Node, ip string) error {
				ep, err := d.endpoint(item, ip)
				if err != nil {
					return err
				}
				if seen[ep.Host] {
					return d.errf(item, ip, "%q is listed twice", ep.Host)
				}
				seen[ep.Host] = true
				nw.Allow = append(nw.Allow, ep)
				return nil
			})
		}},
		field{"deny", func(v *yaml.Node, p string) (err error) {
			nw.Deny, err = d.strs(v, p, checkHostPattern)
			return err
		}},
		field{"hosts", func(v *yaml.Node, p string) error {
			return d.pairs(v, p, func(k, val *yaml.Node, kp string) error {
				h, err := checkExactHost(k.Value)
				if err != nil {
					return d.errf(k, kp, "%v", err)
				}
				if _, dup := nw.Hosts[h]; dup {
					return d.errf(k, kp, "%q is listed twice", h)
				}
				s, err := d.str(val, kp)
				if err != nil {
					return err
				}
				a, err := netip.ParseAddr(s)
				if err != nil {
					return d.errf(val, kp, "%q is not an IP address", s)
				}
				if nw.Hosts == nil {
					nw.Hosts = make(map[string]netip.Addr)
				}
				nw.Hosts[h] = a
				return nil
			})
		}},
		field{"presets", func(v *yaml.Node, p string) (err error) {
			nw.Presets, err = d.strs(v, p, checkPreset)
			return err
		}},
		field{"dns", func(v *yaml.Node, p string) error {
			_, err := d.mapping(v, p, field{"upstream", func(v *yaml.Node, p string) error {
				ups, err := d.strs(v, p, checkUpstream)
				for _, u := range ups {
					nw.DNS.Upstream = append(nw.DNS.Upstream, netip.MustParseAddrPort(u))
				}
				return err
			}})
			return err
		}},
		field{"tls", func(v *yaml.Node, p string) error {
			_, err := d.mapping(v, p, field{"caFile", func(v *yaml.Node, p string) (err error) {
				nw.TLS.CAFile, err = d.path(v, p)
				return err
			}}, field{"inspect", func(v *yaml.Node, p string) (err error) {
				nw.TLS.Inspect, nw.TLS.InspectAll, err = d.inspect(v, p)
				return err
			}})
			return err
		}},
		field{"http", func(v *yaml.Node, p string) error {
			seen := map[string]bool{}
			return d.list(v, p, func(item *yaml.Node, ip string) error {
				r, err := d.httpRule(item, ip)
				if err != nil {
					return err
				}
				if seen[r.Host] {
					return d.errf(item, ip, "%q has more than one rule", r.Host)
				}
				seen[r.Host] = true
				nw.HTTP = append(nw.HTTP, r)
				return nil
			})
		}},
		field{"git", func(v *yaml.Node, p string) (err error) {
			nw.Git, err = d.gitRules(v, p)
			return err
		}},
	)
	if err == nil && seen["git"] != nil {
		err = d.checkGitHosts(nw, seen["git"])
	}
	return nw, err
}

// inspect reads network.tls.inspect: "all", or a list of host patterns.
func (d *decoder) inspect(n *yaml.Node, path string) (hosts []string, all bool, err error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Value == InspectAll {
		return nil, true, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, false, d.errf(n, path, "expected a list of hosts or %q, got %s", InspectAll, describe(n))
	}
	hosts, err = d.strs(n, path, func(s string) (string, error) {
		if s == InspectAll {
			// Surely meant as the word, which would otherwise inspect a host named "all" only.
			return "", fmt.Errorf("write inspect: %s (not in a list) to inspect every allowed host", InspectAll)
		}
		return checkHostPattern(s)
	})
	if err == nil && len(hosts) == 0 {
		err = d.errf(n, path, "expected at least one host (or %q)", InspectAll)
	}
	return hosts, false, err
}

// endpoint reads an allow entry: a bare host (port 443) or {host, ports}.
func (d *decoder) endpoint(n *yaml.Node, path string) (Endpoint, error) {
	if n.Kind == yaml.ScalarNode {
		h, err := d.host(n, path, checkHostPattern)
		return Endpoint{Host: h, Ports: []uint16{443}}, err
	}
	ep := Endpoint{Ports: []uint16{443}}
	seen, err := d.mapping(n, path,
		field{"host", func(v *yaml.Node, p string) (err error) {
			ep.Host, err = d.host(v, p, checkHostPattern)
			return err
		}},
		field{"ports", func(v *yaml.Node, p string) error {
			ep.Ports = nil
			err := d.list(v, p, func(v *yaml.Node, p string) error {
				port, err := d.integer(v, p, 1, 65535)
				if err != nil {
					return err
				}
				for _, q := range ep.Ports {
					if q == uint16(port) {
						return d.errf(v, p, "port %d is listed twice", port)
					}
				}
				ep.Ports = append(ep.Ports, uint16(port))
				return nil
			})
			if err == nil && len(ep.Ports) == 0 {
				return d.errf(v, p, "expected at least one port")
			}
			return err
		}},
	)
	if err == nil && seen["host"] == nil {
		err = d.errf(n, path, "host is required")
	}
	return ep, err
}

func (d *decoder) httpRule(n *yaml.Node, path string) (HTTPRule, error) {
	var r HTTPRule
	seen, err := d.mapping(n, path,
		field{"host", func(v *yaml.Node, p string) (err error) {
			r.Host, err = d.host(v, p, checkHostPattern)
			return err
		}},
		field{"allow", func(v *yaml.Node, p string) error {
			err := d.list(v, p, func(v *yaml.Node, p string) error {
				var a HTTPAllow
				seen, err := d.mapping(v, p,
					field{"methods", func(v *yaml.Node, p string) (err error) {
						a.Methods, err = d.strs(v, p, checkMethod)
						return err
					}},
					field{"paths", func(v *yaml.Node, p string) (err error) {
						a.Paths, err = d.strs(v, p, checkHTTPPath)
						return err
					}},
					field{"body", func(v *yaml.Node, p string) (err error) {
						a.Body, err = d.boolean(v, p)
						return err
					}},
					field{"websocket", func(v *yaml.Node, p string) (err error) {
						a.Websocket, err = d.boolean(v, p)
						return err
					}},
					field{"headers", func(v *yaml.Node, p string) (err error) {
						a.Headers, err = d.strs(v, p, checkOverrideHeader)
						return err
					}},
				)
				if err != nil {
					return err
				}
				if err := d.require(v, p, seen, "methods", "paths"); err != nil {
					return err
				}
				r.Allow = append(r.Allow, a)
				return nil
			})
			if err == nil && len(r.Allow) == 0 {
				return d.errf(v, p, "expected at least one rule")
			}
			return err
		}},
	)
	if err != nil {
		return r, err
	}
	return r, d.require(n, path, seen, "host", "allow")
}
