package presets

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestNpmView: the project's .npmrc (read from the workspace, however cordon was started), the
// user's with a ${VAR} token, and an npm_config_ variable make the registries allowed, the tokens
// credentials for their hosts alone, and files that name only references to them.
func TestNpmView(t *testing.T) {
	dir := t.TempDir()
	ws, home := filepath.Join(dir, "ws"), filepath.Join(dir, "home")
	for p, body := range map[string]string{
		filepath.Join(ws, ".npmrc"):   "registry=https://reg.internal/\n//reg.internal/:_authToken=PROJECTSECRET\nstrict-ssl=true\nhttps-proxy=http://me:PROXYSECRET@proxy.internal:3128/\n",
		filepath.Join(home, ".npmrc"): "@acme:registry=https://acme.internal:8443/npm/\n//acme.internal:8443/npm/:_authToken=${ACME}\n_auth=BASICSECRET\ncafile=/etc/x.pem\n",
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var asked string
	src := Source{
		Env:       []string{"HOME=" + home, "ACME=USERSECRET", "npm_config_//other.internal/:_authToken=ENVSECRET", "npm_config_//stale.internal/:_authToken=STALESECRET"},
		Workspace: ws,
		Run: func(_ context.Context, _ []string, d, name string, _ ...string) ([]byte, error) {
			asked = d
			return []byte(`{"registry": "https://reg.internal/", "@acme:registry": "https://acme.internal:8443/npm/", "@o:registry": "https://other.internal/",
				"userconfig": "` + filepath.Join(home, ".npmrc") + `", "globalconfig": "/nonexistent/npmrc", "prefix": "/usr"}`), nil
		},
	}
	v, err := src.View([]string{"npm"})
	if err != nil {
		t.Fatal(err)
	}
	if asked != ws {
		t.Errorf("npm was asked in %q, want the workspace %q", asked, ws)
	}
	eps, _ := v.Preset("npm")
	if want := []policy.Endpoint{{Host: "reg.internal", Ports: []uint16{443}}, {Host: "acme.internal", Ports: []uint16{8443}}, {Host: "other.internal", Ports: []uint16{443}}}; !endpointsEqual(eps, want) {
		t.Errorf("endpoints %v, want %v", eps, want)
	}
	got := map[string]Token{}
	for _, tk := range v.Tokens {
		got[tk.Host] = tk
	}
	if _, ok := got["stale.internal"]; ok || len(v.Tokens) != 3 {
		t.Errorf("tokens %+v: want the three for registries npm uses, not the stale one", v.Tokens)
	}
	for host, want := range map[string]string{"reg.internal": "PROJECTSECRET", "acme.internal": "USERSECRET", "other.internal": "ENVSECRET"} {
		if tk := got[host]; tk.Value != want || tk.Scheme != "bearer" || tk.Name == "" {
			t.Errorf("token for %s: %+v, want %s as bearer", host, tk, want)
		}
	}
	env, files := v.Render(map[string]string{got["reg.internal"].Name: "PH1", got["acme.internal"].Name: "PH2", got["other.internal"].Name: "PH3"})
	all := strings.Join(env, "\n")
	var user, project string
	for _, f := range files {
		all += string(f.Content)
		switch {
		case f.HomeRel == ".npmrc":
			user = string(f.Content)
		case f.Replaces == filepath.Join(ws, ".npmrc"):
			project = string(f.Content)
		}
	}
	if strings.Contains(all, "SECRET") {
		t.Fatalf("a token is in what the sandbox gets:\n%s", all)
	}
	for _, want := range []string{"registry=https://reg.internal/\n", "@acme:registry=https://acme.internal:8443/npm/\n", "//reg.internal/:_authToken=PH1\n", "//acme.internal:8443/npm/:_authToken=PH2\n", "//other.internal/:_authToken=PH3\n", "cafile=/etc/x.pem\n"} {
		if !strings.Contains(user, want) {
			t.Errorf("user config lacks %q:\n%s", want, user)
		}
	}
	if project != "registry=https://reg.internal/\nstrict-ssl=true\n" {
		t.Errorf("project config copy is %q, want it without its auth line", project)
	}
	if len(v.Notes) != 2 || !strings.Contains(v.Notes[0], "_auth") || !strings.Contains(v.Notes[1], "https-proxy") {
		t.Errorf("notes %q, want one about _auth and one about the proxy URL not carried over", v.Notes)
	}
}

// TestGoAndPipViews: the settings reach the sandbox's environment, and a password in a proxy or index
// URL becomes a Basic token for that host with a reference in its place.
func TestGoAndPipViews(t *testing.T) {
	src := Source{Run: fakeTools(map[string]string{
		"go":      "https://u:GOSECRET@goproxy.internal/,direct\nsum.internal\ncorp.internal/*\ncorp.internal/*\n\n\n/nonexistent\n",
		"python3": "index-url https://me:PIPSECRET@pypi.internal/simple\nextra-index-url https://extra.internal/simple\n",
	})}
	v, err := src.View([]string{"go", "pypi"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 2 {
		t.Fatalf("tokens %+v, want two", v.Tokens)
	}
	want := map[string]Token{
		"goproxy.internal": {Name: "CORDON_GO_TOKEN_1", Host: "goproxy.internal", Value: "GOSECRET", Scheme: "basic"},
		"pypi.internal":    {Name: "CORDON_PYPI_TOKEN_2", Host: "pypi.internal", Value: "PIPSECRET", Scheme: "basic"},
	}
	for _, tk := range v.Tokens {
		tk.From = ""
		if !reflect.DeepEqual(tk, want[tk.Host]) {
			t.Errorf("token %+v, want %+v", tk, want[tk.Host])
		}
	}
	env, _ := v.Render(map[string]string{"CORDON_GO_TOKEN_1": "GOPH", "CORDON_PYPI_TOKEN_2": "PIPPH"})
	wantEnv := []string{"GOPROXY=https://u:GOPH@goproxy.internal/,direct", "GOSUMDB=sum.internal", "GONOSUMDB=corp.internal/*", "GOPRIVATE=corp.internal/*",
		"PIP_INDEX_URL=https://me:PIPPH@pypi.internal/simple", "PIP_EXTRA_INDEX_URL=https://extra.internal/simple"}
	if !reflect.DeepEqual(env, wantEnv) {
		t.Errorf("env %q, want %q", env, wantEnv)
	}
}

func TestToolchain(t *testing.T) {
	env := []string{"HOME=/home/u", "NVM_DIR=/opt/nvm"}
	for dir, want := range map[string]string{
		"/opt/nvm/versions/node/v20/bin": "npm",
		"/home/u/.nvm/versions/node/bin": "npm",
		"/home/u/.pyenv/shims":           "pypi",
		"/home/u/sdk/go1.22/bin":         "go",
		"/home/u/bin":                    "",
	} {
		if got := Toolchain(dir, env); got != want {
			t.Errorf("Toolchain(%s) = %q, want %q", dir, got, want)
		}
	}
}

// TestCaches: where each tool keeps its cache, in the tool's own order of settings; a cache that does
// not exist is left out.
func TestCaches(t *testing.T) {
	dir := t.TempDir()
	home, ws := filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for _, d := range []string{"mod", "build", "npmc", "projnpm", filepath.Join("home", ".cache", "pip"), filepath.Join("home", ".m2", "repository"), filepath.Join("home", ".cargo", "registry"), "ws"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(ws, ".npmrc"), []byte("cache=${HOME}\n"), 0o644) // the repository's: never a cache shown
	os.WriteFile(filepath.Join(home, ".npmrc"), []byte("cache=${PROJ}/projnpm\n"), 0o644)
	src := Source{Env: []string{"HOME=" + home, "PROJ=" + dir}, Workspace: ws, Run: fakeTools(map[string]string{"go": filepath.Join(dir, "mod") + "\n" + filepath.Join(dir, "build") + "\n"})}
	got, err := src.Caches([]string{"go", "npm", "pip", "cargo", "maven"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Cache{
		{"go", filepath.Join(dir, "mod"), "GOMODCACHE", ""}, {"go", filepath.Join(dir, "build"), "GOCACHE", ""},
		{"npm", filepath.Join(dir, "projnpm"), "npm_config_cache", ""},
		{"pip", filepath.Join(home, ".cache", "pip"), "PIP_CACHE_DIR", ""},
		{"cargo", filepath.Join(home, ".cargo", "registry"), "", ".cargo/registry"},
		{"maven", filepath.Join(home, ".m2", "repository"), "", ".m2/repository"},
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		t.Skipf("temp dir %s is a link", dir)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	src.Env = append(src.Env, "NPM_CONFIG_CACHE="+filepath.Join(dir, "npmc"))
	if got, _ := src.Caches([]string{"npm"}); len(got) != 1 || got[0].Dir != filepath.Join(dir, "npmc") {
		t.Errorf("npm_config_cache is not first: %+v", got)
	}
}

// TestCargoView: registries and a source replacement from the user's and the project's config.toml
// are allowed, credentials.toml's token becomes a credential sent in Authorization to that index's
// host alone (its placeholder in CARGO_REGISTRIES_<NAME>_TOKEN), and the config.toml the sandbox gets
// has no token.
func TestCargoView(t *testing.T) {
	dir := t.TempDir()
	home, ws := filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for p, body := range map[string]string{
		filepath.Join(home, ".cargo", "config.toml"):      "[registries.corp-reg]\nindex = \"sparse+https://crates.corp.internal/index/\"\ntoken = \"CONFIGSECRET\"\n[net]\nretry = 3\n",
		filepath.Join(home, ".cargo", "credentials.toml"): "[registries.corp-reg]\ntoken = \"CREDSECRET\"\n",
		filepath.Join(ws, ".cargo", "config.toml"):        "[source.crates-io]\nreplace-with = \"mirror\"\n[source.mirror]\nregistry = \"sparse+https://mirror.internal:8443/\"\n",
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Source{Env: []string{"HOME=" + home}, Workspace: ws}.View([]string{"cargo"})
	if err != nil {
		t.Fatal(err)
	}
	eps, _ := v.Preset("cargo")
	if want := []policy.Endpoint{{Host: "crates.corp.internal", Ports: []uint16{443}}, {Host: "mirror.internal", Ports: []uint16{8443}}}; !endpointsEqual(eps, want) {
		t.Errorf("endpoints %v, want %v", eps, want)
	}
	// The config's own token is the closer setting here; credentials.toml fills only a missing one.
	if len(v.Tokens) != 1 || v.Tokens[0].Host != "crates.corp.internal" || v.Tokens[0].Value != "CONFIGSECRET" || v.Tokens[0].Header != "Authorization" {
		t.Fatalf("tokens %+v", v.Tokens)
	}
	env, files := v.Render(map[string]string{v.Tokens[0].Name: "PH"})
	if !slices.Contains(env, "CARGO_REGISTRIES_CORP_REG_TOKEN=PH") {
		t.Errorf("env %q lacks the token's placeholder", env)
	}
	if len(files) != 1 || files[0].HomeRel != ".cargo/config.toml" || strings.Contains(string(files[0].Content), "SECRET") || !strings.Contains(string(files[0].Content), "retry = 3") || !strings.Contains(string(files[0].Content), `global-credential-providers = ["cargo:token"]`) {
		t.Errorf("sandbox config.toml: %+v", files)
	}
	for _, n := range v.Notes {
		if strings.Contains(n, "built-in default") {
			t.Errorf("the default registry is replaced, yet: %s", n)
		}
	}
}

// TestClaudeView: ANTHROPIC_BASE_URL from the environment wins over the settings files, whose later
// file (the project's) wins over the user's; the host it names is allowed and the value passed.
func TestClaudeView(t *testing.T) {
	dir := t.TempDir()
	home, ws := filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for p, body := range map[string]string{
		filepath.Join(home, ".claude", "settings.json"):     `{"env": {"ANTHROPIC_BASE_URL": "https://user.gateway.internal"}}`,
		filepath.Join(ws, ".claude", "settings.local.json"): `{"env": {"ANTHROPIC_BASE_URL": "https://project.gateway.internal:8443/v1"}}`,
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"HOME=" + home}, "https://project.gateway.internal:8443/v1"},
		{[]string{"HOME=" + home, "ANTHROPIC_BASE_URL=https://env.gateway.internal"}, "https://env.gateway.internal"},
	} {
		v, err := Source{Env: tc.env, Workspace: ws}.View([]string{"claude"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(v.Env, "ANTHROPIC_BASE_URL="+tc.want) {
			t.Errorf("env %q, want ANTHROPIC_BASE_URL=%s", v.Env, tc.want)
		}
		eps, _ := v.Preset("claude")
		if host := hostOf(tc.want); !slices.ContainsFunc(eps, func(e policy.Endpoint) bool { return e.Host == host }) {
			t.Errorf("endpoints %v lack %s", eps, host)
		}
	}
}

// TestMavenView: mirrors and profile repositories are allowed; a server's password for one of them
// becomes a Basic credential for that host and its reference in the sandbox's settings.xml; every
// other secret element (another server's, an encrypted one, a proxy's) is removed.
func TestMavenView(t *testing.T) {
	home := t.TempDir()
	settings := `<settings>
  <!-- <server><id>x</id><password>COMMENTED</password></server> -->
  <proxies><proxy><id>p</id><host>proxy.internal</host><password>PROXYSECRET</password></proxy></proxies>
  <mirrors><mirror><id>corp</id><mirrorOf>*</mirrorOf><url>https://maven.corp.internal/repo</url></mirror></mirrors>
  <profiles><profile><id>extra</id><repositories><repository><id>vendor</id><url>https://vendor.internal:8443/m2</url></repository></repositories></profile></profiles>
  <servers>
    <server><id>corp</id><username>me</username><password>CORPSECRET</password></server>
    <server><id>vendor</id><username>me</username><password>{ENCRYPTEDSECRET}</password></server>
    <server><id>nowhere</id><privateKey>/k</privateKey><passphrase>PASSSECRET</passphrase></server>
  </servers>
</settings>
`
	os.MkdirAll(filepath.Join(home, ".m2"), 0o755)
	os.WriteFile(filepath.Join(home, ".m2", "settings.xml"), []byte(settings), 0o600)
	v, err := Source{Env: []string{"HOME=" + home, "PATH=/nonexistent"}}.View([]string{"maven"})
	if err != nil {
		t.Fatal(err)
	}
	eps, _ := v.Preset("maven")
	if want := []policy.Endpoint{{Host: "maven.corp.internal", Ports: []uint16{443}}, {Host: "vendor.internal", Ports: []uint16{8443}}}; !endpointsEqual(eps, want) {
		t.Errorf("endpoints %v, want %v", eps, want)
	}
	if len(v.Tokens) != 1 || v.Tokens[0].Host != "maven.corp.internal" || v.Tokens[0].Value != "CORPSECRET" || v.Tokens[0].Scheme != "basic" {
		t.Fatalf("tokens %+v", v.Tokens)
	}
	_, files := v.Render(map[string]string{v.Tokens[0].Name: "PH"})
	if len(files) != 1 || files[0].HomeRel != ".m2/settings.xml" {
		t.Fatalf("files %+v", files)
	}
	got := string(files[0].Content)
	if strings.Contains(got, "SECRET") || !strings.Contains(got, "<password>PH</password>") || !strings.Contains(got, "<username>me</username>") {
		t.Errorf("sandbox settings.xml:\n%s", got)
	}
	if len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "encrypted") {
		t.Errorf("notes %q: want one for the encrypted password", v.Notes)
	}
}

// TestNpmViewProjectPaths: a project's .npmrc that names a host path cordon would read or show
// (userconfig: its contents would become the sandbox's ~/.npmrc; prefix: shown read-only) is refused.
func TestNpmViewProjectPaths(t *testing.T) {
	dir := t.TempDir()
	ws, home := filepath.Join(dir, "ws"), filepath.Join(dir, "home")
	secret := filepath.Join(dir, "aws-credentials")
	os.MkdirAll(ws, 0o755)
	os.MkdirAll(home, 0o755)
	os.WriteFile(secret, []byte("username=x\naws_secret_access_key=HOSTSECRET\n"), 0o600)
	for _, line := range []string{"userconfig=" + secret, " Prefix = " + home, "globalconfig=" + secret, "cache=" + home} {
		os.WriteFile(filepath.Join(ws, ".npmrc"), []byte("registry=https://reg.internal/\n"+line+"\n"), 0o644)
		src := Source{Env: []string{"HOME=" + home}, Workspace: ws, Run: func(context.Context, []string, string, string, ...string) ([]byte, error) {
			// What npm reports when the project's file sets them.
			return []byte(`{"registry": "https://reg.internal/", "userconfig": "` + secret + `", "globalconfig": "` + secret + `", "prefix": "` + home + `"}`), nil
		}}
		v, err := src.View([]string{"npm"})
		if err == nil {
			for _, f := range v.Files {
				if strings.Contains(string(f.Content), "HOSTSECRET") {
					t.Errorf("%q: the host file named by the project reached the sandbox in %s%s", line, f.Path, f.HomeRel)
				}
			}
			if slices.Contains(v.ReadOnly, home) {
				t.Errorf("%q: the prefix the project named is shown", line)
			}
			t.Errorf("%q: the view was made", line)
		}
	}
}

// TestCargoViewProjectIndex: a project's config.toml that points one of the user's registries at
// another index does not take the user's token (config.toml's or credentials.toml's) there.
func TestCargoViewProjectIndex(t *testing.T) {
	dir := t.TempDir()
	home, ws := filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for p, body := range map[string]string{
		filepath.Join(home, ".cargo", "config.toml"):      "[registries.corp]\nindex = \"sparse+https://crates.corp.internal/index/\"\ntoken = \"CONFIGSECRET\"\n[registries.other]\nindex = \"sparse+https://other.internal/index/\"\n",
		filepath.Join(home, ".cargo", "credentials.toml"): "[registries.other]\ntoken = \"CREDSECRET\"\n",
		filepath.Join(ws, ".cargo", "config.toml"):        "[registries.corp]\nindex = \"sparse+https://evil.example/index/\"\n[registries.other]\nindex = \"sparse+https://evil.example/other/\"\n[registries.own]\nindex = \"sparse+https://own.internal/\"\ntoken = \"PROJECTTOKEN\"\n",
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Source{Env: []string{"HOME=" + home}, Workspace: ws}.View([]string{"cargo"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range v.Tokens {
		if tok.Host == "evil.example" {
			t.Errorf("the user's token %s goes to the project's index host: %+v", tok.From, tok)
		}
	}
	if len(v.Tokens) != 1 || v.Tokens[0].Host != "own.internal" {
		t.Errorf("tokens %+v, want only the project's own", v.Tokens)
	}
}

// TestCargoViewParseErrorNamesNoToken: a credentials.toml with a token left unquoted is an error
// that does not quote the token.
func TestCargoViewParseErrorNamesNoToken(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".cargo"), 0o755)
	os.WriteFile(filepath.Join(home, ".cargo", "config.toml"), []byte("[registries.corp]\nindex = \"sparse+https://crates.corp.internal/\"\n"), 0o600)
	os.WriteFile(filepath.Join(home, ".cargo", "credentials.toml"), []byte("[registries.corp]\ntoken = UNQUOTEDSECRET\n"), 0o600)
	_, err := Source{Env: []string{"HOME=" + home}}.View([]string{"cargo"})
	if err == nil || strings.Contains(err.Error(), "UNQUOTEDSECRET") {
		t.Errorf("error %v", err)
	}
}

// TestMavenViewParseErrorNamesNoPassword: a settings.xml the XML parser rejects inside a password is
// an error that does not quote it.
func TestMavenViewParseErrorNamesNoPassword(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, ".m2"), 0o755)
	os.WriteFile(filepath.Join(home, ".m2", "settings.xml"), []byte("<settings><servers><server><id>r</id><password>p&ssw0rdSECRET</password></server></servers></settings>"), 0o600)
	_, err := Source{Env: []string{"HOME=" + home, "MAVEN_HOME=/nonexistent"}}.View([]string{"maven"})
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error %v", err)
	}
}

// TestCargoViewProjectTokenFile: a token in the project's .cargo/config.toml is a credential, and the
// sandbox gets that file without it in place of the original it would otherwise read in the workspace.
func TestCargoViewProjectTokenFile(t *testing.T) {
	dir := t.TempDir()
	home, ws := filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	cfg := filepath.Join(ws, ".cargo", "config.toml")
	os.MkdirAll(filepath.Dir(cfg), 0o755)
	os.MkdirAll(home, 0o755)
	os.WriteFile(cfg, []byte("[registries.own]\nindex = \"sparse+https://own.internal/\"\ntoken = \"PROJECTSECRET\"\n[net]\nretry = 2\n"), 0o644)
	v, err := Source{Env: []string{"HOME=" + home}, Workspace: ws}.View([]string{"cargo"})
	if err != nil {
		t.Fatal(err)
	}
	var copy *File
	for i, f := range v.Files {
		if strings.Contains(string(f.Content), "PROJECTSECRET") {
			t.Errorf("%s%s holds the token", f.Path, f.HomeRel)
		}
		if f.Replaces == cfg {
			copy = &v.Files[i]
		}
	}
	if copy == nil || copy.Path != cfg || !strings.Contains(string(copy.Content), "retry = 2") {
		t.Errorf("no sanitized copy over %s: %+v", cfg, v.Files)
	}
}
