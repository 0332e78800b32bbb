// Package suggest turns what a run was refused into the smallest policy change that would have
// allowed it, so that a policy grows on purpose, one reviewed edit at a time, instead of being
// widened whenever a build fails. It reads the run's audit events (internal/audit), sorts each
// refusal into an addition (a host and port for network.allow, a method and path for a
// network.http rule) or a refusal that must stay one (raw addresses, loopback and metadata
// addresses, names shaped like data, fronting, relayed CONNECTs, ...), and edits the policy's YAML
// text in place (edit.go) so that the user's comments and layout survive and the change reads as a
// short diff. It never allows anything by itself: the caller shows the edit and writes it only when
// asked.
package suggest

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// Plan is what a run's refusals call for.
type Plan struct {
	// Allow are endpoints to add to network.allow, sorted by host and port.
	Allow []Endpoint
	// HTTP are entries to add to network.http rules, sorted by rule, path and method.
	HTTP []HTTPEntry
	// Kept are the refusals that are not suggested, with the reason, in the order first seen.
	Kept []Refusal
}

// Empty says whether the plan changes nothing.
func (p Plan) Empty() bool { return len(p.Allow) == 0 && len(p.HTTP) == 0 }

// Endpoint is one host and port a run was refused because network.allow did not list them.
type Endpoint struct {
	Host string
	Port uint16
	// Refused counts the decisions behind it (connections and DNS queries).
	Refused int
	// DNSOnly: only the name's DNS lookup was refused, so the run never said which port it wanted;
	// the suggestion assumes 443 and says so.
	DNSOnly bool
}

// Comment says what the endpoint opens, for the line that adds it.
func (e Endpoint) Comment() string {
	if e.DNSOnly {
		return fmt.Sprintf("opens %s:%d; only its DNS lookup was refused (%s), so the port is a guess", e.Host, e.Port, times(e.Refused))
	}
	return fmt.Sprintf("opens TCP to %s:%d (refused %s)", e.Host, e.Port, times(e.Refused))
}

// HTTPEntry is one method and path (or path prefix) to allow on a network.http rule.
type HTTPEntry struct {
	// Rule is the index of the network.http entry to add it to; RuleHost that entry's host.
	Rule     int
	RuleHost string
	// NewRule: the host is covered only by a wildcard rule, so the entry goes into a new rule for
	// that host alone (Rule is -1, RuleHost the host): the other names under the wildcard gain nothing.
	NewRule bool
	// Host is the name the requests went to.
	Host    string
	Methods []string
	// Path is an exact path, or a prefix ending in "/*" when several refused paths under it differed
	// in their last segment only.
	Path string
	// Seen are the refused paths it covers; Refused counts the requests.
	Seen    []string
	Refused int
}

// Comment says what the entry opens, for the line that adds it: the method and path, and what a
// well-known protocol does there (git's smart HTTP).
func (h HTTPEntry) Comment() string {
	m := strings.Join(h.Methods, ", ")
	if prefix, ok := strings.CutSuffix(h.Path, "*"); ok {
		return fmt.Sprintf("%s to anything under %s (refused: %s)", m, prefix, strings.Join(h.Seen, ", "))
	}
	c := fmt.Sprintf("%s to %s", m, h.Path)
	if what := gitOperation(h.Methods, h.Path); what != "" {
		c += ": " + what
	}
	return c
}

// gitOperation names what a git smart-HTTP request does, or "".
func gitOperation(methods []string, path string) string {
	repo, op, ok := strings.Cut(strings.TrimPrefix(path, "/"), ".git/")
	if !ok || repo == "" {
		return ""
	}
	post, get := slices.Contains(methods, "POST"), slices.Contains(methods, "GET")
	switch {
	case op == "git-receive-pack" && post:
		return "pushing to " + repo
	case op == "git-upload-pack" && post:
		return "fetching from " + repo
	case op == "info/refs" && get:
		return "git's ref listing of " + repo + " (before a fetch or a push)"
	}
	return ""
}

// Refusal is a refusal that is not suggested.
type Refusal struct {
	// What was refused ("DNS name x.evil.test", "connect 1.1.1.1:80", "GET rules.test/x").
	What string
	// Why it stays refused.
	Why     string
	Refused int
}

// The reasons the gateway records for refusals that the policy could lift. Everything else it
// refuses is about the shape of the traffic, not about what the policy lists.
const (
	reasonNotAllowed = "not in network.allow"
	reasonNoNetwork  = "no network section in the policy"
)

// Analyze sorts the refusals among events into a plan. pol is the policy the suggestion will
// edit (the current file's, or the default): it says which network.http rule a refused request
// belongs to. Allowed events, the log's own notes and refusals of the same thing counted twice
// (a DNS lookup and the connection) are folded into one line each.
func Analyze(events []audit.Event, pol *policy.Policy) Plan {
	a := analyzer{pol: pol, allow: map[endpointKey]*Endpoint{}, http: map[httpKey]*httpRefused{}, kept: map[string]*Refusal{}}
	a.tunnels(events)
	for _, e := range events {
		if e.Decision == audit.Deny {
			a.event(e)
		}
	}
	return a.plan()
}

type endpointKey struct {
	host string
	port uint16
}

type httpKey struct {
	rule         int
	host, method string
}

// httpRefused collects the refused paths of one method on one rule's host.
type httpRefused struct {
	ruleHost string
	paths    map[string]int // canonical path → requests
}

type analyzer struct {
	pol       *policy.Policy
	allow     map[endpointKey]*Endpoint
	http      map[httpKey]*httpRefused
	kept      map[string]*Refusal
	keptOrder []string
	// tunnel maps a domain to why its names are data-shaped.
	tunnel map[string]string
}

func (a *analyzer) keep(what, why string, n int) {
	k := what + "\x00" + why
	if r := a.kept[k]; r != nil {
		r.Refused += n
		return
	}
	a.kept[k] = &Refusal{What: what, Why: why, Refused: n}
	a.keptOrder = append(a.keptOrder, k)
}

// tunnelNames is how many different refused DNS names under one domain make it a channel: a
// resolver retrying a name, or a build asking for a CDN's few hosts, stays far below; a tunnel's
// stream of names, each a few bytes of data, is far above.
const tunnelNames = 16

// tunnels finds the domains under which the sandbox asked for many different refused names: the
// shape of data carried out in DNS names, one query at a time. The log writes the first name of a
// domain as its own event and folds the different names that follow into events with a Group and a
// count, window after window, so the names are counted over the whole log: each distinct name of an
// event of its own, and every decision of a folded one.
func (a *analyzer) tunnels(events []audit.Event) {
	a.tunnel = map[string]string{}
	names := map[string]map[string]bool{}
	folded := map[string]int{}
	for _, e := range events {
		if e.Kind != audit.KindDNS || e.Decision != audit.Deny || e.Group == "*" {
			continue
		}
		if e.Group != "" {
			folded[e.Group] += e.Decisions()
			continue
		}
		d := audit.Domain(strings.ToLower(strings.TrimSuffix(e.Name, ".")))
		if names[d] == nil {
			names[d] = map[string]bool{}
		}
		names[d][e.Name] = true
	}
	for d := range folded {
		if names[d] == nil {
			names[d] = map[string]bool{} // a domain whose first name fell out of the log
		}
	}
	for d, ns := range names {
		if n := len(ns) + folded[d]; n >= tunnelNames {
			a.tunnel[d] = fmt.Sprintf("%d refused lookups of different names under %s: the shape of data sent out in DNS names", n, d)
		}
	}
}

func (a *analyzer) event(e audit.Event) {
	n := e.Decisions()
	switch e.Kind {
	case audit.KindDNS:
		what := "DNS name " + e.Name
		if e.Group == "*" {
			a.keep(fmt.Sprintf("DNS names %s, … (%s)", strings.Join(e.Names, ", "), e.Rule), "refusals spread over more domains than cordon keeps apart: allow the names you know by hand", n)
			return
		}
		if e.Group != "" {
			what = fmt.Sprintf("DNS names under %s (%s, …)", e.Group, strings.Join(e.Names, ", "))
		}
		if why := a.kept1(e); why != "" {
			a.keep(what, why, n)
			return
		}
		if e.Group != "" {
			// A few names folded together: suggest the ones the log names, and say that there may
			// be others it kept no name of.
			for _, name := range e.Names {
				a.addDNS(name, 1)
			}
			a.addDNS(e.Name, max(n-len(e.Names), 1))
			if n > len(e.Names)+1 {
				a.keep(fmt.Sprintf("DNS names under %s beyond %s", e.Group, strings.Join(append([]string{e.Name}, e.Names...), ", ")),
					"the log folds refusals of different names under one domain and keeps a sample of them: rerun to see the others one by one", n-len(e.Names)-1)
			}
			return
		}
		a.addDNS(e.Name, n)
	case audit.KindConnect:
		what := "connection to " + hostPort(e.Name, e.Port)
		if e.Group != "" {
			what = fmt.Sprintf("connections to %s, … port %d", strings.Join(append([]string{e.Name}, e.Names...), ", "), e.Port)
		}
		if why := a.kept1(e); why != "" {
			a.keep(what, why, n)
			return
		}
		if e.Group != "" {
			a.keep(what, "refusals of many names folded together: allow the names you know by hand", n)
			return
		}
		a.addEndpoint(e.Name, e.Port, n, false)
	case audit.KindHTTP:
		a.request(e, n)
	}
}

// kept1 says why a DNS or connection refusal stays one, or "": an address, whatever the gateway
// called it, then a refusal no allow entry lifts, then a name that must not be allowed.
func (a *analyzer) kept1(e audit.Event) string {
	if addr, err := netip.ParseAddr(strings.Trim(e.Name, "[]")); err == nil {
		return addrKept(addr)
	}
	if !liftable(e.Reason) {
		return keptReason(e.Reason)
	}
	return a.hostKept(e.Name)
}

// liftable says whether a connection or DNS refusal is one a network.allow entry would lift.
func liftable(reason string) bool {
	if reason == reasonNotAllowed || reason == reasonNoNetwork {
		return true
	}
	// "port 8443 not allowed for this host"
	rest, ok := strings.CutPrefix(reason, "port ")
	if !ok {
		return false
	}
	num, ok := strings.CutSuffix(rest, " not allowed for this host")
	_, err := strconv.ParseUint(num, 10, 16)
	return ok && err == nil
}

func (a *analyzer) addDNS(name string, n int) {
	if why := a.hostKept(name); why != "" {
		a.keep("DNS name "+name, why, n)
		return
	}
	a.addEndpoint(name, 0, n, true)
}

func (a *analyzer) addEndpoint(host string, port uint16, n int, dnsOnly bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if ep, err := policy.ParseEndpoint(host); err != nil || ep.Host != host || strings.HasPrefix(host, "*") {
		// The gateway records only names it could judge; anything else is not written into a policy.
		a.keep("name "+strconv.Quote(host), "not a host name network.allow can list", n)
		return
	}
	k := endpointKey{host, port}
	if e := a.allow[k]; e != nil {
		e.Refused += n
		return
	}
	a.allow[k] = &Endpoint{Host: host, Port: port, Refused: n, DNSOnly: dnsOnly}
}

// request sorts a refused intercepted request: one a network.http rule refused for its method and
// path is suggested; one refused for what it asked for besides (a body, an upgrade, an override
// header) or for its shape (fronting, CONNECT inside, a path that is not canonical) is kept.
func (a *analyzer) request(e audit.Event, n int) {
	method, raw := e.Detail["method"], e.Detail["path"]
	what := fmt.Sprintf("%s %s%s", method, hostPort(e.Name, e.Port), raw)
	if strings.HasPrefix(e.Rule, "network.git[") {
		// What a push may change is the user's to decide, ref by ref: never widened from a refusal.
		a.keep(what, e.Rule+" refused the push ("+e.Reason+"): change its push rules by hand if you mean to", n)
		return
	}
	if !strings.HasPrefix(e.Rule, "network.http[") || !strings.Contains(e.Reason, " is not allowed by ") {
		a.keep(what, keptReason(e.Reason), n)
		return
	}
	if !isMethod(method) {
		a.keep(what, "not an HTTP method a rule can name", n)
		return
	}
	p, err := url.PathUnescape(raw)
	switch {
	case err != nil || !strings.HasPrefix(p, "/"):
		a.keep(what, "its path does not decode to one a rule can name", n)
		return
	case strings.Contains(p, "*"):
		a.keep(what, `its path holds "*", which a path glob cannot name exactly: write the rule by hand`, n)
		return
	case !checkablePath(p):
		a.keep(what, "its path has a part a rule cannot name (a space or control byte, dot or empty segments)", n)
		return
	}
	rule := a.ruleFor(e.Name)
	if rule < 0 {
		a.keep(what, "no network.http rule of the current policy file covers "+e.Name, n)
		return
	}
	host := strings.ToLower(strings.TrimSuffix(e.Name, "."))
	ruleHost := a.pol.Network.HTTP[rule].Host
	if ruleHost != host {
		// A wildcard rule: widening it would open the path on every name under it.
		rule, ruleHost = -1, host
	}
	k := httpKey{rule: rule, host: host, method: strings.ToUpper(method)}
	h := a.http[k]
	if h == nil {
		h = &httpRefused{ruleHost: ruleHost, paths: map[string]int{}}
		a.http[k] = h
	}
	h.paths[p] += n
}

// isMethod says whether m is a method network.http takes.
func isMethod(m string) bool { return len(m) <= 32 && policy.ValidMethod(m) }

// checkablePath says whether p is a path network.http takes as an exact entry and the gateway can
// match (no empty segments, no backslash). A space or control byte is refused by the policy too: the
// path would be written into the file, and its comment, as the agent sent it.
func checkablePath(p string) bool {
	return utf8.ValidString(p) && policy.CheckHTTPPath(p) == nil && !strings.Contains(p, "//") && !strings.Contains(p, "\\")
}

// ruleFor is the index of the first network.http rule whose host matches name, as the gateway's
// fix names it, or -1.
func (a *analyzer) ruleFor(name string) int {
	if a.pol == nil || a.pol.Network == nil {
		return -1
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for i, r := range a.pol.Network.HTTP {
		if r.Host == name || strings.HasPrefix(r.Host, "*.") && strings.HasSuffix(name, r.Host[1:]) && len(name) > len(r.Host)-1 {
			return i
		}
	}
	return -1
}

func (a *analyzer) plan() Plan {
	var p Plan
	// A name refused both at DNS and as a connection needs only the connection's port.
	for k, e := range a.allow {
		if k.port != 0 {
			continue
		}
		connected := false
		for k2, e2 := range a.allow {
			if k2.host == k.host && k2.port != 0 {
				e2.Refused += e.Refused
				connected = true
				break
			}
		}
		if connected {
			continue
		}
		c := *e
		c.Port = 443
		if other := a.allow[endpointKey{k.host, 443}]; other == nil {
			p.Allow = append(p.Allow, c)
		}
	}
	for k, e := range a.allow {
		if k.port != 0 {
			p.Allow = append(p.Allow, *e)
		}
	}
	slices.SortFunc(p.Allow, func(x, y Endpoint) int {
		if c := strings.Compare(x.Host, y.Host); c != 0 {
			return c
		}
		return int(x.Port) - int(y.Port)
	})
	for k, h := range a.http {
		for _, g := range generalise(h.paths) {
			g.Rule, g.RuleHost, g.Host, g.Methods, g.NewRule = k.rule, h.ruleHost, k.host, []string{k.method}, k.rule < 0
			p.HTTP = append(p.HTTP, g)
		}
	}
	p.HTTP = mergeMethods(p.HTTP)
	for _, what := range a.keptOrder {
		p.Kept = append(p.Kept, *a.kept[what])
	}
	return p
}

// generalise turns refused paths into entries: paths that share everything but their last segment
// with another refused path become one "prefix/*" entry (never wider: a glob one segment up from
// what was refused, and only when at least two refusals need it); every other path stays exact.
func generalise(paths map[string]int) []HTTPEntry {
	byParent := map[string][]string{}
	for p := range paths {
		parent := p[:strings.LastIndexByte(p, '/')+1]
		byParent[parent] = append(byParent[parent], p)
	}
	var out []HTTPEntry
	for parent, ps := range byParent {
		slices.Sort(ps)
		if len(ps) >= 2 && parent != "/" {
			e := HTTPEntry{Path: parent + "*", Seen: ps}
			for _, p := range ps {
				e.Refused += paths[p]
			}
			out = append(out, e)
			continue
		}
		for _, p := range ps {
			out = append(out, HTTPEntry{Path: p, Seen: []string{p}, Refused: paths[p]})
		}
	}
	return out
}

// mergeMethods folds entries of one rule and path that differ by method into one entry.
func mergeMethods(in []HTTPEntry) []HTTPEntry {
	slices.SortFunc(in, func(x, y HTTPEntry) int {
		if x.Rule != y.Rule {
			return x.Rule - y.Rule
		}
		if c := strings.Compare(x.Host, y.Host); c != 0 {
			return c
		}
		if c := strings.Compare(x.Path, y.Path); c != 0 {
			return c
		}
		return strings.Compare(x.Methods[0], y.Methods[0])
	})
	var out []HTTPEntry
	for _, e := range in {
		if n := len(out); n > 0 && out[n-1].Rule == e.Rule && out[n-1].Host == e.Host && out[n-1].Path == e.Path {
			last := &out[n-1]
			last.Methods = append(last.Methods, e.Methods...)
			last.Refused += e.Refused
			for _, s := range e.Seen {
				if !slices.Contains(last.Seen, s) {
					last.Seen = append(last.Seen, s)
				}
			}
			continue
		}
		out = append(out, e)
	}
	return out
}

func hostPort(host string, port uint16) string {
	if port == 0 {
		return host
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// addrKept says why an address stays refused.
func addrKept(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case metadataAddrs[a]:
		return "a cloud metadata address (it hands out the machine's credentials): never suggested"
	case a.IsLoopback() || a.IsUnspecified():
		return "a loopback address: the host's own services are never suggested"
	case a.IsLinkLocalUnicast():
		return "a link-local address (where metadata services live): never suggested"
	}
	return "a raw IP address: cordon allows names, never addresses (a name the sandbox resolved is judged by name)"
}
