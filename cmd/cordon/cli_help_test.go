//go:build linux

package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// goFlagListing matches a line of the flag package's own listing ("  -policy file"): a flag of more
// than one letter written with one dash.
var goFlagListing = regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+\b`)

// TestHelp: "cordon help COMMAND" and "cordon COMMAND --help" print the same usage, summary and
// flags, in --flag form, on stdout with status 0; an unknown command is one line and status 2.
func TestHelp(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		for _, c := range commands() {
			t.Run(c.name, func(t *testing.T) {
				viaHelp := h.cordon(nil, "", "help", c.name)
				viaFlag := h.cordon(nil, "", c.name, "--help")
				if viaHelp.code != 0 || viaFlag.code != 0 || viaHelp.stderr != "" {
					t.Fatalf("help %s:\n%s\n%s --help:\n%s", c.name, viaHelp, c.name, viaFlag)
				}
				if viaHelp.stdout != viaFlag.stdout {
					t.Fatalf("help %s and %s --help differ:\n%s\n---\n%s", c.name, c.name, viaHelp.stdout, viaFlag.stdout)
				}
				if !strings.HasPrefix(viaHelp.stdout, "Usage: cordon "+c.name) {
					t.Fatalf("help %s does not start with its usage:\n%s", c.name, viaHelp.stdout)
				}
				if m := goFlagListing.FindString(viaHelp.stdout); m != "" {
					t.Fatalf("help %s lists a flag in Go's -flag form (%q):\n%s", c.name, m, viaHelp.stdout)
				}
			})
		}
		r := h.cordon(nil, "", "help", "run")
		for _, want := range []string{"\n  --policy ", "\n  -e, --env KEY[=VALUE]", "\n  --allow HOST[:PORT]", "\n  --isolation TIER", "\n  --keep-services ", "\nFlags:\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("help run does not show %q:\n%s", want, r.stdout)
			}
		}
		if r := h.cordon(nil, "", "help", "policy"); !strings.Contains(r.stdout, "--workspace DIR") {
			t.Errorf("help policy does not show --workspace:\n%s", r)
		}
		if r := h.cordon(nil, "", "help"); r.code != 0 || !strings.Contains(r.stdout, "Commands:") {
			t.Errorf("help:\n%s", r)
		}
		for _, args := range [][]string{{"help", "frobnicate"}, {"frobnicate", "--help"}} {
			r := h.cordon(nil, "", args...)
			if r.code != exitUsage || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
				t.Errorf("%v: want one line and exit %d:\n%s", args, exitUsage, r)
			}
		}
	})
}

// TestUsageErrors: a usage mistake is one line in --flag form; run exits 125 for it (its other
// statuses are the command's), the other commands 2.
func TestUsageErrors(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		tests := []struct {
			args []string
			code int
			want string
		}{
			{[]string{"run", "--bogus", "--", "true"}, exitCordon, "run: unknown flag --bogus (see cordon run --help)"},
			{[]string{"run", "--policy"}, exitCordon, "run: flag needs an argument: --policy"},
			{[]string{"run", "--policy", h.policy("")}, exitCordon, "run: no command given"},
			{[]string{"diff", "--bogus", "x"}, exitUsage, "diff: unknown flag --bogus (see cordon diff --help)"},
			{[]string{"log", "--json=maybe", "x"}, exitUsage, `log: invalid value "maybe" for --json: parse error`},
			{[]string{"version", "extra"}, exitUsage, "version: takes no arguments"},
		}
		for _, tc := range tests {
			r := h.cordon(nil, "", tc.args...)
			if r.code != tc.code || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%v: want exit %d and one line with %q:\n%s", tc.args, tc.code, tc.want, r)
			}
		}
	})
}

func TestFlagError(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"flag provided but not defined: -bogus", "unknown flag --bogus"},
		{"flag provided but not defined: -x", "unknown flag -x"},
		{"flag needs an argument: -policy", "flag needs an argument: --policy"},
		{`invalid value "a -b: c" for flag -older-than: bad duration`, `invalid value "a -b: c" for --older-than: bad duration`},
		{`invalid boolean value "maybe" for -json: parse error`, `invalid value "maybe" for --json: parse error`},
		{"bad flag syntax: ---x", "bad flag syntax: ---x"},
	} {
		if got := flagError(errors.New(tc.in)); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestVersion: cordon version and --version print the build's version, the same way.
func TestVersion(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		a, b := h.cordon(nil, "", "version"), h.cordon(nil, "", "--version")
		if a.code != 0 || a.stdout != b.stdout || !regexp.MustCompile(`^cordon \S+ \(.*built with go`).MatchString(a.stdout) {
			t.Fatalf("version:\n%s\n--version:\n%s", a, b)
		}
	})
}

func TestVersionLine(t *testing.T) {
	setting := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "cordon (unknown version: built without module information)"},
		{"release", &debug.BuildInfo{GoVersion: "go1.24.1", Main: debug.Module{Version: "v1.2.3"},
			Settings: setting("vcs.revision", "0123456789abcdef0123", "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "false")},
			"cordon v1.2.3 (revision 0123456789ab of 2026-11-30T10:00:00Z; built with go1.24.1)"},
		{"work tree, modified", &debug.BuildInfo{GoVersion: "go1.24.1", Main: debug.Module{Version: "(devel)"},
			Settings: setting("vcs.revision", "abc", "vcs.modified", "true")},
			"cordon devel (revision abc, modified; built with go1.24.1)"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.24.1", Main: debug.Module{Version: "(devel)"}},
			"cordon devel (built with go1.24.1)"},
		{"nothing known", &debug.BuildInfo{}, "cordon devel"},
	}
	for _, tc := range tests {
		if got := versionLine(tc.info); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPolicyCheckRefusesWhatRunRefuses: policy check applies run's rule (the policy outside the
// workspace and every writable mount) with run's message, for the current directory's workspace or
// --workspace, and says that run refuses the file too.
func TestPolicyCheckRefusesWhatRunRefuses(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		inside := filepath.Join(h.ws, "policy.yaml")
		h.writeFile(inside, "version: 1\n", 0o644)
		link := filepath.Join(h.base, "link.yaml")
		if err := os.Symlink(inside, link); err != nil {
			t.Fatal(err)
		}
		mounted := filepath.Join(h.base, "data")
		h.writeFile(filepath.Join(mounted, "policy.yaml"), "version: 1\nfilesystem:\n  readwrite: ["+mounted+"]\n", 0o644)
		for _, p := range []string{inside, link, filepath.Join(mounted, "policy.yaml")} {
			run := h.cordon(nil, "", "run", "--policy", p, "--", "true")
			check := h.cordon(nil, "", "policy", "check", p)
			msg := strings.TrimSpace(run.stderr)
			if run.code != exitCordon || !strings.Contains(msg, "which the sandbox can write") {
				t.Fatalf("run accepted %s:\n%s", p, run)
			}
			if check.code == 0 || !strings.HasPrefix(check.stderr, msg) || !strings.Contains(check.stderr, "cordon run") || check.stdout != "" {
				t.Fatalf("policy check %s: want run's refusal %q and that run refuses it, got\n%s", p, msg, check)
			}
		}
		// --workspace names the project as run's does: a policy in another project is checked against it.
		other := filepath.Join(h.base, "other")
		theirs := filepath.Join(other, "policy.yaml")
		h.writeFile(theirs, "version: 1\n", 0o644)
		if r := h.cordon(nil, "", "policy", "check", theirs); r.code != 0 {
			t.Fatalf("policy check from another project refused %s:\n%s", theirs, r)
		}
		if r := h.cordon(nil, "", "policy", "check", "--workspace", other, theirs); r.code == 0 || !strings.Contains(r.stderr, "is inside "+other) {
			t.Fatalf("policy check --workspace %s accepted %s:\n%s", other, theirs, r)
		}
		outside := h.policy("")
		// Control: outside the workspace it passes, and says for which workspace it was checked.
		if r := h.cordon(nil, "", "policy", "check", outside); r.code != 0 || !strings.Contains(r.stdout, "checked for the workspace "+h.ws) {
			t.Fatalf("policy check of a policy outside the workspace:\n%s", r)
		}
	})
}

// TestPolicyCheckOutput: the header is printed once, presets are shown expanded, and the output is
// itself a policy that checks.
func TestPolicyCheckOutput(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		r := h.cordon(nil, "", "policy", "check", h.policy("network:\n  presets: [github]\n  allow: [api.example.com]\n"))
		if r.code != 0 {
			t.Fatalf("policy check:\n%s", r)
		}
		if n := strings.Count(strings.ToLower(r.stdout), "effective policy"); n != 1 {
			t.Errorf("the header is printed %d times:\n%s", n, r.stdout)
		}
		if !regexp.MustCompile(`(?m)^# preset github allows: github\.com, api\.github\.com, .*github\.com:22$`).MatchString(r.stdout) {
			t.Errorf("the github preset is not shown expanded:\n%s", r.stdout)
		}
		p := filepath.Join(h.base, "rendered.yaml")
		h.writeFile(p, r.stdout, 0o644)
		if again := h.cordon(nil, "", "policy", "check", p); again.code != 0 || !strings.Contains(again.stdout, "api.example.com") {
			t.Errorf("the output of policy check does not check:\n%s", again)
		}
	})
}

// TestAllowFlag: --allow takes what network.allow takes, with an optional port, and refuses the rest
// in one line with the file's own words and status 125, before anything starts.
func TestAllowFlag(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		pol := h.policy("")
		for _, v := range []string{"api.example.com", "api.example.com:8443", "*.example.com", "*.example.com:22"} {
			if r := h.cordon(nil, "", "run", "--policy", pol, "--allow", v, "--", "true"); r.code != 0 {
				t.Errorf("--allow %s refused:\n%s", v, r)
			}
		}
		for _, v := range []string{"https://api.example.com", "10.0.0.5", "*.com", "api.example.com:0", "a.*.example.com", "api.example.com/v1"} {
			r := h.cordon(nil, "", "run", "--policy", pol, "--allow", v, "--", "echo", "STARTED")
			if r.code != exitCordon || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stdout, "STARTED") {
				t.Errorf("--allow %s: want one line and exit 125:\n%s", v, r)
				continue
			}
			if strings.Contains(v, ":0") {
				continue // the file gives ports apart from the host
			}
			file := h.cordon(nil, "", "policy", "check", h.policy("network:\n  allow: [\""+v+"\"]\n"))
			_, reason, _ := strings.Cut(strings.TrimSpace(file.stderr), "network.allow[0]: ")
			if reason == "" || !strings.HasSuffix(strings.TrimSpace(r.stderr), reason) {
				t.Errorf("--allow %s says %q; the file says %q", v, r.stderr, file.stderr)
			}
		}
		if r := h.cordon(nil, "", "run", "--policy", pol, "--allow", "https://api.example.com", "--", "true"); !strings.Contains(r.stderr, "not a URL") {
			t.Errorf("--allow with a URL does not say it is not a URL:\n%s", r)
		}
	})
}

// TestPolicySyntaxErrorLine: a bad indentation is reported on its own line, not the section's.
func TestPolicySyntaxErrorLine(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		pol := h.policy("network:\n  allow:\n    - a.example.com\n    - b.example.com\n   - c.example.com\n")
		for _, args := range [][]string{{"policy", "check", pol}, {"run", "--policy", pol, "--", "true"}} {
			if r := h.cordon(nil, "", args...); r.code == 0 || !strings.Contains(r.stderr, pol+":6: invalid YAML") {
				t.Errorf("%v: want the error on line 6:\n%s", args, r)
			}
		}
	})
}
