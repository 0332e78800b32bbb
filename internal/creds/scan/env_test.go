package scan

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScanEnv(t *testing.T) {
	g := newGen(20)
	env := []string{
		"HOME=/home/u",
		"PATH=/usr/bin:/bin",
		"GH=" + g.github(),
		"DATABASE_URL=postgres://app:" + g.str(12, alnum) + "@db.prod.example/app",
		"DEV_DATABASE_URL=postgres://app:" + g.str(12, alnum) + "@localhost/app",
		"NPM_TOKEN=" + g.str(36, alnum),
		"SENTRY_AUTH_TOKEN=",
		"API_KEY=changeme",
		"GOOGLE_APPLICATION_CREDENTIALS=/home/u/key.json",
		"SSH_AUTH_SOCK=/tmp/ssh-x/agent.1",
		"BUILD_ID=" + g.str(32, lowerHx),
		"PWD=/work",
		"NOEQUALS",
	}
	want := []Finding{
		{Env: "GH", Kind: "GitHub token", Preview: p("gh", "p_") + "…"},
		{Env: "DATABASE_URL", Kind: "database URL to db.prod.example", Preview: "postgres://app:…@db.prod.example"},
		{Env: "NPM_TOKEN", Kind: "secret-named variable", Preview: "NPM_TOKEN=…"},
	}
	if diff := cmp.Diff(want, ScanEnv(env)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"API_KEY": true, "OPENAI_API_KEY": true, "STRIPE_KEY": true, "DB_PASSWORD": true, "GITHUB_TOKEN": true,
		"client_secret": true, "BASIC_AUTH": true, "GITLAB_PAT": true, "aws.secret": true,
		"PUBLIC_KEY": false, "STRIPE_PUBLISHABLE_KEY": false, "TOKEN_TTL": false, "SSH_AUTH_SOCK": false,
		"GOOGLE_CREDENTIALS_FILE": false, "PASSWORD_MIN_LENGTH": false, "KEY": false, "AUTHOR": false,
		"KEYBOARD": false, "NEXTAUTH_URL": false, "PORT": false, "AUTH_SERVER": false, "AUTH_DOMAIN": false,
		"PAT": false, "AUTH": false, "STRIPE_SECRET_KEY": true, "CREDENTIALS_JSON": true,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
}
