package scan

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kinds runs judge over content for a file named name and returns "line:kind" per finding.
func kinds(name, content string) []string {
	var out []string
	for _, f := range judge(name, classify(name), []byte(content)) {
		out = append(out, strconv.Itoa(f.Line)+":"+f.Kind)
	}
	return out
}

func TestContentFound(t *testing.T) {
	g := newGen(1)
	pemJSON := strings.ReplaceAll(g.pem(privateLabel("")), "\n", `\n`)
	tests := []struct {
		name, file, content string
		want                []string
	}{
		{"GitHub classic", "main.go", "x\ntoken := \"" + g.github() + "\"\n", []string{"2:GitHub token"}},
		{"GitHub OAuth", "a.txt", g.githubOAuth(), []string{"1:GitHub token"}},
		{"GitHub fine-grained", "a.txt", "GH=" + g.githubPAT(), []string{"1:GitHub token"}},
		{"GitLab", "ci.yml", "token: " + g.gitlab() + "\n", []string{"1:GitLab token"}},
		{"Slack", "a.py", "SLACK = '" + g.slack() + "'", []string{"1:Slack token"}},
		{"Anthropic", "a.sh", "export K=" + g.anthropic(), []string{"1:Anthropic API key"}},
		{"OpenAI project", "a.ts", "const k = `" + g.openAIProj() + "`", []string{"1:OpenAI API key"}},
		{"OpenAI legacy", "a.ts", "k=" + g.openAILegacy(), []string{"1:OpenAI API key"}},
		{"Stripe", "a.rb", "Stripe.api_key = \"" + g.stripe() + "\"", []string{"1:Stripe live key"}},
		{"AWS key ID", "a.cfg", "id=" + g.awsKeyID() + "\n", []string{"1:AWS access key ID"}},
		{"AWS secret", "settings.py", "\n\nAWS_SECRET_ACCESS_KEY = \"" + g.awsSecret() + "\"", []string{"3:AWS secret access key"}},
		{"AWS secret ini", "creds.ini", "aws_secret_access_key=" + g.awsSecret(), []string{"1:AWS secret access key"}},
		{"Google API key", "a.js", "key: '" + g.googleKey() + "'", []string{"1:Google API key"}},
		{"RSA key", "server.key", g.pem(privateLabel("RSA")), []string{"1:private key"}},
		{"PKCS8 key in pem", "bundle.pem", g.pem("CERTIFICATE") + g.pem(privateLabel("")), []string{"10:private key"}},
		{"OpenSSH key", "deploy", g.pem(privateLabel("OPENSSH")), []string{"1:private key"}},
		{"encrypted key", "k.pem", p("-----BEGIN ", privateLabel("RSA"), "-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\n") +
			strings.Repeat("QUJD", 16) + "\n", []string{"1:private key"}},
		{"PGP key", "k.asc", g.pem("PGP " + privateLabel("") + " BLOCK"), []string{"1:private key"}},
		{"key in JSON", "k.json", `{"key": "` + pemJSON + `"}`, []string{"1:private key"}},
		{"GCP service account", "sa.json", "{\n\"type\": \"service_account\",\n\"private_key\": \"" + pemJSON + "\"\n}",
			[]string{"3:GCP service account key", "3:private key"}},
		{"gcloud user", "adc.json", `{"type": "authorized_user", "refresh_token": "1//` + g.str(40, alnum) + `"}`,
			[]string{"1:Google OAuth refresh token"}},
		{"PuTTY", "k.ppk", p("PuTTY-User-", "Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 1\n", g.str(40, b64),
			"\nPrivate-Lines: 1\n", g.str(44, b64), "\n"), []string{"1:PuTTY private key"}},
		{"postgres prod", "config.yaml", "db:\n  url: postgres://app:" + g.str(12, alnum) + "@db.prod.example:5432/x\n",
			[]string{"2:database URL to db.prod.example"}},
		{"task example", "a.txt", "postgres://user:" + "pass@db.prod.example/x", []string{"1:database URL to db.prod.example"}},
		{"mongodb+srv", "a.env.example", "MONGO=mongodb+srv://u:" + g.str(10, alnum) + "@cluster0.ab12c.mongodb.net/db",
			[]string{"1:database URL to cluster0.ab12c.mongodb.net"}},
		{"redis password only", "a.txt", "redis://:" + g.str(16, alnum) + "@cache.corp.internal:6379/0",
			[]string{"1:database URL to cache.corp.internal"}},
		{"amqp private address", "a.txt", "amqp://u:" + g.str(10, alnum) + "@10.0.3.4/", []string{"1:database URL to 10.0.3.4"}},
		{"kubernetes service", "a.txt", "mysql://root:" + g.str(10, alnum) + "@mysql.prod.svc.cluster.local/db",
			[]string{"1:database URL to mysql.prod.svc.cluster.local"}},
		{"mongodb second host", "a.txt", "mongodb://u:" + g.str(10, alnum) + "@localhost:27017,db2.prod.example:27017/x",
			[]string{"1:database URL to db2.prod.example"}},
		{"IPv6 host", "a.txt", "postgresql://u:" + g.str(10, alnum) + "@[2001:db8::5]:5432/x", []string{"1:database URL to 2001:db8::5"}},
		{"git remote with token", ".git/config", "[remote \"origin\"]\n\turl = https://x-access-token:" + g.str(20, alnum) + "@git.corp.io/a/b.git\n",
			[]string{"2:URL with credentials for git.corp.io"}},
		{".npmrc token", ".npmrc", "registry=https://npm.corp.io/\n//npm.corp.io/:_authToken=" + g.str(36, alnum) + "\n", []string{"2:npm auth token"}},
		{".yarnrc.yml", ".yarnrc.yml", "npmAuthToken: " + g.str(36, alnum) + "\n", []string{"1:yarn registry token"}},
		{".pypirc", ".pypirc", "[pypi]\nusername = __token__\npassword = " + g.str(40, alnum) + "\n", []string{"3:PyPI password"}},
		{"docker config", "home/.docker/config.json", "{\n \"auths\": {\n  \"reg.corp.io\": {\n   \"auth\": \"" + g.str(24, b64) + "\"\n  }\n }\n}",
			[]string{"4:Docker registry auth"}},
		{"kube config", "ops/.kube/config", "users:\n- name: u\n  user:\n    token: " + g.str(40, alnum) + "\n", []string{"4:Kubernetes credentials"}},
		{"kubeconfig key", "kubeconfig.yaml", "    client-key-data: " + g.str(60, b64) + "\n", []string{"1:Kubernetes credentials"}},
		{"my.cnf", ".my.cnf", "[client]\nuser=app\npassword=" + g.str(12, alnum) + "\n", []string{"3:MySQL password"}},
		{"dotenv secret name", ".env", "PORT=3000\nSTRIPE_KEY=" + g.str(20, alnum) + "\n", []string{"2:secret in dotenv file"}},
		{"dotenv high entropy", ".env.production", "# prod\nSIGNING=" + g.str(32, alnum) + "\n", []string{"2:secret in dotenv file"}},
		{"dotenv quoted export", ".envrc", "export DB_PASSWORD=\"" + g.str(10, alnum) + "\" # prod\n", []string{"1:secret in dotenv file"}},
		{"named .env", "deploy/prod.env", "API_TOKEN=" + g.str(10, alnum), []string{"1:secret in dotenv file"}},
		{"template with real token", ".env.example", "GITHUB_TOKEN=" + g.github() + "\n", []string{"1:GitHub token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, kinds(tt.file, tt.content)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestContentNotFound holds near misses: each would be a false positive that masks a real file.
func TestContentNotFound(t *testing.T) {
	g := newGen(2)
	tests := []struct{ name, file, content string }{
		{"AWS documentation key ID", "a.md", p("AKIA", "IOSFODNN7", "EXAMPLE")},
		{"AWS documentation secret", "a.md", "aws_secret_access_key = " + p("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCY", "EXAMPLEKEY")},
		{"GitHub placeholder", "a.md", p("gh", "p_") + strings.Repeat("x", 36)},
		{"GitHub short", "a.go", p("gh", "p_") + "abc"},
		{"GitHub counting", "a.md", p("gh", "p_") + "0123456789abcdefghijklmnopqrstuvwxyz"},
		{"token in a word", "a.go", "baseghp_" + g.str(36, alnum)},
		{"dashed words", "a.css", ".sk-" + "navigation-menu-item-with-a-long-class-name-here {"},
		{"sklearn", "a.py", "pip install sk-learn scikit-learn"},
		{"PuTTY format named in code", "ppk.go", "const head = \"" + p("PuTTY-User-", "Key-File-") + "\"\nif bytes.Contains(b, \"Private-Lines:\") {\n"},
		{"PuTTY header without key material", "k.ppk", p("PuTTY-User-", "Key-File-3: ssh-ed25519\nPrivate-Lines: 1\n")},
		{"redacted preview", "a_test.go", `want := "postgres://app:…@db.prod.example"`},
		{"sk- in base64url", "a.txt", "eyJ" + g.str(30, alnum) + "_sk-" + g.str(40, alnum) + "Ab3-_" + g.str(20, alnum)},
		{"sk- legacy length wrong", "a.txt", p("s", "k-") + g.str(20, alnum) + "Zq7" + g.str(26, alnum)},
		{"AWS key ID too long", "a.txt", p("AK", "IA") + g.str(20, upperD)},
		{"PEM header in code", "pem.go", `if strings.HasPrefix(s, "` + p("-----BEGIN ", privateLabel("RSA"), "-----") + `") {` + "\n\treturn nil\n}"},
		{"PEM header with ellipsis", "README.md", p("-----BEGIN ", privateLabel(""), "-----") + "\n...\n-----END"},
		{"certificate", "ca.pem", g.pem("CERTIFICATE")},
		{"public key", "id.pem", g.pem("PUBLIC KEY")},
		{"localhost DB", "a.yml", "postgres://user:" + g.str(10, alnum) + "@localhost:5432/x"},
		{"loopback DB", "a.yml", "mysql://root:" + g.str(10, alnum) + "@127.0.0.1/x"},
		{"IPv6 loopback DB", "a.yml", "postgres://u:" + g.str(10, alnum) + "@[::1]:5432/x"},
		{"password variable", "a.yml", "postgres://app:${DB_PASSWORD}@db.prod.example/x"},
		{"password placeholder", "a.md", "postgres://app:<password>@db.prod.example/x"},
		{"password format verb", "a.py", `"postgres://%s:%s@%s/%s" % (u, pw, host, db)`},
		{"no password", "a.yml", "postgres://app@db.prod.example/x"},
		{"no user info", "a.yml", "postgres://db.prod.example:5432/x"},
		{"words about secrets", "auth.go", "token := os.Getenv(\"GITHUB_TOKEN\")\npassword := r.FormValue(\"password\")\napiKey := cfg.APIKey\n"},
		{"JWT", "a_test.go", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + g.str(40, alnum) + "." + g.str(43, alnum)},
		{"dotenv plain settings", ".env", "PORT=3000\nNODE_ENV=development\nVITE_API_URL=http://localhost:3000\nDEBUG=true\n"},
		{"dotenv empty and placeholder", ".env", "API_KEY=\nDB_PASSWORD=changeme\nSECRET=your-secret-here\nTOKEN=${TOKEN}\nPASS=<pass>\n"},
		{"dotenv local DB URL", ".env", "DATABASE_URL=postgres://postgres:postgres@localhost:5432/dev\n"},
		{"dotenv URLs without credentials", ".env", "TOKEN_ISSUER=https://auth.corp.io/\nAUTH_SERVER=auth.corp.io\n"},
		{"dotenv not secret-named", ".env.local", "TOKEN_TTL=3600\nPUBLIC_KEY=abcdef\nGOOGLE_APPLICATION_CREDENTIALS_FILE=/x/y.json\nAUTH_ENABLED=true\n"},
		{"dotenv template values", ".env.example", "API_KEY=" + g.str(20, alnum) + "\nDB_PASSWORD=" + g.str(12, alnum) + "\n"},
		{"npmrc with variable", ".npmrc", "//npm.corp.io/:_authToken=${NPM_TOKEN}\n"},
		{"docker credsStore", ".docker/config.json", "{\n \"auths\": {\"reg.corp.io\": {}},\n \"credsStore\": \"desktop\"\n}"},
		{"pypirc without password", ".pypirc", "[pypi]\nusername = __token__\n"},
		{"git config without credentials", ".git/config", "[remote \"origin\"]\n\turl = https://github.com/a/b.git\n\turl = git@github.com:a/b.git\n"},
		{"service account without key", "sa.json", `{"type": "service_account", "client_email": "a@b.iam.gserviceaccount.com"}`},
		{"binary content", "a.dat", "\x00\x01" + g.github()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(tt.file, classify(tt.file), []byte(tt.content)); len(got) != 0 {
				t.Errorf("found %v in %q", got, tt.content)
			}
		})
	}
}

func TestPreviewNeverHoldsTheSecret(t *testing.T) {
	g := newGen(3)
	for _, secret := range []string{g.github(), g.githubPAT(), g.gitlab(), g.slack(), g.anthropic(), g.openAIProj(),
		g.stripe(), g.awsKeyID(), g.googleKey()} {
		got := judge("a.txt", classify("a.txt"), []byte("k="+secret))
		if len(got) != 1 {
			t.Fatalf("%d findings for a %d-byte token, want 1", len(got), len(secret))
		}
		body := secret[len(secret)-16:]
		if strings.Contains(got[0].Preview, body) || !strings.HasSuffix(got[0].Preview, "…") {
			t.Errorf("preview %q shows the token", got[0].Preview)
		}
	}
	tok := g.github()
	inURL := judge(".git/config", classify(".git/config"), []byte("url = https://"+tok+":x-oauth-basic@github.com/a/b"))
	if len(inURL) != 2 {
		t.Errorf("token in a URL: %v, want the URL and the token", inURL)
	}
	for _, f := range inURL {
		if strings.Contains(f.Preview, tok[4:]) {
			t.Errorf("%s: preview %q shows the token in the user's place", f.Kind, f.Preview)
		}
	}
	pw := g.str(16, alnum)
	got := judge("a.txt", fileClass{}, []byte("postgres://app:"+pw+"@db.prod.example/x"))
	if len(got) != 1 || strings.Contains(got[0].Preview, pw) || got[0].Preview != "postgres://app:…@db.prod.example" {
		t.Errorf("URL findings %v", got)
	}
}

func TestFindingsPerFileBounded(t *testing.T) {
	g := newGen(4)
	var b strings.Builder
	for range 100 {
		b.WriteString(g.github() + "\n")
	}
	if got := judge("a.txt", fileClass{}, []byte(b.String())); len(got) != maxPerFile {
		t.Errorf("%d findings, want the bound %d", len(got), maxPerFile)
	}
}
