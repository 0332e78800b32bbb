package policyimport

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestImport: each fixture (real files of both formats, see testdata/README.md) translates to a
// policy that cordon's own parser loads, with the entries it should have, and every setting that has
// no equivalent named in a note.
func TestImport(t *testing.T) {
	for _, tc := range []struct {
		file string
		conv func(string, []byte) ([]byte, error)
		// check gets the loaded policy.
		check func(t *testing.T, p *policy.Policy)
		// lines must appear in the output; notes in its "Not imported" part.
		lines, notes []string
	}{
		{
			file: "srt-settings.json", conv: SRT,
			check: func(t *testing.T, p *policy.Policy) {
				hosts := hostsOf(p)
				want := "github.com:443 *.github.com:443 lfs.github.com:443 api.github.com:443 npmjs.org:443 *.npmjs.org:443"
				if hosts != want {
					t.Errorf("network.allow %q, want %q", hosts, want)
				}
				if strings.Join(p.Network.Deny, " ") != "malicious.com" {
					t.Errorf("network.deny %v", p.Network.Deny)
				}
				if len(p.Filesystem.Deny) != 0 || len(p.Filesystem.ReadWrite) != 0 {
					t.Errorf("filesystem %+v: srt's paths here are the workspace, /tmp and host paths cordon hides anyway", p.Filesystem)
				}
			},
			lines: []string{`- {host: "github.com", ports: [443]}  # network.allowedDomains "github.com": every port there; cordon lists ports, 443 assumed: add others`},
			notes: []string{
				`network.allowUnixSockets ["/var/run/docker.sock"]`, "network.allowLocalBinding false",
				`filesystem.denyRead "~/.ssh": already unreadable`, `filesystem.allowWrite ".": the workspace is writable`,
				`filesystem.allowWrite "src/": inside the workspace`, `filesystem.allowWrite "/tmp": the sandbox has its own empty /tmp`,
				`filesystem.denyWrite ".env": cordon has no read-only workspace paths`, `filesystem.denyWrite "config/production.json"`,
				"ignoreViolations: cordon records every refusal", "enableWeakerNestedSandbox:", "enableWeakerNetworkIsolation: macOS only",
				"allowAppleEvents: macOS only",
			},
		},
		{
			file: "srt-tls.json", conv: SRT,
			check: func(t *testing.T, p *policy.Policy) {
				if p.Network.TLS.CAFile != "/etc/internal-mtls-roots.pem" {
					t.Errorf("network.tls.caFile %q", p.Network.TLS.CAFile)
				}
			},
			notes: []string{`network.tlsTerminate.excludeDomains ["internal-mtls.example.net"]`},
		},
		{
			file: "claude-code-docs-example.json", conv: ClaudeCode,
			check: func(t *testing.T, p *policy.Policy) {
				if got := hostsOf(p); got != "github.com:443 *.npmjs.org:443 registry.yarnpkg.com:443" {
					t.Errorf("network.allow %q", got)
				}
				if got := strings.Join(p.Filesystem.ReadWrite, " "); !strings.HasSuffix(got, "/.kube") || strings.Contains(got, "/tmp") {
					t.Errorf("filesystem.readwrite %q (want ~/.kube only: /tmp is the sandbox's own)", got)
				}
			},
			notes: []string{
				`sandbox.excludedCommands ["docker"]: about which commands Claude Code runs in its sandbox`,
				`sandbox.filesystem.allowWrite "/tmp/build": the sandbox has its own empty /tmp`,
				`sandbox.filesystem.denyRead "~/.aws/credentials": already unreadable`,
				`sandbox.network.allowUnixSockets ["/var/run/docker.sock"]`, "sandbox.network.allowLocalBinding true",
				"sandbox.autoAllowBashIfSandboxed true",
			},
		},
		{
			file: "claude-code-zenn-editor.json", conv: ClaudeCode,
			check: func(t *testing.T, p *policy.Policy) {
				if p.Network != nil {
					t.Errorf("a network section from a file that allows no domain: %+v", p.Network)
				}
				if p.Env.Set["BASH_DEFAULT_TIMEOUT_MS"] != "300000" || p.Env.Set["BASH_MAX_TIMEOUT_MS"] != "1200000" {
					t.Errorf("env.set %v", p.Env.Set)
				}
			},
			lines: []string{"# no network section: nothing leaves the sandbox (no domain was allowed)"},
			notes: []string{"statusLine: a Claude Code setting, not a sandbox one", "sandbox.autoAllowBashIfSandboxed false", `sandbox.excludedCommands ["docker"]`},
		},
		{
			file: "claude-code-permissions.json", conv: ClaudeCode,
			check: func(t *testing.T, p *policy.Policy) {
				if got := hostsOf(p); got != "github.com:443 api.github.com:443 docs.company.example:443" {
					t.Errorf("network.allow %q", got)
				}
				if got := strings.Join(p.Network.Deny, " "); got != "gist.github.com production-api.company.example" {
					t.Errorf("network.deny %q", got)
				}
				if got := strings.Join(p.Filesystem.Deny, " "); got != ".env secrets" {
					t.Errorf("filesystem.deny %q", got)
				}
				if got := strings.Join(p.Filesystem.ReadWrite, " "); got != "/srv/cache" {
					t.Errorf("filesystem.readwrite %q", got)
				}
			},
			notes: []string{
				`sandbox.network.allowedDomains: "127.0.0.1:3000" is an IP address`,
				`"gist.github.com:443" denies port 443 only`,
				"sandbox.network.strictAllowlist: cordon never asks",
				`permissions.allow "Bash(npm run lint)": a rule for Claude Code's own tools`,
				`permissions.deny "Bash(git push *)"`, `permissions.ask "WebSearch"`,
				`permissions.allow Edit "/docs/**": inside the workspace`,
				`permissions.deny Read "//etc/shadow": already unreadable`,
				`sandbox.filesystem.denyRead "//opt/keys": already unreadable`,
				`sandbox.filesystem.allowRead "~/.gitconfig"`,
				"sandbox.credentials.envVars GITHUB_TOKEN (deny): not passed", "sandbox.credentials.files ~/.npmrc (deny): not visible",
				"sandbox.failIfUnavailable", `permissions.defaultMode "default"`, "sandbox.allowUnsandboxedCommands false",
				"$schema", // never: it is the file's, not a setting
			},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			out, err := tc.conv(tc.file, data)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policy.Parse(tc.file+".yaml", out, policy.Options{Home: "/home/u"})
			if err != nil {
				t.Fatalf("the output does not load: %v\n%s", err, out)
			}
			tc.check(t, p)
			text := string(out)
			for _, l := range tc.lines {
				if !strings.Contains(text, l) {
					t.Errorf("missing %q in\n%s", l, text)
				}
			}
			_, notes, _ := strings.Cut(text, "# Not imported")
			for _, n := range tc.notes {
				if n == "$schema" {
					if strings.Contains(notes, n) {
						t.Errorf("$schema noted as a setting:\n%s", notes)
					}
					continue
				}
				if !strings.Contains(notes, n) {
					t.Errorf("no note %q in\n%s", n, notes)
				}
			}
		})
	}
}

// TestNothingDroppedSilently: every key of every fixture, at every depth the importers read, is
// named somewhere in the output: as a policy line's comment or as a note.
func TestNothingDroppedSilently(t *testing.T) {
	for file, conv := range map[string]func(string, []byte) ([]byte, error){
		"srt-settings.json": SRT, "srt-tls.json": SRT,
		"claude-code-docs-example.json": ClaudeCode, "claude-code-zenn-editor.json": ClaudeCode, "claude-code-permissions.json": ClaudeCode,
	} {
		data, _ := os.ReadFile(filepath.Join("testdata", file))
		out, err := conv(file, data)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := decode(data, file)
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			mm, ok := v.(map[string]any)
			if !ok {
				return
			}
			for k, sub := range mm {
				key := strings.TrimPrefix(prefix+"."+k, ".")
				if key == "$schema" || strings.HasPrefix(key, "permissions.") && (k == "allow" || k == "deny" || k == "ask") || key == "env" {
					continue
				}
				if strings.Contains(string(out), key) {
					continue // named as a whole
				}
				if l, ok := sub.([]any); ok && len(l) == 0 {
					continue // an empty list says nothing to carry over
				}
				if nested, ok := sub.(map[string]any); ok && len(nested) > 0 {
					walk(key, sub)
					continue
				}
				t.Errorf("%s: %s appears nowhere in the output:\n%s", file, key, out)
			}
		}
		walk("", m)
	}
}

func TestMalformed(t *testing.T) {
	for _, in := range []string{"", "[]", "{", `{"network": 1}`, `{} {}`} {
		out, err := SRT("x.json", []byte(in))
		if err != nil {
			continue
		}
		if _, perr := policy.Parse("x.yaml", out, policy.Options{}); perr != nil {
			t.Errorf("%q: output does not load: %v\n%s", in, perr, out)
		}
	}
}

func hostsOf(p *policy.Policy) string {
	if p.Network == nil {
		return ""
	}
	var hs []string
	for _, e := range p.Network.Allow {
		for _, port := range e.Ports {
			hs = append(hs, e.Host+":"+itoa(int(port)))
		}
	}
	return strings.Join(hs, " ")
}

func itoa(n int) string { return strconv.Itoa(n) }
