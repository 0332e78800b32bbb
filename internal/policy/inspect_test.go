package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestParseInspect: network.tls.inspect takes a list of host patterns (normalized like network.allow)
// or "all", and refuses anything else with the line and column of the value.
func TestParseInspect(t *testing.T) {
	for _, tc := range []struct {
		name, tls string
		hosts     []string
		all       bool
		err       string // the error after "p.yaml:", "" for none
	}{
		{"hosts", `{inspect: [Pass.Test., "*.CDN.example"]}`, []string{"pass.test", "*.cdn.example"}, false, ""},
		{"all", `{inspect: all}`, nil, true, ""},
		{"with caFile", `{caFile: /ca.pem, inspect: [a.test]}`, []string{"a.test"}, false, ""},
		{"other word", `{inspect: every}`, nil, false, `4:18: network.tls.inspect: expected a list of hosts or "all", got "every"`},
		{"all in a list", `{inspect: [a.test, all]}`, nil, false, "4:27: network.tls.inspect[1]: write inspect: all (not in a list)"},
		{"empty list", `{inspect: []}`, nil, false, `4:18: network.tls.inspect: expected at least one host (or "all")`},
		{"bool", `{inspect: true}`, nil, false, `4:18: network.tls.inspect: expected a list of hosts or "all", got`},
		{"bad host", `{inspect: [a.test, "a b"]}`, nil, false, "4:27: network.tls.inspect[1]: "},
		{"too broad", `{inspect: ["*.test"]}`, nil, false, `4:19: network.tls.inspect[0]: wildcard "*.test" is too broad`},
		{"twice", `{inspect: [a.test, A.test]}`, nil, false, `4:27: network.tls.inspect[1]: "a.test" is listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "version: 1\nnetwork:\n  allow: [a.test]\n  tls: " + tc.tls + "\n"
			p, err := Parse("p.yaml", []byte(src), testOpts)
			if tc.err != "" {
				if err == nil {
					t.Fatalf("Parse succeeded, want an error %q", tc.err)
				}
				if got := strings.TrimPrefix(err.Error(), "p.yaml:"); !strings.HasPrefix(got, tc.err) {
					t.Fatalf("error\n got %s\nwant %s…", got, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Network.TLS; !slices.Equal(got.Inspect, tc.hosts) || got.InspectAll != tc.all {
				t.Fatalf("tls = %+v, want inspect %q all %v", got, tc.hosts, tc.all)
			}
			// What policy check prints parses back to the same policy.
			out, err := p.Render()
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse("rendered", out, testOpts)
			if err != nil {
				t.Fatalf("rendered policy does not parse: %v\n%s", err, out)
			}
			back.Source, back.SourceSHA256 = p.Source, p.SourceSHA256
			if !reflect.DeepEqual(back, p) {
				t.Fatalf("round trip changed the policy:\n%s", out)
			}
		})
	}
}

// TestNotesWildcards: each wildcard in network.allow gets one note that says the names under it reach
// the zone's DNS servers when connected to; exact hosts get none.
func TestNotesWildcards(t *testing.T) {
	p := Default()
	if n := p.Notes(); n != nil {
		t.Fatalf("a policy without network has notes: %q", n)
	}
	p.Network = &Network{Allow: []Endpoint{
		{Host: "api.test", Ports: []uint16{443}},
		{Host: "*.allowed.test", Ports: []uint16{443}},
		{Host: "*.cdn.example", Ports: []uint16{8443}},
	}, Deny: []string{"*.bad.test"}}
	notes := p.Notes()
	if len(notes) != 2 {
		t.Fatalf("want a note for each of the 2 wildcards, got %q", notes)
	}
	for i, want := range []string{`network.allow[1] "*.allowed.test"`, `network.allow[2] "*.cdn.example"`} {
		if !strings.HasPrefix(notes[i], want) || !strings.Contains(notes[i], "DNS servers") || strings.Contains(notes[i], "\n") {
			t.Errorf("note %d = %q, want one line starting %s about DNS servers", i, notes[i], want)
		}
	}
	if !strings.Contains(notes[0], "allowed.test's DNS servers") {
		t.Errorf("the note does not name the zone: %q", notes[0])
	}
}
