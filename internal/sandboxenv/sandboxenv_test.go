package sandboxenv

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

var caller = []string{
	"PATH=/home/a/bin:/usr/bin",
	"HOME=/home/a",
	"USER=a",
	"SHELL=/usr/bin/zsh",
	"TERM=xterm-256color",
	"LANG=de_DE.UTF-8",
	"FOO_TOKEN=canary-token-1",
	"AWS_SECRET_ACCESS_KEY=canary-aws-2",
	"SSH_AUTH_SOCK=/tmp/ssh-canary/agent.3",
	"CORDON_CANARY_7F3A=canary-random-4",
	"GITHUB_TOKEN=canary-gh-5",
	"GOFLAGS=-mod=mod",
	"EDITOR=nano",
	"GOFLAGS=-second-ignored",
	"NOEQUALS",
	"=weird",
}

var id = Identity{User: "agent", Home: "/home/agent"}

func TestBuildBase(t *testing.T) {
	env, warnings := build(caller, policy.Env{}, id, Options{}, func(string) bool { return true })
	want := []string{
		"PATH=" + DefaultPath,
		"HOME=/home/agent",
		"USER=agent",
		"LOGNAME=agent",
		"SHELL=/bin/bash",
		"TERM=dumb",
		"LANG=de_DE.UTF-8",
	}
	if !reflect.DeepEqual(env, want) || warnings != nil {
		t.Errorf("Build(empty policy) = %q, %q; want %q, none", env, warnings, want)
	}
	env, _ = build(nil, policy.Env{}, Identity{TTY: true}, Options{}, func(string) bool { return false })
	for _, kv := range []string{"SHELL=/bin/sh", "TERM=dumb", "LANG=C.UTF-8"} {
		if !contains(env, kv) {
			t.Errorf("Build with no caller env = %q, want %s", env, kv)
		}
	}
}

func TestBuildTerm(t *testing.T) {
	tests := []struct {
		term string
		tty  bool
		want string
	}{
		{"xterm-256color", true, "xterm-256color"},
		{"xterm-256color", false, "dumb"},
		{"", true, "dumb"},
		{"../../tmp/evil", true, "dumb"},
	}
	for _, tt := range tests {
		env, _ := Build([]string{"TERM=" + tt.term}, policy.Env{}, Identity{TTY: tt.tty})
		if !contains(env, "TERM="+tt.want) {
			t.Errorf("TERM=%q tty=%v: env %q, want TERM=%s", tt.term, tt.tty, env, tt.want)
		}
	}
}

func TestBuildCanariesStayOut(t *testing.T) {
	p := policy.Env{Pass: []string{"GOFLAGS", "UNSET_VAR"}, Set: map[string]string{"CI": "1"}}
	env, warnings := Build(caller, p, id)
	for _, kv := range env {
		if strings.Contains(kv, "canary") {
			t.Errorf("caller secret leaked into the sandbox: %s", kv)
		}
	}
	for _, name := range []string{"FOO_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "CORDON_CANARY_7F3A", "EDITOR", "UNSET_VAR"} {
		if lookup(env, name) {
			t.Errorf("%s is in the sandbox's environment without being named (or set)", name)
		}
	}
	if !contains(env, "GOFLAGS=-mod=mod") || !contains(env, "CI=1") {
		t.Errorf("env %q lacks the named variables", env)
	}
	if warnings != nil {
		t.Errorf("warnings = %q, want none", warnings)
	}
}

func TestBuildNamedSecretsWarn(t *testing.T) {
	p := policy.Env{
		Pass: []string{"FOO_TOKEN", "SSH_AUTH_SOCK", "MISSING_TOKEN"},
		Set:  map[string]string{"DB_PASSWORD": "x"},
	}
	env, warnings := Build(caller, p, id)
	if !contains(env, "FOO_TOKEN=canary-token-1") || !contains(env, "SSH_AUTH_SOCK=/tmp/ssh-canary/agent.3") {
		t.Errorf("named secrets were not passed: %q", env)
	}
	want := []string{
		"cordon: warning: passing secret-shaped variable FOO_TOKEN into the sandbox (env.pass)",
		"cordon: warning: passing secret-shaped variable SSH_AUTH_SOCK into the sandbox (env.pass)",
		"cordon: warning: passing secret-shaped variable DB_PASSWORD into the sandbox (env.set)",
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings =\n%q\nwant\n%q", warnings, want)
	}
}

// TestBuildFlagSecretsWarn: a secret-shaped name that cordon run's -e put in names the flag, not a
// section of a file that does not hold it.
func TestBuildFlagSecretsWarn(t *testing.T) {
	p := policy.Env{
		Pass:     []string{"FOO_TOKEN", "SSH_AUTH_SOCK"},
		Set:      map[string]string{"DB_PASSWORD": "x", "API_KEY": "y"},
		FromFlag: []string{"SSH_AUTH_SOCK", "API_KEY"},
	}
	_, warnings := Build(caller, p, id)
	want := []string{
		"cordon: warning: passing secret-shaped variable FOO_TOKEN into the sandbox (env.pass)",
		"cordon: warning: passing secret-shaped variable SSH_AUTH_SOCK into the sandbox (-e SSH_AUTH_SOCK)",
		"cordon: warning: passing secret-shaped variable API_KEY into the sandbox (-e API_KEY)",
		"cordon: warning: passing secret-shaped variable DB_PASSWORD into the sandbox (env.set)",
	}
	if !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings =\n%q\nwant\n%q", warnings, want)
	}
}

func TestBuildNoDuplicatesSetWins(t *testing.T) {
	p := policy.Env{
		Pass: []string{"EDITOR", "PATH", "GOFLAGS"},
		Set:  map[string]string{"EDITOR": "vi", "HOME": "/work", "B": "2", "A": "1"},
	}
	env, _ := Build(caller, p, id)
	seen := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if seen[name] {
			t.Errorf("%s appears twice in %q", name, env)
		}
		seen[name] = true
	}
	for _, kv := range []string{"EDITOR=vi", "HOME=/work", "PATH=/home/a/bin:/usr/bin", "GOFLAGS=-mod=mod"} {
		if !contains(env, kv) {
			t.Errorf("env %q lacks %s", env, kv)
		}
	}
	// env.set is applied in name order, after everything else, so the output is deterministic.
	if i, j := index(env, "A=1"), index(env, "B=2"); i < 0 || j != i+1 {
		t.Errorf("env.set entries out of order in %q", env)
	}
}

func TestSecretShaped(t *testing.T) {
	secret := []string{
		"GITHUB_TOKEN", "GH_TOKEN", "FOO_TOKEN", "HF_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "PRIVATE_KEY",
		"SIGNING_KEY", "APIKEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AZURE_CLIENT_ID",
		"GOOGLE_APPLICATION_CREDENTIALS", "GCP_PROJECT", "CLIENT_SECRET", "DB_PASSWORD", "PGPASSWORD",
		"MYSQL_PWD", "SMTP_PASS", "LDAP_PASSWD", "NPM_AUTH", "OAUTH_CLIENT", "XAUTHORITY", "SESSION_ID",
		"SESSION_COOKIE", "GITLAB_PAT", "SSH_AUTH_SOCK", "DATABASE_URL", "SENTRY_DSN", "REDIS_URL",
		"VAULT_ADDR", "KUBECONFIG", "github_token", "Npm_Token", "AZURE_STORAGE_CONNECTION_STRING",
	}
	plain := []string{
		"PATH", "HOME", "GOFLAGS", "EDITOR", "LANG", "TERM", "CI", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
		"GIT_COMMITTER_NAME", "ANTHROPIC_BASE_URL", "NODE_ENV", "GOPATH", "PWD", "OLDPWD", "HTTP_PROXY",
	}
	for _, n := range secret {
		if !SecretShaped(n) {
			t.Errorf("SecretShaped(%q) = false, want true", n)
		}
	}
	for _, n := range plain {
		if SecretShaped(n) {
			t.Errorf("SecretShaped(%q) = true, want false", n)
		}
	}
}

func contains(env []string, kv string) bool { return index(env, kv) >= 0 }

func index(env []string, kv string) int {
	for i, e := range env {
		if e == kv {
			return i
		}
	}
	return -1
}

func lookup(env []string, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}

// TestSearchPathKeepsShownDirs: the caller's PATH is kept in its order, without what the sandbox does
// not show and without relative entries, then the presets' toolchain directories, then DefaultPath's.
func TestSearchPathKeepsShownDirs(t *testing.T) {
	shown := func(d string) bool { return !strings.HasPrefix(d, "/home/u/secret") }
	caller := []string{"PATH=/usr/local/go/bin:.::/home/u/secret/bin:/home/u/.cargo/bin:/usr/bin:/usr/local/go/bin/"}
	env, _ := build(caller, policy.Env{}, Identity{}, Options{Shown: shown, PathDirs: []string{"/opt/tool/bin", "/usr/bin"}}, func(string) bool { return true })
	want := "PATH=/usr/local/go/bin:/home/u/.cargo/bin:/usr/bin:/opt/tool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin:/bin"
	if env[0] != want {
		t.Errorf("got %s\nwant %s", env[0], want)
	}
	// The presets' variables come before the policy's, which win.
	env, _ = build(nil, policy.Env{Set: map[string]string{"GOPROXY": "policy"}}, Identity{}, Options{Presets: []string{"GOPROXY=preset", "GOSUMDB=preset"}}, func(string) bool { return true })
	if !slices.Contains(env, "GOPROXY=policy") || !slices.Contains(env, "GOSUMDB=preset") {
		t.Errorf("env %q: want the policy's GOPROXY and the preset's GOSUMDB", env)
	}
}
