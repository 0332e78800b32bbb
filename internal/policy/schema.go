package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file maps each section of the policy file onto the Policy types. Every section is a function
// of its node and field path, so adding a section or a key is a local change.

func (d *decoder) policy(root *yaml.Node) (*Policy, error) {
	if root.Kind != yaml.MappingNode {
		return nil, d.errf(root, "", "expected a mapping at the top level, got %s", describe(root))
	}
	// The version decides how to read everything else, so it is checked first.
	v := valueOf(root, "version")
	if v == nil {
		return nil, d.errf(root, "", "version is required (add \"version: %d\" at the top)", CurrentVersion)
	}
	if n, err := d.integer(v, "version", math.MinInt64, math.MaxInt64); err != nil {
		return nil, err
	} else if n != CurrentVersion {
		return nil, d.errf(v, "version", "%d is not supported (this cordon reads version %d)", n, CurrentVersion)
	}

	p := Default()
	seen, err := d.mapping(root, "",
		field{"version", func(*yaml.Node, string) error { return nil }},
		field{"filesystem", func(v *yaml.Node, path string) (err error) {
			p.Filesystem, err = d.filesystem(v, path)
			return err
		}},
		field{"env", func(v *yaml.Node, path string) (err error) {
			p.Env, err = d.env(v, path)
			return err
		}},
		field{"limits", func(v *yaml.Node, path string) (err error) {
			p.Limits, err = d.limits(v, path)
			return err
		}},
		field{"sandbox", func(v *yaml.Node, path string) error { return d.sandbox(v, path, &p.Sandbox) }},
		field{"network", func(v *yaml.Node, path string) (err error) {
			p.Network, err = d.network(v, path)
			return err
		}},
		field{"credentials", func(v *yaml.Node, path string) (err error) {
			p.Credentials, err = d.credentials(v, path)
			return err
		}},
	)
	if err != nil {
		return nil, err
	}
	// A credential's real value must never enter the sandbox through the environment.
	for i, c := range p.Credentials {
		where := "env.pass"
		_, set := p.Env.Set[c.Name]
		if set {
			where = "env.set"
		}
		if set || slices.Contains(p.Env.Pass, c.Name) {
			name := valueOf(seen["credentials"].Content[i], "name")
			return nil, d.errf(name, fmt.Sprintf("credentials[%d].name", i),
				"%s is also named in %s (a credential's value never enters the sandbox's environment)", c.Name, where)
		}
	}
	if len(p.Credentials) > 0 && p.Network == nil {
		return nil, d.errf(seen["credentials"], "credentials",
			"credentials need a network section that allows their hosts (a credential is only used on requests to them)")
	}
	return p, nil
}

func (d *decoder) filesystem(n *yaml.Node, path string) (fs Filesystem, err error) {
	mount := func(s string) (string, error) { return expandMount(s, d.home) }
	seen, err := d.mapping(n, path,
		field{"readonly", func(v *yaml.Node, p string) (err error) {
			fs.ReadOnly, err = d.strs(v, p, mount)
			return err
		}},
		field{"readwrite", func(v *yaml.Node, p string) (err error) {
			fs.ReadWrite, err = d.strs(v, p, mount)
			return err
		}},
		field{"deny", func(v *yaml.Node, p string) (err error) {
			fs.Deny, err = d.strs(v, p, checkGlob)
			return err
		}},
		field{"secrets", func(v *yaml.Node, p string) error {
			_, err := d.mapping(v, p,
				field{"scan", func(v *yaml.Node, p string) error {
					scan, err := d.boolean(v, p)
					fs.Secrets.NoScan = !scan
					return err
				}},
				field{"allow", func(v *yaml.Node, p string) (err error) {
					fs.Secrets.Allow, err = d.strs(v, p, checkGlob)
					return err
				}},
			)
			return err
		}},
	)
	if err != nil {
		return fs, err
	}
	for i, rw := range fs.ReadWrite {
		if slices.Contains(fs.ReadOnly, rw) {
			return fs, d.errf(seen["readwrite"].Content[i], fmt.Sprintf("%s.readwrite[%d]", path, i),
				"%q is also listed in readonly", rw)
		}
	}
	return fs, nil
}

func (d *decoder) env(n *yaml.Node, path string) (e Env, err error) {
	_, err = d.mapping(n, path,
		field{"pass", func(v *yaml.Node, p string) (err error) {
			e.Pass, err = d.strs(v, p, checkEnvName)
			return err
		}},
		field{"set", func(v *yaml.Node, p string) error {
			return d.pairs(v, p, func(k, val *yaml.Node, kp string) error {
				if _, err := checkEnvName(k.Value); err != nil {
					return d.errf(k, kp, "%v", err)
				}
				// Environment values are text: 1 and true are taken as written.
				switch val.ShortTag() {
				case "!!str", "!!int", "!!float", "!!bool":
				default:
					return d.errf(val, kp, "expected a string, got %s", describe(val))
				}
				if val.Kind != yaml.ScalarNode || strings.ContainsRune(val.Value, 0) {
					return d.errf(val, kp, "expected a string without NUL bytes")
				}
				if e.Set == nil {
					e.Set = make(map[string]string)
				}
				e.Set[k.Value] = val.Value
				return nil
			})
		}},
	)
	return e, err
}

func (d *decoder) limits(n *yaml.Node, path string) (l Limits, err error) {
	_, err = d.mapping(n, path,
		field{"memory", func(v *yaml.Node, p string) (err error) {
			l.Memory, err = d.size(v, p)
			return err
		}},
		field{"pids", func(v *yaml.Node, p string) (err error) {
			l.Pids, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}},
		field{"cpu", func(v *yaml.Node, p string) error {
			var f float64
			tag := v.ShortTag()
			if v.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!float" || v.Decode(&f) != nil ||
				math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
				return d.errf(v, p, "%s is not a number of CPUs (expected a positive number such as 1 or 1.5)", describe(v))
			}
			l.CPU = f
			return nil
		}},
		field{"timeout", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			t, err := time.ParseDuration(s)
			if err != nil || t <= 0 {
				return d.errf(v, p, "%q is not a duration (expected a positive duration such as 30m, 2h or 1h30m)", s)
			}
			l.Timeout = t
			return nil
		}},
		field{"openFiles", func(v *yaml.Node, p string) error {
			i, err := d.integer(v, p, 1, math.MaxInt64)
			l.OpenFiles = uint64(i)
			return err
		}},
		field{"disk", func(v *yaml.Node, p string) (err error) {
			l.Disk, err = d.size(v, p)
			return err
		}},
	)
	return l, err
}

func (d *decoder) size(n *yaml.Node, path string) (ByteSize, error) {
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!str" {
		return 0, d.errf(n, path, "%s is not a size (expected e.g. 512MiB, 2GiB, 1000000)", describe(n))
	}
	b, err := ParseByteSize(n.Value)
	if err != nil {
		return 0, d.errf(n, path, "%q is not a size (expected e.g. 512MiB, 2GiB, 1000000)", n.Value)
	}
	if b == 0 {
		return 0, d.errf(n, path, "must be positive (leave it out for no limit)")
	}
	return b, nil
}

func (d *decoder) sandbox(n *yaml.Node, path string, s *Sandbox) error {
	_, err := d.mapping(n, path,
		field{"allowNesting", func(v *yaml.Node, p string) (err error) {
			s.AllowNesting, err = d.boolean(v, p)
			return err
		}},
		field{"hostname", func(v *yaml.Node, p string) error {
			h, err := d.str(v, p)
			if err != nil {
				return err
			}
			if len(h) > 64 || !allLabels(h) {
				return d.errf(v, p, "%q is not a valid host name (expected letters, digits, - and dots, at most 64 characters)", h)
			}
			s.Hostname = h
			return nil
		}},
	)
	return err
}

func allLabels(h string) bool {
	for _, l := range strings.Split(h, ".") {
		if !validLabel(strings.ToLower(l)) {
			return false
		}
	}
	return true
}

func (d *decoder) network(n *yaml.Node, path string) (*Network, error) {
	nw := &Network{}
	_, err := d.mapping(n, path,
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
	)
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

func (d *decoder) credentials(n *yaml.Node, path string) ([]Credential, error) {
	var out []Credential
	first := map[string]int{}
	err := d.list(n, path, func(item *yaml.Node, ip string) error {
		c, err := d.credential(item, ip)
		if err != nil {
			return err
		}
		if line, dup := first[c.Name]; dup {
			return d.errf(valueOf(item, "name"), ip+".name", "credential %s is already defined at line %d", c.Name, line)
		}
		first[c.Name] = valueOf(item, "name").Line
		out = append(out, c)
		return nil
	})
	return out, err
}

func (d *decoder) credential(n *yaml.Node, path string) (c Credential, err error) {
	seen, err := d.mapping(n, path,
		field{"name", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if c.Name, err = checkEnvName(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"from", func(v *yaml.Node, p string) (err error) {
			c.From, err = d.source(v, p)
			return err
		}},
		field{"inject", func(v *yaml.Node, p string) error {
			// Read after from, wherever it is written: what inject needs depends on the source.
			return nil
		}},
	)
	if err != nil {
		return c, err
	}
	if err := d.require(n, path, seen, "name", "from", "inject"); err != nil {
		return c, err
	}
	c.Inject, err = d.inject(seen["inject"], path+".inject", c.From.NeedsPlacement())
	return c, err
}

func (d *decoder) source(n *yaml.Node, path string) (s Source, err error) {
	kinds := []string{"env", "file", "command", "githubApp", "aws"}
	seen, err := d.mapping(n, path,
		field{"env", func(v *yaml.Node, p string) error {
			name, err := d.str(v, p)
			if err != nil {
				return err
			}
			if s.Env, err = checkEnvName(name); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"file", func(v *yaml.Node, p string) (err error) {
			s.File, err = d.path(v, p)
			return err
		}},
		field{"command", func(v *yaml.Node, p string) error {
			err := d.list(v, p, func(v *yaml.Node, p string) error {
				arg, err := d.str(v, p)
				s.Command = append(s.Command, arg)
				return err
			})
			if err == nil && (len(s.Command) == 0 || s.Command[0] == "") {
				return d.errf(v, p, "expected a program and its arguments, e.g. [gh, auth, token]")
			}
			return err
		}},
		field{"githubApp", func(v *yaml.Node, p string) (err error) {
			s.GitHubApp, err = d.githubApp(v, p)
			return err
		}},
		field{"aws", func(v *yaml.Node, p string) (err error) {
			s.AWS, err = d.aws(v, p)
			return err
		}},
	)
	if err != nil {
		return s, err
	}
	var got []string
	for _, k := range kinds {
		if seen[k] != nil {
			got = append(got, k)
		}
	}
	if len(got) != 1 {
		msg := "set exactly one of " + strings.Join(kinds, ", ")
		if len(got) > 1 {
			msg += " (found " + strings.Join(got, " and ") + ")"
		}
		return s, d.errf(n, path, "%s", msg)
	}
	return s, nil
}

func (d *decoder) githubApp(n *yaml.Node, path string) (*GitHubApp, error) {
	g := &GitHubApp{}
	seen, err := d.mapping(n, path,
		field{"appId", func(v *yaml.Node, p string) (err error) {
			g.AppID, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}},
		field{"privateKeyFile", func(v *yaml.Node, p string) (err error) {
			g.PrivateKeyFile, err = d.path(v, p)
			return err
		}},
		field{"installationId", func(v *yaml.Node, p string) (err error) {
			g.InstallationID, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}},
		field{"repositories", func(v *yaml.Node, p string) (err error) {
			g.Repositories, err = d.strs(v, p, checkRepository)
			if err == nil && len(g.Repositories) == 0 {
				return d.errf(v, p, "expected at least one repository (owner/name)")
			}
			return err
		}},
		field{"permissions", func(v *yaml.Node, p string) error {
			err := d.pairs(v, p, func(k, val *yaml.Node, kp string) error {
				if !validPermission(k.Value) {
					return d.errf(k, kp, "%q is not a GitHub permission name (expected e.g. contents, pull_requests)", k.Value)
				}
				level, err := d.str(val, kp)
				if err != nil {
					return err
				}
				if level != "read" && level != "write" && level != "admin" {
					return d.errf(val, kp, "%q is not an access level (expected read, write or admin)", level)
				}
				if g.Permissions == nil {
					g.Permissions = make(map[string]string)
				}
				g.Permissions[k.Value] = level
				return nil
			})
			if err == nil && len(g.Permissions) == 0 {
				return d.errf(v, p, "expected at least one permission, e.g. {contents: read}")
			}
			return err
		}},
		field{"apiURL", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if g.APIURL, err = checkAPIURL(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
	)
	if err != nil {
		return nil, err
	}
	// A token with every permission of the installation on every repository is what this is for
	// avoiding, so repositories and permissions are required.
	return g, d.require(n, path, seen, "appId", "privateKeyFile", "installationId", "repositories", "permissions")
}

func (d *decoder) aws(n *yaml.Node, path string) (*AWS, error) {
	a := &AWS{}
	seen, err := d.mapping(n, path,
		field{"profile", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err == nil && (s == "" || strings.ContainsAny(s, "[]\n\r")) {
				err = d.errf(v, p, "%q is not a profile name", s)
			}
			a.Profile = s
			return err
		}},
		field{"env", func(v *yaml.Node, p string) (err error) {
			a.Env, err = d.boolean(v, p)
			if err == nil && !a.Env {
				err = d.errf(v, p, "env: false takes nothing from anywhere (set env: true or a profile)")
			}
			return err
		}},
		field{"assumeRole", func(v *yaml.Node, p string) (err error) {
			a.AssumeRole, err = d.assumeRole(v, p)
			return err
		}},
	)
	if err == nil && (seen["profile"] == nil) == (seen["env"] == nil) {
		err = d.errf(n, path, "set exactly one of profile (the AWS shared credentials file) or env: true")
	}
	return a, err
}

// isRoleARN checks arn:PARTITION:iam::ACCOUNT:role/NAME, with IAM's characters for names and paths.
// (Written out rather than as a regexp: a package-level regexp is compiled by every start of the
// binary, the sandbox's init included.)
func isRoleARN(s string) bool {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || !strings.HasPrefix(parts[1], "aws") || parts[2] != "iam" || parts[3] != "" {
		return false
	}
	if len(parts[4]) != 12 || strings.Trim(parts[4], "0123456789") != "" {
		return false
	}
	name, ok := strings.CutPrefix(parts[5], "role/")
	return ok && name != "" && len(name) <= 512 && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+=,.@/-") == ""
}

// isAWSRegion checks the shape of a region name: letters, then dash-separated words, then a number
// (eu-west-3, us-gov-west-1).
func isAWSRegion(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) < 3 || strings.Trim(parts[len(parts)-1], "0123456789") != "" || parts[len(parts)-1] == "" {
		return false
	}
	for _, p := range parts[:len(parts)-1] {
		if p == "" || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz") != "" {
			return false
		}
	}
	return true
}

func (d *decoder) assumeRole(n *yaml.Node, path string) (*AssumeRole, error) {
	r := &AssumeRole{}
	str := func(check func(string) error, set func(string)) func(*yaml.Node, string) error {
		return func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err == nil {
				if cerr := check(s); cerr != nil {
					return d.errf(v, p, "%v", cerr)
				}
				set(s)
			}
			return err
		}
	}
	seen, err := d.mapping(n, path,
		field{"roleArn", str(func(s string) error {
			if !isRoleARN(s) {
				return fmt.Errorf("%q is not a role ARN (expected arn:aws:iam::ACCOUNT:role/NAME)", s)
			}
			return nil
		}, func(s string) { r.RoleARN = s })},
		field{"sessionPolicy", str(func(s string) error {
			var doc map[string]any
			if json.Unmarshal([]byte(s), &doc) != nil {
				return errors.New("not a JSON policy document (expected {\"Version\": ..., \"Statement\": [...]})")
			}
			if _, ok := doc["Statement"]; !ok {
				return errors.New("the policy document has no Statement")
			}
			return nil
		}, func(s string) { r.SessionPolicy = s })},
		field{"duration", str(func(s string) error {
			t, err := time.ParseDuration(s)
			if err != nil || t < 15*time.Minute || t > 12*time.Hour {
				return fmt.Errorf("%q is not a session duration (expected 15m to 12h, such as 1h)", s)
			}
			r.Duration = t
			return nil
		}, func(string) {})},
		field{"endpoint", str(func(s string) error {
			_, err := checkAPIURL(s)
			return err
		}, func(s string) { r.Endpoint = s })},
		field{"region", str(func(s string) error {
			if !isAWSRegion(s) {
				return fmt.Errorf("%q is not an AWS region (such as eu-west-3)", s)
			}
			return nil
		}, func(s string) { r.Region = s })},
	)
	if err != nil {
		return nil, err
	}
	return r, d.require(n, path, seen, "roleArn")
}

func (d *decoder) inject(n *yaml.Node, path string, needsPlacement bool) (in Inject, err error) {
	seen, err := d.mapping(n, path,
		field{"host", func(v *yaml.Node, p string) error {
			if v.Kind == yaml.ScalarNode {
				h, err := d.host(v, p, checkHostPattern)
				in.Hosts = []string{h}
				return err
			}
			var err error
			in.Hosts, err = d.strs(v, p, checkHostPattern)
			if err == nil && len(in.Hosts) == 0 {
				return d.errf(v, p, "expected at least one host")
			}
			return err
		}},
		field{"header", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if in.Header, err = checkHeader(s); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
		field{"scheme", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if sc := Scheme(s); sc != SchemeBearer && sc != SchemeBasic {
				return d.errf(v, p, "%q is not a scheme (expected bearer or basic)", s)
			}
			in.Scheme = Scheme(s)
			return nil
		}},
		field{"body", func(v *yaml.Node, p string) (err error) {
			in.Body, err = d.boolean(v, p)
			return err
		}},
		field{"ranges", func(v *yaml.Node, p string) (err error) {
			in.Ranges, err = d.boolean(v, p)
			return err
		}},
	)
	if err != nil {
		return in, err
	}
	if err := d.require(n, path, seen, "host"); err != nil {
		return in, err
	}
	switch {
	case !needsPlacement && (seen["header"] != nil || seen["scheme"] != nil || in.Body):
		return in, d.errf(n, path, "an aws credential signs requests: it takes only host (no header, scheme or body)")
	case !needsPlacement:
	case seen["header"] != nil && seen["scheme"] != nil:
		return in, d.errf(n, path, "set header or scheme, not both (scheme uses the Authorization header)")
	case seen["header"] == nil && seen["scheme"] == nil && !in.Body:
		return in, d.errf(n, path, "say where to inject: header, scheme or body: true")
	}
	return in, nil
}

// host decodes a string and checks it as a host (pattern).
func (d *decoder) host(n *yaml.Node, path string, check func(string) (string, error)) (string, error) {
	s, err := d.str(n, path)
	if err != nil {
		return "", err
	}
	h, err := check(s)
	if err != nil {
		return "", d.errf(n, path, "%v", err)
	}
	return h, nil
}

// path decodes an absolute or ~-relative host path.
func (d *decoder) path(n *yaml.Node, path string) (string, error) {
	s, err := d.str(n, path)
	if err != nil {
		return "", err
	}
	p, err := expandPath(s, d.home)
	if err != nil {
		return "", d.errf(n, path, "%v", err)
	}
	return p, nil
}

// require reports the first of names missing from seen, at the mapping n.
func (d *decoder) require(n *yaml.Node, path string, seen map[string]*yaml.Node, names ...string) error {
	for _, name := range names {
		if seen[name] == nil {
			return d.errf(n, path, "%s is required", name)
		}
	}
	return nil
}

// valueOf returns the value of key in mapping n, or nil.
func valueOf(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
