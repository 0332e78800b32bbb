package suggest

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// FuzzSuggest feeds refusals with names, methods and paths of the agent's choosing (an audit log
// records what the sandbox sent) through Analyze and Edit. The edited file must load, allow what the
// plan says, and change nothing else: no line removed, no section but network.allow and the rules'
// allow lists touched, and no entry there that the plan does not hold. A name or path that could
// break out of its quotes or comment would fail here.
func FuzzSuggest(f *testing.F) {
	f.Add("new.test", uint16(8443), "POST", "/acme/x.git/git-receive-pack")
	f.Add("a.test\n    - evil.test", uint16(443), "GET", "/x\n        - {methods: [GET], paths: [\"/*\"]}")
	f.Add("b.test", uint16(80), "GET], paths: [\"/*\"]}, {methods: [GET", "/a\"]}, {methods: [GET], paths: [\"/*")
	f.Add("c.test", uint16(443), "GET", "/%0A    - evil.test")
	base, err := policy.Parse("p.yaml", []byte(basePolicy), policy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string, port uint16, method, path string) {
		events := []audit.Event{
			connect(name, port, reasonNotAllowed),
			dnsDeny(name),
			httpDeny(method, path),
			{Kind: audit.KindHTTP, Name: "git.test", Port: 443, Decision: audit.Deny, Rule: "network.http[0]",
				Reason: method + " " + path + " is not allowed by network.http[0]", Detail: map[string]string{"method": method, "path": path + "/2"}},
		}
		plan := Analyze(events, base)
		out, err := Edit("p.yaml", []byte(basePolicy), plan)
		if err != nil {
			t.Skip(err) // a layout it cannot edit: said, not written
		}
		got, err := Check("p.yaml", out, policy.Options{}, nil, plan)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// Only lines added, every old line kept in order.
		old := strings.Split(basePolicy, "\n")
		i := 0
		for _, l := range strings.Split(string(out), "\n") {
			if i < len(old) && l == old[i] {
				i++
			}
		}
		if i < len(old) {
			t.Fatalf("line %q of the file is gone:\n%s", old[i], out)
		}
		// Nothing but the two places changed.
		g, b := *got, *base
		g.Source, b.Source, g.SourceSHA256, b.SourceSHA256 = "", "", "", ""
		gn, bn := *g.Network, *b.Network
		gn.Allow, bn.Allow, gn.HTTP, bn.HTTP = nil, nil, nil, nil
		g.Network, b.Network = &gn, &bn
		if !reflect.DeepEqual(g, b) {
			t.Fatalf("the edit changed more than network.allow and the rules:\n%s", out)
		}
		for _, ep := range got.Network.Allow {
			if slices.ContainsFunc(base.Network.Allow, func(o policy.Endpoint) bool { return o.Host == ep.Host && slices.Equal(o.Ports, ep.Ports) }) {
				continue
			}
			for _, p := range ep.Ports {
				if !slices.ContainsFunc(plan.Allow, func(s Endpoint) bool { return s.Host == ep.Host && s.Port == p }) &&
					!slices.ContainsFunc(base.Network.Allow, func(o policy.Endpoint) bool { return o.Host == ep.Host && slices.Contains(o.Ports, p) }) {
					t.Fatalf("allows %s:%d, which the plan does not hold:\n%s", ep.Host, p, out)
				}
			}
		}
		if len(got.Network.HTTP) != len(base.Network.HTTP) {
			t.Fatalf("rules added:\n%s", out)
		}
		for _, a := range got.Network.HTTP[0].Allow[len(base.Network.HTTP[0].Allow):] {
			if !slices.ContainsFunc(plan.HTTP, func(h HTTPEntry) bool {
				return slices.Equal(h.Methods, a.Methods) && len(a.Paths) == 1 && a.Paths[0] == h.Path
			}) {
				t.Fatalf("an http entry the plan does not hold: %+v\n%s", a, out)
			}
		}
	})
}
