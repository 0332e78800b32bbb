package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var testOpts = Options{Home: "/home/a"}

func examplePolicy() *Policy {
	return &Policy{
		Version: 1,
		Filesystem: Filesystem{
			ReadOnly:  []string{"/home/a/.gitconfig", "/opt/tools"},
			ReadWrite: []string{"/home/a/.cache/go-build"},
			Deny:      []string{"**/.env", "*.pem", "secrets/"},
			Secrets:   Secrets{Allow: []string{"testdata/**"}},
			Caches:    []string{"go", "npm"},
			CachesSet: true,
		},
		Env: Env{
			Pass: []string{"GOFLAGS", "ANTHROPIC_BASE_URL"},
			Set:  map[string]string{"EDITOR": "vi", "CI": "1"},
		},
		Limits: Limits{
			Memory: 4 * GiB, Pids: 1024, CPU: 1.5, Timeout: 2 * time.Hour, OpenFiles: 4096, Disk: 10 * GiB,
		},
		Sandbox: Sandbox{Hostname: "cordon"},
		Network: &Network{
			Allow: []Endpoint{
				{Host: "api.anthropic.com", Ports: []uint16{443}},
				{Host: "*.githubusercontent.com", Ports: []uint16{443}},
				{Host: "git.internal.example", Ports: []uint16{22, 443}},
			},
			Deny:    []string{"uploads.github.com"},
			Hosts:   map[string]netip.Addr{"pkg.test": netip.MustParseAddr("127.0.0.1")},
			Presets: []string{"claude", "github", "go"},
			DNS:     DNS{Upstream: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.53:53")}},
			TLS:     TLS{CAFile: "/etc/ssl/certs/corp-root.pem"},
			HTTP: []HTTPRule{{Host: "github.com", Allow: []HTTPAllow{
				{Methods: []string{"GET", "POST"}, Paths: []string{"/acme/app.git/*", "/acme/app/*"}},
			}}},
			Git: []GitRule{{Host: "github.com", Repos: []string{"acme/app"}, Push: GitPush{Branches: []string{"agent/*"}}}},
		},
		Credentials: []Credential{
			{
				Name:   "ANTHROPIC_API_KEY",
				From:   Source{Env: "ANTHROPIC_API_KEY"},
				Inject: Inject{Hosts: []string{"api.anthropic.com"}, Header: "x-api-key"},
			},
			{
				Name:   "NPM_TOKEN",
				From:   Source{File: "/home/a/.config/cordon/npm-token"},
				Inject: Inject{Hosts: []string{"npm.internal.example"}, Scheme: SchemeBearer},
			},
			{
				Name: "GH_TOKEN",
				From: Source{GitHubApp: &GitHubApp{
					AppID: 123, PrivateKeyFile: "/home/a/.config/cordon/app.pem", InstallationID: 456,
					Repositories: []string{"acme/app"},
					Permissions:  map[string]string{"contents": "write", "pull_requests": "write"},
				}},
				Inject: Inject{Hosts: []string{"github.com", "api.github.com"}, Scheme: SchemeBearer},
			},
			{
				Name:   "DEPLOY_TOKEN",
				From:   Source{Command: []string{"pass", "show", "deploy-token"}},
				Inject: Inject{Hosts: []string{"deploy.internal.example"}, Header: "X-Deploy-Token", Body: true},
			},
			{
				Name: "AWS",
				From: Source{AWS: &AWS{Profile: "default", AssumeRole: &AssumeRole{
					RoleARN:       "arn:aws:iam::123456789012:role/agent",
					SessionPolicy: `{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::acme-data/*"}]}`,
					Duration:      30 * time.Minute,
				}}},
				Inject: Inject{Hosts: []string{"*.amazonaws.com"}},
			},
		},
		Source: "testdata/example.yaml",
	}
}

func TestParseExample(t *testing.T) {
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse("testdata/example.yaml", data, testOpts)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	// The hash of the bytes parsed, which a run records (runstate.PolicyRef).
	if sum := sha256.Sum256(data); got.SourceSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("SourceSHA256 = %q, not the SHA-256 of the file", got.SourceSHA256)
	}
	got.SourceSHA256 = ""
	if want := examplePolicy(); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(example.yaml) =\n%+v\nwant\n%+v", got, want)
	}
	kinds := []string{"env", "file", "githubApp", "command", "aws"}
	for i, c := range got.Credentials {
		if c.From.Kind() != kinds[i] {
			t.Errorf("credentials[%d].From.Kind() = %q, want %q", i, c.From.Kind(), kinds[i])
		}
	}
}

func TestParseNormalizes(t *testing.T) {
	const src = `version: 1
filesystem: {readonly: ["~", "/opt//tools/../bin/"]}
sandbox: {hostname: Build-Box}
network:
  allow: [API.Example.COM., {host: "*.Example.org", ports: [8443]}, {host: a.example}]
  dns: {upstream: ["::1", 10.0.0.1]}
  hosts: {Pkg.Test: "::1"}
  http: [{host: "*.EXAMPLE.net", allow: [{methods: [DELETE], paths: [/]}]}]
env:
  set: {N: 1, F: 1.5, B: true, S: ""}
`
	p, err := Parse("p.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/home/a", "/opt/bin"}; !reflect.DeepEqual(p.Filesystem.ReadOnly, want) {
		t.Errorf("readonly = %q, want %q", p.Filesystem.ReadOnly, want)
	}
	if p.Sandbox.Hostname != "Build-Box" {
		t.Errorf("hostname = %q", p.Sandbox.Hostname)
	}
	wantAllow := []Endpoint{
		{Host: "api.example.com", Ports: []uint16{443}},
		{Host: "*.example.org", Ports: []uint16{8443}},
		{Host: "a.example", Ports: []uint16{443}},
	}
	if !reflect.DeepEqual(p.Network.Allow, wantAllow) {
		t.Errorf("allow = %+v, want %+v", p.Network.Allow, wantAllow)
	}
	wantUp := []netip.AddrPort{netip.MustParseAddrPort("[::1]:53"), netip.MustParseAddrPort("10.0.0.1:53")}
	if !reflect.DeepEqual(p.Network.DNS.Upstream, wantUp) {
		t.Errorf("upstream = %v, want %v", p.Network.DNS.Upstream, wantUp)
	}
	if _, ok := p.Network.Hosts["pkg.test"]; !ok {
		t.Errorf("hosts = %v, want key pkg.test", p.Network.Hosts)
	}
	if p.Network.HTTP[0].Host != "*.example.net" {
		t.Errorf("http host = %q", p.Network.HTTP[0].Host)
	}
	if want := map[string]string{"N": "1", "F": "1.5", "B": "true", "S": ""}; !reflect.DeepEqual(p.Env.Set, want) {
		t.Errorf("env.set = %v, want %v", p.Env.Set, want)
	}
}

func TestParseMinimal(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Source = "p.yaml"
	want.SourceSHA256 = "09bfcc6a14b83e2192b8673677725c84883ee9cd0c70e45c9ec09daa8f2b2847" // of "version: 1\n"
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Parse(version: 1) = %+v, want %+v", p, want)
	}
	p, err = Parse("p.yaml", []byte("version: 1\nnetwork: {}\n"), Options{})
	if err != nil || p.Network == nil || len(p.Network.Allow) != 0 {
		t.Errorf("network: {} = %+v, %v; want an empty, non-nil Network", p.Network, err)
	}
}

func TestParseErrors(t *testing.T) {
	cred := func(body string) string {
		return "version: 1\ncredentials:\n  - name: T\n" + body
	}
	tests := []struct {
		name, src, want string
	}{
		// document level
		{"empty", "", "1:1: empty policy (expected a mapping starting with version: 1)"},
		{"comment only", "# nothing\n", "1:1: empty policy (expected a mapping starting with version: 1)"},
		{"syntax", "version: 1\nenv: [\n", "2: invalid YAML: did not find expected node content"},
		{"two documents", "version: 1\n---\nversion: 1\n", "2:1: only one YAML document is allowed"},
		{"anchor", "version: 1\nenv: &e {pass: [A]}\n", "2:6: YAML anchors and aliases are not allowed in a policy"},
		{"alias", "version: 1\nx: &a [1]\ny: *a\n", "2:4: YAML anchors and aliases are not allowed in a policy"},
		{"custom tag", "version: 1\nenv: !secret {}\n", `2:6: YAML tag "!secret" is not allowed in a policy`},
		{"top list", "- version: 1\n", "1:1: expected a mapping at the top level, got a list"},
		{"top scalar", "hello\n", `1:1: expected a mapping at the top level, got "hello"`},
		{"no version", "env: {}\n", `1:1: version is required (add "version: 1" at the top)`},
		{"version 2", "version: 2\nfuture: x\n", "1:10: version: 2 is not supported (this cordon reads version 1)"},
		{"version string", "version: one\n", `1:10: version: expected an integer, got "one"`},
		{"unknown top", "version: 1\nnetwrok: {}\n", "2:1: netwrok: unknown field (expected one of version, filesystem, env, limits, sandbox, network, credentials, budgets, services)"},
		{"duplicate top", "version: 1\nenv: {}\nenv: {}\n", "3:1: env: duplicate key (first at line 2)"},
		{"non-string key", "version: 1\n1: x\n", `2:1: expected a string key, got "1"`},

		// filesystem
		{"fs not mapping", "version: 1\nfilesystem: [a]\n", "2:13: filesystem: expected a mapping, got a list"},
		{"fs unknown", "version: 1\nfilesystem: {ro: []}\n", "2:14: filesystem.ro: unknown field (expected one of readonly, readwrite, deny, caches, secrets)"},
		{"fs relative", "version: 1\nfilesystem:\n  readonly: [tools]\n", `3:14: filesystem.readonly[0]: "tools" is relative (expected an absolute path or one starting with ~/)`},
		{"fs tilde user", "version: 1\nfilesystem:\n  readwrite: [~bob/x]\n", `3:15: filesystem.readwrite[0]: "~bob/x": ~user is not supported (expected an absolute path or one starting with ~/)`},
		{"fs root", "version: 1\nfilesystem:\n  readwrite: [/]\n", `3:15: filesystem.readwrite[0]: "/" would expose the host's whole file system`},
		{"fs empty path", "version: 1\nfilesystem:\n  readonly: [\"\"]\n", `3:14: filesystem.readonly[0]: must not be empty`},
		{"fs not string", "version: 1\nfilesystem:\n  readonly: [1]\n", `3:14: filesystem.readonly[0]: expected a string, got "1"`},
		{"fs null", "version: 1\nfilesystem:\n  readonly:\n", "3:12: filesystem.readonly: expected a list, got nothing (null)"},
		{"fs twice", "version: 1\nfilesystem:\n  readonly: [/a, /a/]\n", `3:18: filesystem.readonly[1]: "/a" is listed twice`},
		{"fs both", "version: 1\nfilesystem:\n  readonly: [/a]\n  readwrite: [/b, /a]\n", `4:19: filesystem.readwrite[1]: "/a" is also listed in readonly`},
		{"deny absolute", "version: 1\nfilesystem:\n  deny: [/etc]\n", `3:10: filesystem.deny[0]: "/etc" must be relative to the workspace`},
		{"deny dotdot", "version: 1\nfilesystem:\n  deny: [a/../../x]\n", `3:10: filesystem.deny[0]: "a/../../x" must not contain .. (it would reach outside the workspace)`},
		{"deny bad glob", "version: 1\nfilesystem:\n  deny: [\"[a\"]\n", `3:10: filesystem.deny[0]: "[a" is not a valid glob: syntax error in pattern`},
		{"deny negation", "version: 1\nfilesystem:\n  deny: [\"!x\"]\n", `3:10: filesystem.deny[0]: "!x": negation is not supported`},

		// env
		{"env bad pass", "version: 1\nenv:\n  pass: [GO-FLAGS]\n", `3:10: env.pass[0]: "GO-FLAGS" is not a valid variable name (expected letters, digits and _, not starting with a digit)`},
		{"env digit", "version: 1\nenv:\n  set: {1X: a}\n", `3:9: env.set.1X: "1X" is not a valid variable name (expected letters, digits and _, not starting with a digit)`},
		{"env set list", "version: 1\nenv:\n  set: {A: [x]}\n", "3:12: env.set.A: expected a string, got a list"},
		{"env set null", "version: 1\nenv:\n  set: {A: }\n", "3:12: env.set.A: expected a string, got nothing (null)"},
		{"env set dup", "version: 1\nenv:\n  set: {A: x, A: y}\n", "3:15: env.set.A: duplicate key (first at line 3)"},
		{"env pass twice", "version: 1\nenv:\n  pass: [A, A]\n", `3:13: env.pass[1]: "A" is listed twice`},

		// limits
		{"memory words", "version: 1\nlimits:\n  memory: 2 gigs\n", `3:11: limits.memory: "2 gigs" is not a size (expected e.g. 512MiB, 2GiB, 1000000)`},
		{"memory negative", "version: 1\nlimits:\n  memory: -1\n", `3:11: limits.memory: "-1" is not a size (expected e.g. 512MiB, 2GiB, 1000000)`},
		{"memory float", "version: 1\nlimits:\n  memory: 1.5\n", `3:11: limits.memory: "1.5" is not a size (expected e.g. 512MiB, 2GiB, 1000000)`},
		{"memory zero", "version: 1\nlimits:\n  memory: 0\n", "3:11: limits.memory: must be positive (leave it out for no limit)"},
		{"memory overflow", "version: 1\nlimits:\n  memory: 9000000TiB\n", `3:11: limits.memory: "9000000TiB" is not a size (expected e.g. 512MiB, 2GiB, 1000000)`},
		{"disk unit", "version: 1\nlimits:\n  disk: 10gb\n", `3:9: limits.disk: "10gb" is not a size (expected e.g. 512MiB, 2GiB, 1000000)`},
		{"pids zero", "version: 1\nlimits:\n  pids: 0\n", "3:9: limits.pids: 0 is out of range (expected at least 1)"},
		{"pids string", "version: 1\nlimits:\n  pids: many\n", `3:9: limits.pids: expected an integer, got "many"`},
		{"cpu zero", "version: 1\nlimits:\n  cpu: 0\n", `3:8: limits.cpu: "0" is not a number of CPUs (expected a positive number such as 1 or 1.5)`},
		{"cpu inf", "version: 1\nlimits:\n  cpu: .inf\n", `3:8: limits.cpu: ".inf" is not a number of CPUs (expected a positive number such as 1 or 1.5)`},
		{"cpu string", "version: 1\nlimits:\n  cpu: \"2\"\n", `3:8: limits.cpu: "2" is not a number of CPUs (expected a positive number such as 1 or 1.5)`},
		{"timeout int", "version: 1\nlimits:\n  timeout: 3600\n", `3:12: limits.timeout: expected a string, got "3600"`},
		{"timeout bad", "version: 1\nlimits:\n  timeout: 2 hours\n", `3:12: limits.timeout: "2 hours" is not a duration (expected a positive duration such as 30m, 2h or 1h30m)`},
		{"timeout negative", "version: 1\nlimits:\n  timeout: -5m\n", `3:12: limits.timeout: "-5m" is not a duration (expected a positive duration such as 30m, 2h or 1h30m)`},
		{"openFiles", "version: 1\nlimits:\n  openFiles: -1\n", "3:14: limits.openFiles: -1 is out of range (expected at least 1)"},
		{"limits unknown", "version: 1\nlimits:\n  mem: 1G\n", "3:3: limits.mem: unknown field (expected one of memory, pids, cpu, timeout, openFiles, disk)"},

		// sandbox
		{"nesting string", "version: 1\nsandbox:\n  allowNesting: \"yes\"\n", `3:17: sandbox.allowNesting: expected true or false, got "yes"`},
		{"hostname bad", "version: 1\nsandbox:\n  hostname: my_box\n", `3:13: sandbox.hostname: "my_box" is not a valid host name (expected letters, digits, - and dots, at most 64 characters)`},
		{"kubernetes namespace", "version: 1\nsandbox:\n  kubernetes:\n    namespace: Agents\n", `4:16: sandbox.kubernetes.namespace: "Agents" is not a namespace name (lower-case letters, digits and -, at most 63)`},
		{"kubernetes image", "version: 1\nsandbox:\n  kubernetes:\n    image: \"a b\"\n", `4:12: sandbox.kubernetes.image: "a b" is not an image reference`},
		{"kubernetes unknown", "version: 1\nsandbox:\n  kubernetes:\n    pod: x\n", `4:5: sandbox.kubernetes.pod: unknown field (expected one of context, cordonImage, image, lease, namespace, runtimeClass)`},
		{"kubernetes lease too short", "version: 1\nsandbox:\n  kubernetes:\n    lease: 2s\n", `4:12: sandbox.kubernetes.lease: "2s" is not a lease (expected a duration of at least 5s, such as 30s or 2m)`},
		{"kubernetes lease not a duration", "version: 1\nsandbox:\n  kubernetes:\n    lease: soon\n", `4:12: sandbox.kubernetes.lease: "soon" is not a lease (expected a duration of at least 5s, such as 30s or 2m)`},
		{"isolation unknown", "version: 1\nsandbox:\n  isolation: kvm\n", `3:14: sandbox.isolation: "kvm" is not an isolation tier (expected native or gvisor)`},
		{"runsc relative", "version: 1\nsandbox:\n  runsc: bin/runsc\n", `3:10: sandbox.runsc: "bin/runsc" is relative (expected an absolute path or one starting with ~/)`},

		// network
		{"net null", "version: 1\nnetwork:\n", "2:9: network: expected a mapping, got nothing (null)"},
		{"allow url", "version: 1\nnetwork:\n  allow: [\"https://x.com\"]\n", `3:11: network.allow[0]: "https://x.com" must be a host name, not a URL (no scheme)`},
		{"allow path", "version: 1\nnetwork:\n  allow: [x.com/a]\n", `3:11: network.allow[0]: "x.com/a" must be a host name (no path)`},
		{"allow port", "version: 1\nnetwork:\n  allow: [\"x.com:22\"]\n", `3:11: network.allow[0]: "x.com:22" must be a host name (no port; list ports separately)`},
		{"allow ip", "version: 1\nnetwork:\n  allow: [10.0.0.1]\n", `3:11: network.allow[0]: "10.0.0.1" is an IP address, not a host name`},
		{"allow ipv6", "version: 1\nnetwork:\n  allow: [\"[::1]\"]\n", `3:11: network.allow[0]: "[::1]" is an IP address, not a host name`},
		{"allow mid wildcard", "version: 1\nnetwork:\n  allow: [\"a.*.com\"]\n", `3:11: network.allow[0]: "a.*.com": a wildcard is only allowed as a leading "*."`},
		{"allow bare star", "version: 1\nnetwork:\n  allow: [\"*\"]\n", `3:11: network.allow[0]: "*": a wildcard is only allowed as a leading "*."`},
		{"allow broad wildcard", "version: 1\nnetwork:\n  allow: [\"*.com\"]\n", `3:11: network.allow[0]: wildcard "*.com" is too broad (expected at least two labels after "*.")`},
		{"allow label", "version: 1\nnetwork:\n  allow: [-x.com]\n", `3:11: network.allow[0]: "-x.com" is not a valid host name (expected letters, digits, - and dots)`},
		{"allow numeric tld", "version: 1\nnetwork:\n  allow: [1.2.3]\n", `3:11: network.allow[0]: "1.2.3" is not a valid host name (numeric top-level label)`},
		{"allow empty label", "version: 1\nnetwork:\n  allow: [a..b]\n", `3:11: network.allow[0]: "a..b" is not a valid host name (expected letters, digits, - and dots)`},
		{"allow twice", "version: 1\nnetwork:\n  allow: [a.com, A.com]\n", `3:18: network.allow[1]: "a.com" is listed twice`},
		{"allow port 0", "version: 1\nnetwork:\n  allow: [{host: a.com, ports: [0]}]\n", "3:33: network.allow[0].ports[0]: 0 is out of range (expected 1 to 65535)"},
		{"allow port big", "version: 1\nnetwork:\n  allow: [{host: a.com, ports: [65536]}]\n", "3:33: network.allow[0].ports[0]: 65536 is out of range (expected 1 to 65535)"},
		{"allow ports empty", "version: 1\nnetwork:\n  allow: [{host: a.com, ports: []}]\n", "3:32: network.allow[0].ports: expected at least one port"},
		{"allow port dup", "version: 1\nnetwork:\n  allow: [{host: a.com, ports: [22, 22]}]\n", "3:37: network.allow[0].ports[1]: port 22 is listed twice"},
		{"allow no host", "version: 1\nnetwork:\n  allow: [{ports: [22]}]\n", "3:11: network.allow[0]: host is required"},
		{"allow unknown", "version: 1\nnetwork:\n  allow: [{host: a.com, port: 22}]\n", "3:25: network.allow[0].port: unknown field (expected one of host, ports)"},
		{"deny bad", "version: 1\nnetwork:\n  deny: [\"a b\"]\n", `3:10: network.deny[0]: "a b" is not a valid host name (expected letters, digits, - and dots)`},
		{"hosts bad ip", "version: 1\nnetwork:\n  hosts: {a.test: 300.1.1.1}\n", `3:19: network.hosts.a.test: "300.1.1.1" is not an IP address`},
		{"hosts wildcard", "version: 1\nnetwork:\n  hosts: {\"*.a.test\": 1.1.1.1}\n", `3:11: network.hosts.*.a.test: "*.a.test": a wildcard is not allowed here (expected an exact host name)`},
		{"hosts dup", "version: 1\nnetwork:\n  hosts: {a.test: 1.1.1.1, A.test: 1.1.1.2}\n", `3:28: network.hosts.A.test: "a.test" is listed twice`},
		{"preset unknown", "version: 1\nnetwork:\n  presets: [gradle]\n", `3:13: network.presets[0]: unknown preset "gradle" (expected one of claude, github, npm, go, pypi, cargo, maven, apt)`},
		{"dns bad", "version: 1\nnetwork:\n  dns: {upstream: [dns.google]}\n", `3:20: network.dns.upstream[0]: "dns.google" is not a resolver address (expected an IP with an optional port, e.g. 127.0.0.53:53)`},
		{"dns port 0", "version: 1\nnetwork:\n  dns: {upstream: [\"1.1.1.1:0\"]}\n", `3:20: network.dns.upstream[0]: "1.1.1.1:0" is not a resolver address (expected an IP with an optional port, e.g. 127.0.0.53:53)`},
		{"tls relative", "version: 1\nnetwork:\n  tls: {caFile: ca.pem}\n", `3:17: network.tls.caFile: "ca.pem" is relative (expected an absolute path or one starting with ~/)`},
		{"http method", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [get], paths: [/]}]}]\n", `3:43: network.http[0].allow[0].methods[0]: "get" is not an HTTP method (expected an upper-case token such as GET or POST)`},
		{"http path", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [a]}]}]\n", `3:57: network.http[0].allow[0].paths[0]: "a" must start with /`},
		{"http query", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [\"/a?b\"]}]}]\n", `3:57: network.http[0].allow[0].paths[0]: "/a?b" must be a path only (no query or fragment)`},
		{"http dotdot", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET], paths: [/a/../b]}]}]\n", `3:57: network.http[0].allow[0].paths[0]: "/a/../b" must not contain . or .. segments`},
		{"http no paths", "version: 1\nnetwork:\n  http: [{host: a.com, allow: [{methods: [GET]}]}]\n", "3:32: network.http[0].allow[0]: paths is required"},
		{"http no allow", "version: 1\nnetwork:\n  http: [{host: a.com}]\n", "3:10: network.http[0]: allow is required"},
		{"http empty allow", "version: 1\nnetwork:\n  http: [{host: a.com, allow: []}]\n", "3:31: network.http[0].allow: expected at least one rule"},
		{"http dup host", "version: 1\nnetwork:\n  http:\n    - {host: a.com, allow: [{methods: [GET], paths: [/]}]}\n    - {host: a.com, allow: [{methods: [GET], paths: [/]}]}\n", `5:7: network.http[1]: "a.com" has more than one rule`},

		// credentials
		{"cred not list", "version: 1\ncredentials: {}\n", "2:14: credentials: expected a list, got a mapping"},
		{"cred no name", "version: 1\ncredentials:\n  - from: {env: A}\n    inject: {host: a.com, header: X}\n", "3:5: credentials[0]: name is required"},
		{"cred bad name", "version: 1\ncredentials:\n  - name: my-token\n", `3:11: credentials[0].name: "my-token" is not a valid variable name (expected letters, digits and _, not starting with a digit)`},
		{"cred no from", cred("    inject: {host: a.com, header: X}\n"), "3:5: credentials[0]: from is required"},
		{"cred no inject", cred("    from: {env: A}\n"), "3:5: credentials[0]: inject is required"},
		{"cred no source", cred("    from: {}\n"), "4:11: credentials[0].from: set exactly one of env, file, command, githubApp, aws, sshAgent"},
		{"cred two sources", cred("    from: {env: A, file: /a}\n"), "4:11: credentials[0].from: set exactly one of env, file, command, githubApp, aws, sshAgent (found env and file)"},
		{"cred unknown source", cred("    from: {vault: x}\n"), "4:12: credentials[0].from.vault: unknown field (expected one of env, file, command, githubApp, aws, sshAgent)"},
		{"cred env name", cred("    from: {env: \"A B\"}\n"), `4:17: credentials[0].from.env: "A B" is not a valid variable name (expected letters, digits and _, not starting with a digit)`},
		{"cred file relative", cred("    from: {file: token}\n"), `4:18: credentials[0].from.file: "token" is relative (expected an absolute path or one starting with ~/)`},
		{"cred command string", cred("    from: {command: gh auth token}\n"), `4:21: credentials[0].from.command: expected a list, got "gh auth token"`},
		{"cred command empty", cred("    from: {command: []}\n"), "4:21: credentials[0].from.command: expected a program and its arguments, e.g. [gh, auth, token]"},
		{"gh missing perms", cred("    from: {githubApp: {appId: 1, privateKeyFile: /k, installationId: 2, repositories: [a/b]}}\n"), "4:23: credentials[0].from.githubApp: permissions is required"},
		{"gh bad repo", cred("    from: {githubApp: {appId: 1, privateKeyFile: /k, repositories: [app]}}\n"), `4:69: credentials[0].from.githubApp.repositories[0]: "app" is not a repository (expected owner/name)`},
		{"gh no repos", cred("    from: {githubApp: {appId: 1, repositories: []}}\n"), "4:48: credentials[0].from.githubApp.repositories: expected at least one repository (owner/name)"},
		{"gh bad level", cred("    from: {githubApp: {appId: 1, permissions: {contents: all}}}\n"), `4:58: credentials[0].from.githubApp.permissions.contents: "all" is not an access level (expected read, write or admin)`},
		{"gh bad perm", cred("    from: {githubApp: {appId: 1, permissions: {Contents: read}}}\n"), `4:48: credentials[0].from.githubApp.permissions.Contents: "Contents" is not a GitHub permission name (expected e.g. contents, pull_requests)`},
		{"gh no perms", cred("    from: {githubApp: {appId: 1, permissions: {}}}\n"), "4:47: credentials[0].from.githubApp.permissions: expected at least one permission, e.g. {contents: read}"},
		{"gh app id", cred("    from: {githubApp: {appId: 0}}\n"), "4:31: credentials[0].from.githubApp.appId: 0 is out of range (expected at least 1)"},
		{"gh api url", cred("    from: {githubApp: {apiURL: \"http://github.example\"}}\n"), `4:32: credentials[0].from.githubApp.apiURL: "http://github.example" is not an API URL (expected https://host[/path])`},
		{"inject no host", cred("    from: {env: A}\n    inject: {header: X}\n"), "5:13: credentials[0].inject: host is required"},
		{"inject wildcard too broad", cred("    from: {env: A}\n    inject: {host: \"*.com\", header: X}\n"), `5:20: credentials[0].inject.host: wildcard "*.com" is too broad (expected at least two labels after "*.")`},
		{"gh missing installation", cred("    from: {githubApp: {appId: 1, privateKeyFile: /k, repositories: [a/b], permissions: {contents: read}}}\n"), "4:23: credentials[0].from.githubApp: installationId is required"},
		{"ssh agent inject", cred("    from: {sshAgent: {keys: [deploy]}}\n    inject: {host: a.test, header: X}\n"), "5:13: credentials[0].inject: an sshAgent credential has no inject: ssh inside uses its socket"},
		{"ssh agent no keys", cred("    from: {sshAgent: {keys: []}}\n"), "4:29: credentials[0].from.sshAgent.keys: expected at least one key (a SHA256:… fingerprint or a comment, as ssh-add -l shows them)"},
		{"ssh agent keys missing", cred("    from: {sshAgent: {}}\n"), "4:22: credentials[0].from.sshAgent: keys is required"},
		{"ssh agent bad fingerprint", cred("    from: {sshAgent: {keys: [\"SHA256:short\"]}}\n"), `4:30: credentials[0].from.sshAgent.keys[0]: "SHA256:short" is not a SHA256 fingerprint (43 base64 characters after SHA256:, as ssh-add -l prints)`},
		{"aws neither", cred("    from: {aws: {}}\n"), "4:17: credentials[0].from.aws: set exactly one of profile (the AWS shared credentials file) or env: true"},
		{"aws both", cred("    from: {aws: {profile: p, env: true}}\n"), "4:17: credentials[0].from.aws: set exactly one of profile (the AWS shared credentials file) or env: true"},
		{"aws env false", cred("    from: {aws: {env: false}}\n"), "4:23: credentials[0].from.aws.env: env: false takes nothing from anywhere (set env: true or a profile)"},
		{"aws role no arn", cred("    from: {aws: {env: true, assumeRole: {duration: 1h}}}\n"), "4:41: credentials[0].from.aws.assumeRole: roleArn is required"},
		{"aws role bad arn", cred("    from: {aws: {env: true, assumeRole: {roleArn: arn:aws:iam::12:role/x}}}\n"), `4:51: credentials[0].from.aws.assumeRole.roleArn: "arn:aws:iam::12:role/x" is not a role ARN (expected arn:aws:iam::ACCOUNT:role/NAME)`},
		{"aws role user arn", cred("    from: {aws: {env: true, assumeRole: {roleArn: \"arn:aws:iam::123456789012:user/x\"}}}\n"), `4:51: credentials[0].from.aws.assumeRole.roleArn: "arn:aws:iam::123456789012:user/x" is not a role ARN (expected arn:aws:iam::ACCOUNT:role/NAME)`},
		{"aws role duration", cred("    from: {aws: {env: true, assumeRole: {roleArn: \"arn:aws:iam::123456789012:role/x\", duration: 5m}}}\n"), `4:97: credentials[0].from.aws.assumeRole.duration: "5m" is not a session duration (expected 15m to 12h, such as 1h)`},
		{"aws role policy", cred("    from: {aws: {env: true, assumeRole: {roleArn: \"arn:aws:iam::123456789012:role/x\", sessionPolicy: \"s3:*\"}}}\n"), `4:102: credentials[0].from.aws.assumeRole.sessionPolicy: not a JSON policy document (expected {"Version": ..., "Statement": [...]})`},
		{"aws role endpoint", cred("    from: {aws: {env: true, assumeRole: {roleArn: \"arn:aws:iam::123456789012:role/x\", endpoint: \"http://sts.example.com\"}}}\n"), `4:97: credentials[0].from.aws.assumeRole.endpoint: "http://sts.example.com" is not an API URL (expected https://host[/path])`},
		{"aws role region", cred("    from: {aws: {env: true, assumeRole: {roleArn: \"arn:aws:iam::123456789012:role/x\", region: EU}}}\n"), `4:95: credentials[0].from.aws.assumeRole.region: "EU" is not an AWS region (such as eu-west-3)`},
		{"aws with header", cred("    from: {aws: {env: true}}\n    inject: {host: \"*.amazonaws.com\", header: X}\n"), "5:13: credentials[0].inject: an aws credential signs requests: it takes only host (no header, scheme or body)"},
		{"secrets bad glob", "version: 1\nfilesystem: {secrets: {allow: [\"a/[\"]}}\n", `2:32: filesystem.secrets.allow[0]: "a/[" is not a valid glob: syntax error in pattern`},
		{"unknown cache", "version: 1\nfilesystem: {caches: [go, gradle]}\n", `2:27: filesystem.caches[1]: unknown cache "gradle" (expected one of go, npm, pip, cargo, maven)`},
		{"secrets scan not bool", "version: 1\nfilesystem: {secrets: {scan: maybe}}\n", `2:30: filesystem.secrets.scan: expected true or false, got "maybe"`},
		{"inject host list", cred("    from: {env: A}\n    inject: {host: [a.com, \"b.com:443\"], header: X}\n"), `5:28: credentials[0].inject.host[1]: "b.com:443" must be a host name (no port; list ports separately)`},
		{"inject empty hosts", cred("    from: {env: A}\n    inject: {host: [], header: X}\n"), "5:20: credentials[0].inject.host: expected at least one host"},
		{"inject header and scheme", cred("    from: {env: A}\n    inject: {host: a.com, header: X, scheme: bearer}\n"), "5:13: credentials[0].inject: set header or scheme, not both (scheme uses the Authorization header)"},
		{"inject nowhere", cred("    from: {env: A}\n    inject: {host: a.com}\n"), "5:13: credentials[0].inject: say where to inject: header, scheme or body: true"},
		{"inject scheme", cred("    from: {env: A}\n    inject: {host: a.com, scheme: token}\n"), `5:35: credentials[0].inject.scheme: "token" is not a scheme (expected bearer or basic)`},
		{"inject header", cred("    from: {env: A}\n    inject: {host: a.com, header: \"X Key\"}\n"), `5:35: credentials[0].inject.header: "X Key" is not a valid HTTP header name`},
		{"cred without network", "version: 1\ncredentials:\n  - {name: T, from: {env: T}, inject: {host: a.com, body: true}}\n", "3:3: credentials: credentials need a network section that allows their hosts (a credential is only used on requests to them)"},
		{"cred dup", "version: 1\ncredentials:\n  - {name: T, from: {env: A}, inject: {host: a.com, body: true}}\n  - {name: T, from: {env: B}, inject: {host: b.com, body: true}}\n", "4:12: credentials[1].name: credential T is already defined at line 3"},
		{"cred in env.pass", "version: 1\ncredentials:\n  - {name: T, from: {env: T}, inject: {host: a.com, body: true}}\nenv: {pass: [T]}\n", "3:12: credentials[0].name: T is also named in env.pass (a credential's value never enters the sandbox's environment)"},
		{"cred in env.set", "version: 1\nenv: {set: {T: x}}\ncredentials:\n  - {name: T, from: {env: T}, inject: {host: a.com, body: true}}\n", "4:12: credentials[0].name: T is also named in env.set (a credential's value never enters the sandbox's environment)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.src), testOpts)
			if err == nil {
				t.Fatalf("Parse succeeded, want error %q", tt.want)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is %T, want *Error", err, err)
			}
			if got := strings.TrimPrefix(err.Error(), "p.yaml:"); got != tt.want {
				t.Errorf("error\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestParseTildeWithoutHome(t *testing.T) {
	_, err := Parse("p.yaml", []byte("version: 1\nfilesystem: {readonly: [~/x]}\n"), Options{})
	want := `p.yaml:2:25: filesystem.readonly[0]: cannot expand "~/x": the caller's home directory is unknown`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestParseTooLarge(t *testing.T) {
	data := []byte("version: 1\n" + strings.Repeat("#", MaxFileSize))
	_, err := Parse("p.yaml", data, Options{})
	if want := "p.yaml: policy is larger than 1048576 bytes"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.yaml")
	if err := os.WriteFile(target, []byte("version: 1\nlimits: {pids: 10}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink("target.yaml", link); err != nil {
		t.Fatal(err)
	}
	p, err := Load(link, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != target || p.Limits.Pids != 10 {
		t.Errorf("Load(link) = Source %q, pids %d; want %q, 10", p.Source, p.Limits.Pids, target)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad, Options{}); err == nil || !strings.HasPrefix(err.Error(), bad+":2:1: bogus: unknown field") {
		t.Errorf("Load(bad) = %v, want a positioned error naming %s", err, bad)
	}
	if _, err := Load(dir, Options{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Load(dir) = %v, want not a regular file", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big, Options{}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, want a size error", err)
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		err  Error
		want string
	}{
		{Error{File: "f", Line: 3, Column: 4, Msg: "m"}, "f:3:4: m"},
		{Error{File: "f", Line: 3, Msg: "m"}, "f:3: m"},
		{Error{File: "f", Msg: "m"}, "f: m"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
