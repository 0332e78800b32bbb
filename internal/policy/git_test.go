package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseGit(t *testing.T) {
	src := `version: 1
network:
  allow: [github.com, "*.example.com"]
  git:
    - host: GitHub.com
      repos: [acme/app, Acme/Other.git, group/sub/lib]
      push: {branches: ["agent/*", "fix-?"], tags: true, delete: false, options: true}
    - host: git.example.com
      repos: [acme/app]
budgets:
  - host: github.com
    maxRequests: 10
`
	p, err := Parse("p.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := []GitRule{
		{Host: "github.com", Repos: []string{"acme/app", "acme/other", "group/sub/lib"}, Push: GitPush{Branches: []string{"agent/*", "fix-?"}, Tags: true, Options: true}},
		{Host: "git.example.com", Repos: []string{"acme/app"}},
	}
	if !reflect.DeepEqual(p.Network.Git, want) {
		t.Fatalf("git rules\n got %+v\nwant %+v", p.Network.Git, want)
	}
	out, err := p.Render()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("rendered", out, testOpts)
	if err != nil {
		t.Fatalf("rendered policy does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back.Network.Git, want) {
		t.Fatalf("rendered git rules %+v\n%s", back.Network.Git, out)
	}
}

func TestParseGitErrors(t *testing.T) {
	head := "version: 1\nnetwork:\n  allow: [github.com]\n  deny: [evil.example.com]\n  git:\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", "    - {host: github.com, repos: [a/b], pull: true}\n", "6:40: network.git[0].pull: unknown field (expected one of host, repos, push)"},
		{"unknown push key", "    - {host: github.com, repos: [a/b], push: {force: true}}\n", "6:47: network.git[0].push.force: unknown field (expected one of branches, tags, delete, options)"},
		{"no host", "    - {repos: [a/b]}\n", "6:7: network.git[0]: host is required"},
		{"no repos", "    - {host: github.com}\n", "6:7: network.git[0]: repos is required"},
		{"empty repos", "    - {host: github.com, repos: []}\n", "6:33: network.git[0].repos: expected at least one repository"},
		{"a URL as repo", "    - {host: github.com, repos: [\"https://github.com/a/b\"]}\n", `network.git[0].repos[0]: "https://github.com/a/b" is not a repository path`},
		{"one segment", "    - {host: github.com, repos: [app]}\n", `"app" is not a repository path`},
		{"dot segment", "    - {host: github.com, repos: [a/..]}\n", `"a/.." is not a repository path`},
		{"repo twice", "    - {host: github.com, repos: [a/b, A/B.git]}\n", `network.git[0].repos[1]: "a/b" is listed twice`},
		{"wildcard host", "    - {host: \"*.github.com\", repos: [a/b]}\n", "a wildcard is not allowed here"},
		{"host twice", "    - {host: github.com, repos: [a/b]}\n    - {host: github.com, repos: [c/d]}\n", "7:14: network.git[1].host: github.com already has a git rule (at line 6)"},
		{"host never allowed", "    - {host: gitlab.com, repos: [a/b]}\n", "6:14: network.git[0].host: gitlab.com is never allowed by the network policy (add it to network.allow)"},
		{"host denied", "    - {host: evil.example.com, repos: [a/b]}\n", `6:14: network.git[0].host: evil.example.com is refused by network.deny ("evil.example.com")`},
		{"bad glob", "    - {host: github.com, repos: [a/b], push: {branches: [\"agent/[a-\"]}}\n", `network.git[0].push.branches[0]: "agent/[a-" is not a valid glob`},
		{"refs/heads glob", "    - {host: github.com, repos: [a/b], push: {branches: [refs/heads/main]}}\n", "write the branch name without refs/heads/"},
		{"impossible glob", "    - {host: github.com, repos: [a/b], push: {branches: [\"a..*\"]}}\n", `"a..*" can match no valid branch name`},
		{"tags not a bool", "    - {host: github.com, repos: [a/b], push: {tags: yes please}}\n", "network.git[0].push.tags: expected true or false"},
		{"not a list", "    {host: github.com}\n", "network.git: expected a list, got a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(head+tc.body), testOpts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
