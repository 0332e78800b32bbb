package suggest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/udiff"
)

const basePolicy = `version: 1
# my policy

network:
  allow:
    - api.example.com   # the API
    - {host: git.test, ports: [443]}

  hosts: {git.test: 127.0.0.1}
  http:
    - host: git.test
      allow:
        - {methods: [GET], paths: ["/acme/app.git/*"]}  # fetches
limits: {timeout: 1h}
`

func connect(name string, port uint16, reason string) audit.Event {
	return audit.Event{Kind: audit.KindConnect, Name: name, Port: port, Decision: audit.Deny, Rule: "default", Reason: reason}
}

func dnsDeny(name string) audit.Event {
	return audit.Event{Kind: audit.KindDNS, Name: name, Decision: audit.Deny, Rule: "default", Reason: reasonNotAllowed}
}

func httpDeny(method, path string) audit.Event {
	return audit.Event{Kind: audit.KindHTTP, Name: "git.test", Port: 443, Decision: audit.Deny, Rule: "network.http[0]",
		Reason: method + " " + path + " is not allowed by network.http[0] (which allows GET on /acme/app.git/*)",
		Detail: map[string]string{"method": method, "path": path}}
}

func TestSuggest(t *testing.T) {
	var slow []audit.Event
	var slowKept []string
	for i := range 16 {
		name := fmt.Sprintf("q%d.slow.test", i)
		slow = append(slow, dnsDeny(name))
		slowKept = append(slowKept, "DNS name "+name+": 16 refused lookups of different names under slow.test")
	}
	slow = append(slow, dnsDeny("a.cdn.test"), dnsDeny("b.cdn.test"), dnsDeny("a.cdn.test"))
	for _, tc := range []struct {
		name   string
		policy string
		events []audit.Event
		// want are lines the diff must add (without the leading "+"); kept are refusals listed apart.
		want, kept []string
		// never must appear in no added line.
		never []string
	}{
		{
			name:   "a new host and port",
			events: []audit.Event{connect("new.test", 8443, reasonNotAllowed), connect("new.test", 8443, reasonNotAllowed)},
			want:   []string{"    - {host: new.test, ports: [8443]}  # opens TCP to new.test:8443 (refused 2 times)"},
		},
		{
			name:   "a port for a bare host",
			events: []audit.Event{connect("api.example.com", 8080, "port 8080 not allowed for this host")},
			want:   []string{"    # opens TCP to api.example.com:8080 (refused once)", "    - {host: api.example.com, ports: [443, 8080]}   # the API"},
		},
		{
			name:   "a port for a flow entry",
			events: []audit.Event{connect("git.test", 9418, "port 9418 not allowed for this host")},
			want:   []string{"    - {host: git.test, ports: [443, 9418]}  # 9418: opens TCP to git.test:9418 (refused once)"},
		},
		{
			name:   "a DNS lookup alone and a name with a connection",
			events: []audit.Event{dnsDeny("only-dns.test"), dnsDeny("both.test"), connect("both.test", 80, reasonNotAllowed)},
			want: []string{
				"    - {host: both.test, ports: [80]}  # opens TCP to both.test:80 (refused 2 times)",
				"    - only-dns.test  # opens only-dns.test:443; only its DNS lookup was refused (once), so the port is a guess",
			},
		},
		{
			name:   "git push to another repo, exact paths",
			events: []audit.Event{httpDeny("GET", "/acme/other.git/info/refs"), httpDeny("POST", "/acme/other.git/git-receive-pack")},
			want: []string{
				`        - {methods: [GET], paths: ["/acme/other.git/info/refs"]}  # GET to /acme/other.git/info/refs: git's ref listing of acme/other (before a fetch or a push)`,
				`        - {methods: [POST], paths: ["/acme/other.git/git-receive-pack"]}  # POST to /acme/other.git/git-receive-pack: pushing to acme/other`,
			},
		},
		{
			name:   "several paths under one prefix generalise one segment",
			events: []audit.Event{httpDeny("GET", "/api/v1/users"), httpDeny("GET", "/api/v1/repos"), httpDeny("GET", "/api/v2/x/y")},
			want: []string{
				`        - {methods: [GET], paths: ["/api/v1/*"]}  # GET to anything under /api/v1/ (refused: /api/v1/repos, /api/v1/users)`,
				`        - {methods: [GET], paths: ["/api/v2/x/y"]}  # GET to /api/v2/x/y`,
			},
			never: []string{`"/api/*"`, `"/*"`},
		},
		{
			name:   "a host under a wildcard rule gets a rule of its own",
			policy: "version: 1\nnetwork:\n  allow: [\"*.git.test\"]\n  http:\n    - host: \"*.git.test\"\n      allow: [{methods: [GET], paths: [\"/*\"]}]\n",
			events: []audit.Event{
				{Kind: audit.KindHTTP, Name: "eu.git.test", Port: 443, Decision: audit.Deny, Rule: "network.http[0]",
					Reason: "POST /a/b.git/git-receive-pack is not allowed by network.http[0]", Detail: map[string]string{"method": "POST", "path": "/a/b.git/git-receive-pack"}},
			},
			want: []string{`    - {host: eu.git.test, allow: [{methods: [POST], paths: ["/a/b.git/git-receive-pack"]}]}  # POST to /a/b.git/git-receive-pack: pushing to a/b (a rule of its own: the other names under the wildcard gain nothing)`},
		},
		{
			name:   "methods of one path merge",
			events: []audit.Event{httpDeny("PUT", "/up/a"), httpDeny("DELETE", "/up/a")},
			want:   []string{`        - {methods: [DELETE, PUT], paths: ["/up/a"]}  # DELETE, PUT to /up/a`},
		},
		{
			name: "what must stay refused",
			events: []audit.Event{
				connect("1.1.1.1", 80, "an IP address, not a host name"),
				connect("169.254.169.254", 80, "an IP address, not a host name"),
				connect("", 80, "address not handed out by the sandbox's DNS"),
				connect("metadata.google.internal", 80, reasonNotAllowed),
				dnsDeny("metadata.google.internal"),
				connect("localhost", 8080, reasonNotAllowed),
				dnsDeny("6f7574206f662074686520736164626f78.evil.test"),
				dnsDeny("a8f3k29dj3kd03jd8e2kq.evil2.test"),
				{Kind: audit.KindDNS, Name: "q1.tunnel.test", Decision: audit.Deny, Reason: reasonNotAllowed, Group: "tunnel.test", Names: []string{"q2.tunnel.test"}, Count: 500},
				dnsDeny("q0.tunnel.test"),
				connect("pinned.test", 443, "SNI does not match the name"),
				connect("pinned.test", 443, "CONNECT through a connection the gateway already judged"),
				connect("blocked.test", 443, "in network.deny"),
				connect("lo.test", 443, "resolves to a loopback address (127.0.0.1)"),
				{Kind: audit.KindHTTP, Name: "git.test", Decision: audit.Deny, Rule: "gateway", Reason: "Host does not match the connection's name", Detail: map[string]string{"method": "GET", "path": "/x"}},
				{Kind: audit.KindHTTP, Name: "git.test", Decision: audit.Deny, Rule: "network.http[0].allow[0]", Reason: "a body on GET is not allowed", Detail: map[string]string{"method": "GET", "path": "/acme/app.git/x"}},
				{Kind: audit.KindHTTP, Name: "git.test", Decision: audit.Deny, Rule: "network.git[0].push.branches", Reason: "refs/heads/main is not in push.branches", Detail: map[string]string{"method": "POST", "path": "/acme/app.git/git-receive-pack"}},
				connect("fine.test", 443, reasonNotAllowed), // the control: this one is suggested
			},
			want: []string{"    - fine.test  # opens TCP to fine.test:443 (refused once)"},
			kept: []string{
				"connection to 1.1.1.1:80: a raw IP address", "connection to 169.254.169.254:80: a cloud metadata address",
				"connection to :80: a raw IP address (not one the sandbox's DNS handed out)",
				"connection to metadata.google.internal:80: a cloud metadata service's name",
				"DNS name metadata.google.internal: a cloud metadata service's name",
				"connection to localhost:8080: a loopback name",
				"DNS name 6f7574206f662074686520736164626f78.evil.test: a label of 34 characters",
				"DNS name a8f3k29dj3kd03jd8e2kq.evil2.test: the label \"a8f3k29dj3kd03jd8e2kq\" reads as encoded bytes",
				"DNS names under tunnel.test (q2.tunnel.test, …): 501 refused lookups of different names under tunnel.test",
				"DNS name q0.tunnel.test: 501 refused lookups",
				"connection to pinned.test:443: the TLS name differs", "connection to pinned.test:443: a CONNECT relayed",
				"connection to blocked.test:443: network.deny refuses it",
				"connection to lo.test:443: resolves to a loopback address",
				"GET git.test/x: the Host header differs",
				"GET git.test/acme/app.git/x: not something an allow entry lifts: a body on GET",
				"POST git.test/acme/app.git/git-receive-pack: network.git[0].push.branches refused the push",
			},
			never: []string{"1.1.1.1", "169.254", "metadata", "localhost", "evil", "tunnel", "pinned", "blocked", "lo.test", "/x"},
		},
		{
			name:   "a tunnel slower than the log's folding, and a CDN's few names",
			events: slow,
			want: []string{
				"    - a.cdn.test  # opens a.cdn.test:443; only its DNS lookup was refused (2 times), so the port is a guess",
				"    - b.cdn.test  # opens b.cdn.test:443; only its DNS lookup was refused (once), so the port is a guess",
			},
			kept: slowKept,
		},
		{
			name: "a few names folded together: the sample is suggested, the rest said",
			events: []audit.Event{{Kind: audit.KindDNS, Name: "a.cdn2.test", Decision: audit.Deny, Rule: "default", Reason: reasonNotAllowed,
				Group: "cdn2.test", Names: []string{"b.cdn2.test"}, Count: 5}},
			want: []string{
				"    - a.cdn2.test  # opens a.cdn2.test:443; only its DNS lookup was refused (4 times), so the port is a guess",
				"    - b.cdn2.test  # opens b.cdn2.test:443; only its DNS lookup was refused (once), so the port is a guess",
			},
			kept: []string{"DNS names under cdn2.test beyond a.cdn2.test, b.cdn2.test: the log folds refusals"},
		},
		{
			name: "paths and methods a rule cannot name",
			events: []audit.Event{
				httpDeny("GET", "/a%0A%20%20%20%20-%20evil.test"), httpDeny("GET", "/a%20b"), httpDeny("GET", "/a/*"),
				httpDeny("GET", "/a//b"), httpDeny("get", "/x"), httpDeny("GET", "/ok"),
			},
			want: []string{`        - {methods: [GET], paths: ["/ok"]}  # GET to /ok`},
			kept: []string{
				"GET git.test:443/a%0A%20%20%20%20-%20evil.test: its path has a part a rule cannot name",
				"GET git.test:443/a%20b: its path has a part a rule cannot name", `GET git.test:443/a/*: its path holds "*"`,
				"GET git.test:443/a//b: its path has a part", "get git.test:443/x: not an HTTP method",
			},
		},
		{
			name:   "no network section yet",
			policy: "version: 1\nfilesystem:\n  readonly: [/opt]\n",
			events: []audit.Event{connect("a.test", 443, reasonNoNetwork)},
			want:   []string{"network:", "  allow:", "    - a.test  # opens TCP to a.test:443 (refused once)"},
		},
		{
			name:   "the built-in default",
			policy: DefaultText,
			events: []audit.Event{connect("a.test", 443, reasonNoNetwork)},
			want:   []string{"network:", "  allow:", "    - a.test  # opens TCP to a.test:443 (refused once)"},
		},
		{
			name:   "block entries: ports to add to a list, a mapping without ports",
			policy: "version: 1\nnetwork:\n  allow:\n    - host: a.test\n      ports:\n        - 8080\n    - host: b.test\n    # trailing note\nlimits: {pids: 10}\n",
			events: []audit.Event{connect("a.test", 9090, "port 9090 not allowed for this host"), connect("b.test", 22, "port 22 not allowed for this host")},
			want: []string{
				"        - 9090  # opens TCP to a.test:9090 (refused once)",
				"      ports: [443, 22]  # opens TCP to b.test:22 (refused once)",
			},
		},
		{
			name:   "a wildcard entry stays, the name gets its own",
			policy: "version: 1\nnetwork:\n  allow: [\"*.example.com\"]\n",
			events: []audit.Event{connect("api.example.com", 8443, "port 8443 not allowed for this host")},
			want: []string{
				`  allow: ["*.example.com", {host: api.example.com, ports: [8443]}]  # {host: api.example.com, ports: [8443]}: opens TCP to api.example.com:8443 (refused once)`,
			},
		},
		{
			name:   "a flow allow list and four-space indentation",
			policy: "version: 1\nnetwork:\n    allow: [x.test]  # mine\n",
			events: []audit.Event{connect("b.test", 443, reasonNotAllowed)},
			want:   []string{"    # b.test: opens TCP to b.test:443 (refused once)", "    allow: [x.test, b.test]  # mine"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.policy
			if src == "" {
				src = basePolicy
			}
			pol, err := policy.Parse("p.yaml", []byte(src), policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			plan := Analyze(tc.events, pol)
			out, err := Edit("p.yaml", []byte(src), plan)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Check("p.yaml", out, policy.Options{}, nil, plan); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			diff := udiff.Unified("a", "b", src, string(out))
			var added []string
			for _, l := range strings.Split(diff, "\n") {
				if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
					added = append(added, l[1:])
				}
			}
			for _, w := range tc.want {
				found := false
				for _, a := range added {
					found = found || a == w
				}
				if !found {
					t.Errorf("the diff does not add %q:\n%s", w, diff)
				}
			}
			if len(added) != len(tc.want) {
				t.Errorf("the diff adds %d lines, want %d:\n%s", len(added), len(tc.want), diff)
			}
			for _, n := range tc.never {
				for _, a := range added {
					if strings.Contains(a, n) {
						t.Errorf("the diff suggests %q: %s", n, a)
					}
				}
			}
			var kept []string
			for _, k := range plan.Kept {
				kept = append(kept, k.What+": "+k.Why)
			}
			for _, w := range tc.kept {
				found := false
				for _, k := range kept {
					found = found || strings.HasPrefix(k, w)
				}
				if !found {
					t.Errorf("not listed as kept: %q\nkept:\n%s", w, strings.Join(kept, "\n"))
				}
			}
			if len(kept) != len(tc.kept) {
				t.Errorf("%d refusals kept, want %d:\n%s", len(kept), len(tc.kept), strings.Join(kept, "\n"))
			}
		})
	}
}

// TestEditCRLF: a file written with CRLF line ends keeps them, on its lines and the added ones.
func TestEditCRLF(t *testing.T) {
	src := strings.ReplaceAll(basePolicy, "\n", "\r\n")
	pol, _ := policy.Parse("p.yaml", []byte(src), policy.Options{})
	plan := Analyze([]audit.Event{connect("n.test", 443, reasonNotAllowed)}, pol)
	out, err := Edit("p.yaml", []byte(src), plan)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), "\n") != strings.Count(string(out), "\r\n") || !strings.Contains(string(out), "- n.test  # opens") {
		t.Errorf("line ends changed:\n%q", out)
	}
	if d := udiff.Unified("a", "b", src, string(out)); strings.Count(d, "\n+") != 2 { // the header and one line
		t.Errorf("the diff changes more than one line:\n%s", d)
	}
}

// TestEditKeepsTheFile: the edit only adds lines; every line of the user's file, comments and blank
// lines included, is still there in order.
func TestEditKeepsTheFile(t *testing.T) {
	pol, _ := policy.Parse("p.yaml", []byte(basePolicy), policy.Options{})
	plan := Analyze([]audit.Event{connect("n.test", 443, reasonNotAllowed), httpDeny("POST", "/acme/x.git/git-upload-pack")}, pol)
	out, err := Edit("p.yaml", []byte(basePolicy), plan)
	if err != nil {
		t.Fatal(err)
	}
	d := udiff.Unified("a", "b", basePolicy, string(out))
	for _, l := range strings.Split(d, "\n") {
		if strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "---") {
			t.Errorf("the edit removed or changed a line: %s\n%s", l, d)
		}
	}
}

// TestLineScanning: the editor finds a flow list's end and a line's comment past quoted text.
func TestLineScanning(t *testing.T) {
	for _, tc := range []struct {
		line    string
		close   int // of the bracket at the first '['
		comment bool
	}{
		{`allow: [a, b]`, 12, false},
		{`allow: ["a]b", 'it''s]']  # x`, 23, true},
		{`allow: ["a\"]"]`, 14, false},
		{`- "a # b"`, -1, false},
		{`- it's here  # mine`, -1, true},
		{`paths: [/a#b]`, 12, false},
		{`allow: [a  # not closed`, -1, true},
	} {
		open := strings.IndexByte(tc.line, '[')
		if open >= 0 {
			if got := closing(tc.line, open); got != tc.close {
				t.Errorf("closing(%q) = %d, want %d", tc.line, got, tc.close)
			}
		}
		if got := hasComment(tc.line); got != tc.comment {
			t.Errorf("hasComment(%q) = %v, want %v", tc.line, got, tc.comment)
		}
	}
}
