package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func testNetwork() *Network {
	return &Network{
		Allow: []Endpoint{
			{Host: "api.anthropic.com", Ports: []uint16{443}},        // 0
			{Host: "*.githubusercontent.com", Ports: []uint16{443}},  // 1
			{Host: "git.internal.example", Ports: []uint16{22, 443}}, // 2
			{Host: "*.github.com", Ports: []uint16{443}},             // 3
			{Host: "*.api.github.com", Ports: []uint16{8443}},        // 4
			{Host: "pkg.test", Ports: []uint16{8080}},                // 5
			{Host: "Default.Example."},                               // 6: no ports means 443
		},
		Deny:  []string{"uploads.github.com", "*.evil.github.com"},
		Hosts: map[string]netip.Addr{"pkg.test": netip.MustParseAddr("127.0.0.1"), "pinned.only": netip.MustParseAddr("10.0.0.1")},
	}
}

func mustMatcher(t testing.TB, n *Network, ps PresetSource) *NetMatcher {
	t.Helper()
	m, err := n.Matcher(ps)
	if err != nil {
		t.Fatalf("Matcher: %v", err)
	}
	return m
}

func TestNetMatcherDecide(t *testing.T) {
	m := mustMatcher(t, testNetwork(), nil)
	loop := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		name     string
		host     string
		port     uint16
		want     Decision
		wantKnow bool
	}{
		{"exact", "api.anthropic.com", 443, Decision{Allow: true, Rule: `network.allow[0] "api.anthropic.com" ports [443]`}, true},
		{"case and trailing dot", "API.Anthropic.COM.", 443, Decision{Allow: true, Rule: `network.allow[0] "api.anthropic.com" ports [443]`}, true},
		{"entry without ports means 443", "default.example", 443, Decision{Allow: true, Rule: `network.allow[6] "default.example" ports [443]`}, true},
		{"other port", "api.anthropic.com", 80, Decision{Rule: `network.allow[0] "api.anthropic.com" ports [443]`, Reason: "port 80 not allowed for this host", Fix: "add port 80 to network.allow[0]"}, true},
		{"second port", "git.internal.example", 22, Decision{Allow: true, Rule: `network.allow[2] "git.internal.example" ports [22, 443]`}, true},
		{"wildcard one level", "raw.githubusercontent.com", 443, Decision{Allow: true, Rule: `network.allow[1] "*.githubusercontent.com" ports [443]`}, true},
		{"wildcard any depth", "a.b.c.githubusercontent.com", 443, Decision{Allow: true, Rule: `network.allow[1] "*.githubusercontent.com" ports [443]`}, true},
		{"wildcard never the apex", "githubusercontent.com", 443, Decision{Rule: "default", Reason: "not in network.allow", Fix: `add "githubusercontent.com" to network.allow`}, false},
		{"suffix without a dot is another name", "evilgithubusercontent.com", 443, Decision{Rule: "default", Reason: "not in network.allow", Fix: `add "evilgithubusercontent.com" to network.allow`}, false},
		{"allowed name as a prefix", "api.anthropic.com.attacker.example", 443, Decision{Rule: "default", Reason: "not in network.allow", Fix: `add "api.anthropic.com.attacker.example" to network.allow`}, false},
		{"most specific wildcard decides first", "x.api.github.com", 8443, Decision{Allow: true, Rule: `network.allow[4] "*.api.github.com" ports [8443]`}, true},
		{"less specific wildcard still applies", "x.api.github.com", 443, Decision{Allow: true, Rule: `network.allow[3] "*.github.com" ports [443]`}, true},
		{"fix names the most specific entry", "x.api.github.com", 22, Decision{Rule: `network.allow[4] "*.api.github.com" ports [8443]`, Reason: "port 22 not allowed for this host", Fix: "add port 22 to network.allow[4]"}, true},
		{"deny wins over wildcard allow", "uploads.github.com", 443, Decision{Rule: `network.deny[0] "uploads.github.com"`, Reason: "in network.deny", Fix: `remove "uploads.github.com" from network.deny`}, false},
		{"deny covers every port", "uploads.github.com", 22, Decision{Rule: `network.deny[0] "uploads.github.com"`, Reason: "in network.deny", Fix: `remove "uploads.github.com" from network.deny`}, false},
		{"deny wildcard", "a.b.evil.github.com", 443, Decision{Rule: `network.deny[1] "*.evil.github.com"`, Reason: "in network.deny", Fix: `remove "*.evil.github.com" from network.deny`}, false},
		{"deny wildcard not its apex", "evil.github.com", 443, Decision{Allow: true, Rule: `network.allow[3] "*.github.com" ports [443]`}, true},
		{"pinned name carries its upstream", "pkg.test", 8080, Decision{Allow: true, Rule: `network.allow[5] "pkg.test" ports [8080]`, Upstream: loop}, true},
		{"pinned name on another port has no upstream", "pkg.test", 443, Decision{Rule: `network.allow[5] "pkg.test" ports [8080]`, Reason: "port 443 not allowed for this host", Fix: "add port 443 to network.allow[5]"}, true},
		{"hosts alone does not allow", "pinned.only", 443, Decision{Rule: "default", Reason: "not in network.allow", Fix: `add "pinned.only" to network.allow`}, false},
		{"fix for a new host on another port", "example.com", 8443, Decision{Rule: "default", Reason: "not in network.allow", Fix: `add {host: "example.com", ports: [8443]} to network.allow`}, false},
		{"IPv4 literal", "127.0.0.1", 443, Decision{Rule: "default", Reason: "an IP address, not a host name"}, false},
		{"IPv6 literal", "[::1]", 443, Decision{Rule: "default", Reason: "an IP address, not a host name"}, false},
		{"IPv6 literal bare", "fd00::1", 443, Decision{Rule: "default", Reason: "an IP address, not a host name"}, false},
		{"numeric name read as IPv4", "2130706433", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"short IPv4 form", "127.1", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"wildcard as a query", "*.github.com", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"empty label", "a..github.com", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"NUL byte", "x\x00.github.com", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"escaped dot", `a\.b.github.com`, 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"Kelvin sign is not k", "\u212Aa.github.com", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"space", "x.github.com ", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"empty", "", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"root", ".", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"too long", strings.Repeat("a.", 126) + "github.com", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
		{"label too long", strings.Repeat("a", 64) + ".github.com", 443, Decision{Rule: "default", Reason: "not a valid host name"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.Decide(tt.host, tt.port); got != tt.want {
				t.Errorf("Decide(%q, %d)\n got %+v\nwant %+v", tt.host, tt.port, got, tt.want)
			}
			if got := m.Known(tt.host); got != tt.wantKnow {
				t.Errorf("Known(%q) = %v, want %v", tt.host, got, tt.wantKnow)
			}
			// Explain agrees with Known: a known name is explained by an allow entry and no reason.
			rule, reason := m.Explain(tt.host)
			if tt.wantKnow != (reason == "" && strings.HasPrefix(rule, "network.allow[")) {
				t.Errorf("Explain(%q) = %q, %q; Known = %v", tt.host, rule, reason, tt.wantKnow)
			}
			if !tt.wantKnow && !tt.want.Allow && tt.want.Rule != "" && !strings.HasPrefix(tt.want.Rule, "network.allow[") && rule != tt.want.Rule {
				t.Errorf("Explain(%q) rule %q, Decide says %q", tt.host, rule, tt.want.Rule)
			}
		})
	}
}

// TestNetMatcherProtectionsCanFail shows, for each protection, that the same request is allowed once
// the policy grants it, so the denials above are the matcher's doing and not an accident of the input.
func TestNetMatcherProtectionsCanFail(t *testing.T) {
	tests := []struct {
		name       string
		host       string
		port       uint16
		protect    *Network
		permissive *Network
	}{
		{"deny wins", "uploads.github.com", 443,
			&Network{Allow: []Endpoint{{Host: "*.github.com"}}, Deny: []string{"uploads.github.com"}},
			&Network{Allow: []Endpoint{{Host: "*.github.com"}}}},
		{"wildcard deny wins over exact allow", "a.evil.example", 443,
			&Network{Allow: []Endpoint{{Host: "a.evil.example"}}, Deny: []string{"*.evil.example"}},
			&Network{Allow: []Endpoint{{Host: "a.evil.example"}}}},
		{"wildcard is not the apex", "github.com", 443,
			&Network{Allow: []Endpoint{{Host: "*.github.com"}}},
			&Network{Allow: []Endpoint{{Host: "*.github.com"}, {Host: "github.com"}}}},
		{"port", "github.com", 22,
			&Network{Allow: []Endpoint{{Host: "github.com"}}},
			&Network{Allow: []Endpoint{{Host: "github.com", Ports: []uint16{22, 443}}}}},
		{"hosts pin is no allow", "pkg.test", 443,
			&Network{Hosts: map[string]netip.Addr{"pkg.test": netip.MustParseAddr("127.0.0.1")}},
			&Network{Allow: []Endpoint{{Host: "pkg.test"}}, Hosts: map[string]netip.Addr{"pkg.test": netip.MustParseAddr("127.0.0.1")}}},
		{"no network section", "github.com", 443,
			nil,
			&Network{Allow: []Endpoint{{Host: "github.com"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := mustMatcher(t, tt.protect, nil).Decide(tt.host, tt.port); d.Allow {
				t.Errorf("protected: %s:%d allowed by %s", tt.host, tt.port, d.Rule)
			}
			if d := mustMatcher(t, tt.permissive, nil).Decide(tt.host, tt.port); !d.Allow {
				t.Errorf("permissive: %s:%d denied (%s), so the protected case proves nothing", tt.host, tt.port, d.Reason)
			}
		})
	}
}

func TestNetMatcherNilNetwork(t *testing.T) {
	var n *Network
	m := mustMatcher(t, n, nil)
	d := m.Decide("example.com", 443)
	want := Decision{Rule: "default", Reason: "no network section in the policy", Fix: `add "example.com" to network.allow`}
	if d != want {
		t.Errorf("got %+v, want %+v", d, want)
	}
	if m.Known("example.com") {
		t.Error("Known with no network section")
	}
	var nilm *NetMatcher
	if nilm.Decide("example.com", 443).Allow || nilm.Known("example.com") {
		t.Error("a nil *NetMatcher must deny")
	}
}

// TestNetMatcherRefusesBadEntries: a Network assembled in code (cordon run --allow) is validated like
// a parsed one, so an IP literal or an over-broad wildcard can never slip into the rules.
func TestNetMatcherRefusesBadEntries(t *testing.T) {
	tests := []struct {
		name string
		n    *Network
		want string
	}{
		{"IP in allow", &Network{Allow: []Endpoint{{Host: "127.0.0.1"}}}, "network.allow[0]: \"127.0.0.1\" is an IP address"},
		{"TLD wildcard", &Network{Allow: []Endpoint{{Host: "*.com"}}}, "network.allow[0]: wildcard \"*.com\" is too broad"},
		{"bare star", &Network{Allow: []Endpoint{{Host: "a.example"}, {Host: "*"}}}, "network.allow[1]: "},
		{"port zero", &Network{Allow: []Endpoint{{Host: "a.example", Ports: []uint16{0}}}}, "port 0"},
		{"bad deny", &Network{Deny: []string{"a/b"}}, "network.deny[0]: "},
		{"bad hosts key", &Network{Hosts: map[string]netip.Addr{"*.a.example": netip.MustParseAddr("10.0.0.1")}}, "network.hosts: "},
		{"hosts without address", &Network{Hosts: map[string]netip.Addr{"a.example": {}}}, "has no address"},
		{"preset without source", &Network{Presets: []string{"github"}}, `network.presets[0]: preset "github" cannot be expanded`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.n.Matcher(nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// fakePresets stands in for the preset expansion that reads each tool's own configuration.
type fakePresets map[string][]Endpoint

func (f fakePresets) Preset(name string) ([]Endpoint, error) {
	eps, ok := f[name]
	if !ok {
		return nil, errors.New("no such preset")
	}
	return eps, nil
}

func TestNetMatcherPresets(t *testing.T) {
	ps := fakePresets{
		"github": {{Host: "github.com"}, {Host: "*.githubusercontent.com", Ports: []uint16{443}}},
		"bad":    {{Host: "10.0.0.1"}},
	}
	n := &Network{Allow: []Endpoint{{Host: "a.example"}}, Presets: []string{"github"}, Deny: []string{"gist.githubusercontent.com"}}
	m := mustMatcher(t, n, ps)
	tests := []struct {
		host string
		port uint16
		want Decision
	}{
		{"github.com", 443, Decision{Allow: true, Rule: `network.presets[0] "github" "github.com" ports [443]`}},
		{"raw.githubusercontent.com", 443, Decision{Allow: true, Rule: `network.presets[0] "github" "*.githubusercontent.com" ports [443]`}},
		// A preset's entry cannot be edited, so the fix is a new allow entry.
		{"github.com", 22, Decision{Rule: `network.presets[0] "github" "github.com" ports [443]`, Reason: "port 22 not allowed for this host", Fix: `add {host: "github.com", ports: [22]} to network.allow`}},
		{"gist.githubusercontent.com", 443, Decision{Rule: `network.deny[0] "gist.githubusercontent.com"`, Reason: "in network.deny", Fix: `remove "gist.githubusercontent.com" from network.deny`}},
	}
	for _, tt := range tests {
		if got := m.Decide(tt.host, tt.port); got != tt.want {
			t.Errorf("Decide(%q, %d)\n got %+v\nwant %+v", tt.host, tt.port, got, tt.want)
		}
	}
	if _, err := (&Network{Presets: []string{"npm"}}).Matcher(ps); err == nil || !strings.Contains(err.Error(), `expanding preset "npm": no such preset`) {
		t.Errorf("unknown preset: err = %v", err)
	}
	if _, err := (&Network{Presets: []string{"go", "bad"}}).Matcher(fakePresets{"go": nil, "bad": ps["bad"]}); err == nil || !strings.Contains(err.Error(), `network.presets[1]: preset "bad" entry 0: "10.0.0.1" is an IP address`) {
		t.Errorf("preset with an IP entry: err = %v", err)
	}
}

// TestNetMatcherIsACopy: changing the Network after compiling cannot widen a running matcher.
func TestNetMatcherIsACopy(t *testing.T) {
	n := &Network{Allow: []Endpoint{{Host: "a.example", Ports: []uint16{443}}}}
	m := mustMatcher(t, n, nil)
	n.Allow[0].Ports[0] = 22
	if !m.Decide("a.example", 443).Allow || m.Decide("a.example", 22).Allow {
		t.Error("the matcher follows later changes to the Network")
	}
}

func BenchmarkNetMatcherDecide(b *testing.B) {
	m := mustMatcher(b, testNetwork(), nil)
	for b.Loop() {
		m.Decide("a.b.c.githubusercontent.com", 443)
	}
}

// refDecide is the matching rule written as plainly as possible (a scan of every entry with string
// suffixes), against which FuzzNetMatch checks the indexed matcher.
func refDecide(n *Network, host string, port uint16) (allow, known bool) {
	h := strings.TrimSuffix(strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, host), ".")
	if !validQueryHost(h) {
		return false, false
	}
	match := func(pattern string) bool {
		if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
			return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
		}
		return pattern == h
	}
	for _, d := range n.Deny {
		if match(d) {
			return false, false
		}
	}
	for _, ep := range n.Allow {
		if !match(strings.TrimSuffix(strings.ToLower(ep.Host), ".")) {
			continue
		}
		known = true
		ports := ep.Ports
		if len(ports) == 0 {
			ports = []uint16{443}
		}
		for _, p := range ports {
			allow = allow || p == port
		}
	}
	return allow, known
}

// FuzzNetMatch checks the matcher against refDecide and the invariants the gateway relies on: only
// plain host names are ever allowed, case and a trailing dot change nothing, an allowed name is Known,
// and a pinned upstream is handed out only with an allow.
func FuzzNetMatch(f *testing.F) {
	for _, s := range []string{"api.anthropic.com", "a.githubusercontent.com", "githubusercontent.com", "uploads.github.com",
		"x.api.github.com", "PKG.TEST.", "127.0.0.1", "[::1]", "a..b", "*.github.com", "x.evil.github.com"} {
		f.Add(s, uint16(443))
	}
	n := testNetwork()
	m := mustMatcher(f, n, nil)
	f.Fuzz(func(t *testing.T, host string, port uint16) {
		d := m.Decide(host, port)
		allow, known := refDecide(n, host, port)
		if d.Allow != allow || m.Known(host) != known {
			t.Fatalf("%q:%d: Decide.Allow=%v Known=%v, reference says %v %v (%+v)", host, port, d.Allow, m.Known(host), allow, known, d)
		}
		if d.Rule == "" {
			t.Fatalf("%q:%d: decision without a rule", host, port)
		}
		if !d.Allow {
			if d.Upstream.IsValid() {
				t.Fatalf("%q:%d: denied but pinned to %v", host, port, d.Upstream)
			}
			return
		}
		if strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
			t.Fatalf("allowed %q, which is not a plain host name", host)
		}
		if !m.Known(host) {
			t.Fatalf("allowed %q but not Known", host)
		}
		if d2 := m.Decide(strings.ToUpper(host)+".", port); d2 != d && !strings.HasSuffix(host, ".") {
			t.Fatalf("case or a trailing dot changed the decision for %q: %+v vs %+v", host, d, d2)
		}
	})
}
