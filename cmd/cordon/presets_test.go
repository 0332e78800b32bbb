//go:build linux

package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// npmRegistry is a minimal npm registry speaking the real protocol: a packument per package at
// /NAME (scoped names as @scope%2fname) under its base path and the tarball it names. It records the
// Authorization header of every request.
type npmRegistry struct {
	mu     sync.Mutex
	auth   map[string]string // host and escaped path → Authorization
	routes map[string][]byte // host and escaped path (lower case) → body
}

func (reg *npmRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := strings.Cut(r.Host, ":")
	key := host + r.URL.EscapedPath()
	reg.mu.Lock()
	reg.auth[key] = r.Header.Get("Authorization")
	body, ok := reg.routes[strings.ToLower(key)]
	reg.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Write(body)
}

func (reg *npmRegistry) seen(path string) (string, bool) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	a, ok := reg.auth[path]
	return a, ok
}

// npmTarball is a package tarball as npm publishes it: package/package.json and package/index.js.
func npmTarball(t *testing.T, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", fmt.Sprintf(`{"name": %q, "version": "1.0.0", "main": "index.js"}`, name)},
		{"package/index.js", fmt.Sprintf("module.exports = 'FROM-%s';\n", name)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// add serves the package name under host and prefix ("/" or "/r/"), a registry at https://host:port/prefix.
func (reg *npmRegistry) add(t *testing.T, host, prefix, name string, port int) {
	tgz := npmTarball(t, name)
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	tarPath := prefix + name + "/-/" + filepath.Base(name) + "-1.0.0.tgz"
	doc, _ := json.Marshal(map[string]any{
		"name": name, "dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{
			"name": name, "version": "1.0.0",
			"dist": map[string]string{
				"tarball":   fmt.Sprintf("https://%s:%d%s", host, port, tarPath),
				"shasum":    hex.EncodeToString(sha1sum[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
			},
		}},
	})
	reg.mu.Lock()
	defer reg.mu.Unlock()
	reg.routes[strings.ToLower(host+prefix+strings.ReplaceAll(name, "/", "%2f"))] = doc
	reg.routes[strings.ToLower(host+tarPath)] = tgz
}

// TestNpmPresetReadsEffectiveConfig: with cordon started elsewhere (--workspace), the npm preset
// reads the project's .npmrc (default registry and its token) and the user's ~/.npmrc (a scoped
// registry and its token), allows both hosts, and a real `npm install` inside gets both packages:
// each registry receives its real token while the sandbox holds only placeholders (its files and
// environment are searched for the tokens).
func TestNpmPresetReadsEffectiveConfig(t *testing.T) {
	requireTool(t, "npm")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		reg := &npmRegistry{auth: map[string]string{}, routes: map[string][]byte{}}
		port, caFile := serveTLS(t, h, reg, "npm.test", "scoped.test")
		reg.add(t, "npm.test", "/", "leftpad-cordon", port)
		reg.add(t, "scoped.test", "/r/", "@acme/util", port)
		projectToken := "npm_" + h.canary + "PROJECTREAL"
		userToken := "npm_" + h.canary + "USERREAL"
		h.writeFile(filepath.Join(h.ws, ".npmrc"), fmt.Sprintf("registry=https://npm.test:%d/\n//npm.test:%d/:_authToken=%s\n", port, port, projectToken), 0o644)
		h.writeFile(filepath.Join(h.home, ".npmrc"), fmt.Sprintf("@acme:registry=https://scoped.test:%d/r/\n//scoped.test:%d/r/:_authToken=${ACME_TOKEN}\n", port, port), 0o600)
		h.writeFile(filepath.Join(h.ws, "package.json"), `{"name": "app", "version": "1.0.0", "dependencies": {"leftpad-cordon": "1.0.0", "@acme/util": "1.0.0"}}`, 0o644)
		pol := h.policy(fmt.Sprintf(`network:
  presets: [npm]
  hosts: {npm.test: 127.0.0.1, scoped.test: 127.0.0.1}
  tls: {caFile: %q}
`, caFile))
		script := `npm install --no-audit --no-fund --loglevel=error >/dev/null || exit 1
node -e 'console.log(require("leftpad-cordon"), require("@acme/util"))'
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
grep -rs "REAL" "$HOME" /etc /tmp . && echo FOUND-IN-FILES
true`
		cmd := h.command([]string{"ACME_TOKEN=" + userToken}, cordonBin, "run", "--policy", pol, "--workspace", h.ws, "--", "sh", "-c", script)
		cmd.Dir = h.base // elsewhere: the project's .npmrc must still count
		r := run(t, cmd, "")
		if r.code != 0 || !strings.Contains(r.stdout, "FROM-leftpad-cordon FROM-@acme/util") {
			t.Fatalf("npm install inside did not get both packages:\n%s", r)
		}
		if strings.Contains(r.stdout+r.stderr, "REAL") {
			t.Fatalf("a registry token reached the sandbox (files or environment) or cordon's output:\n%s", r)
		}
		for path, want := range map[string]string{
			"npm.test/leftpad-cordon":                            "Bearer " + projectToken,
			"npm.test/leftpad-cordon/-/leftpad-cordon-1.0.0.tgz": "Bearer " + projectToken,
			"scoped.test/r/@acme%2futil":                         "Bearer " + userToken,
			"scoped.test/r/@acme/util/-/util-1.0.0.tgz":          "Bearer " + userToken,
		} {
			got, ok := reg.seen(path)
			if !ok {
				got, ok = reg.seen(strings.ReplaceAll(path, "%2f", "%2F"))
			}
			if !ok || got != want {
				t.Errorf("registry saw Authorization %q on %s (requested: %v), want the real token", got, path, ok)
			}
		}
		data, err := os.ReadFile(filepath.Join(h.ws, ".npmrc"))
		if err != nil || !strings.Contains(string(data), projectToken) {
			t.Errorf("the project's .npmrc changed on the host: %q, %v", data, err)
		}
	})
}

// goTelemetryOff turns go's telemetry off in the harness's home: in a fresh home go (asked by the
// go preset on the host) starts a child that writes there after go exits, racing the test's cleanup.
func goTelemetryOff(h *harness) {
	h.writeFile(filepath.Join(h.home, ".config", "go", "telemetry", "mode"), "off\n", 0o644)
}

// TestGoPresetPassesSettings: the go preset passes the caller's GOPROXY and GOSUMDB (set in its go env
// file, which the sandbox's empty home does not have), and the caller's PATH keeps go's directory.
func TestGoPresetPassesSettings(t *testing.T) {
	requireTool(t, "go")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Fatal(err)
		}
		goTelemetryOff(h)
		h.writeFile(filepath.Join(h.home, ".config", "go", "env"), "GOPROXY=https://goproxy.test:8443\nGOSUMDB=off\n", 0o644)
		pol := "network:\n  presets: [go]\n"
		r := h.cordon([]string{"PATH=" + filepath.Dir(goBin) + ":/usr/bin:/bin"}, "", "run", "--policy", h.policy(pol), "--", "sh", "-c", `go version && go env GOPROXY GOSUMDB`)
		if r.code != 0 || !strings.Contains(r.stdout, "go version go") || !strings.Contains(r.stdout, "https://goproxy.test:8443\noff\n") {
			t.Fatalf("go inside does not run with the caller's settings:\n%s", r)
		}
	})
}

// TestHintNamesToolchainPreset: a command the caller finds in a toolchain under its home (node from
// nvm) that the sandbox does not show gets a hint naming the preset that shows it, not a mount.
func TestHintNamesToolchainPreset(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		bin := filepath.Join(h.home, ".nvm", "versions", "node", "v99.0.0", "bin")
		h.writeFile(filepath.Join(bin, "nvmtool"), "#!/bin/sh\necho NVMTOOL\n", 0o755)
		r := h.cordon([]string{"PATH=" + bin + ":/usr/bin:/bin"}, "", "run", "--policy", h.policy("network:\n  allow: [example.test]\n"), "--", "nvmtool")
		if r.code != 127 || !strings.Contains(r.stderr, "the npm preset shows") || !strings.Contains(r.stderr, "network.presets: [npm]") {
			t.Fatalf("the hint does not name the npm preset:\n%s", r)
		}
	})
}

// pythonWheel is a minimal real wheel of package cordon_demo 1.0.
func pythonWheel(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []struct{ name, body string }{
		{"cordon_demo/__init__.py", "MSG = 'FROM-WHEEL'\n"},
		{"cordon_demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: cordon-demo\nVersion: 1.0\n"},
		{"cordon_demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"cordon_demo-1.0.dist-info/RECORD", ""},
	} {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
	}
	zw.Close()
	return buf.Bytes()
}

// TestPipPresetIndexWithPassword: PIP_INDEX_URL with a user and password (the way private indexes are
// configured) reaches pip inside with a placeholder for the password; a real `pip install` from a PEP
// 503 index over HTTPS works, the index receives the real password, and the sandbox never sees it.
func TestPipPresetIndexWithPassword(t *testing.T) {
	requireTool(t, "python3")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		whl := pythonWheel(t)
		sum := sha256.Sum256(whl)
		var mu sync.Mutex
		seen := map[string]string{}
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, _ := r.BasicAuth()
			mu.Lock()
			seen[r.URL.Path] = user + ":" + pass
			mu.Unlock()
			switch r.URL.Path {
			case "/simple/cordon-demo/":
				fmt.Fprintf(w, `<html><body><a href="/files/cordon_demo-1.0-py3-none-any.whl#sha256=%x">cordon_demo-1.0-py3-none-any.whl</a></body></html>`, sum)
			case "/files/cordon_demo-1.0-py3-none-any.whl":
				w.Write(whl)
			default:
				http.NotFound(w, r)
			}
		}), "pypi.test")
		secret := "pw" + h.canary + "REAL"
		pol := h.policy(fmt.Sprintf("network:\n  presets: [pypi]\n  hosts: {pypi.test: 127.0.0.1}\n  tls: {caFile: %q}\n", caFile))
		script := `python3 -m pip install --disable-pip-version-check --no-deps -q --target "$HOME/t" cordon-demo || exit 1
PYTHONPATH="$HOME/t" python3 -c 'import cordon_demo; print(cordon_demo.MSG)'
echo "INDEX=$PIP_INDEX_URL"
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
grep -rs "REAL" "$HOME" /etc /tmp . && echo FOUND-IN-FILES
true`
		r := h.cordon([]string{fmt.Sprintf("PIP_INDEX_URL=https://me:%s@pypi.test:%d/simple/", secret, port), "PIP_CONFIG_FILE=/dev/null"}, "",
			"run", "--policy", pol, "--", "sh", "-c", script)
		if r.code != 0 || !strings.Contains(r.stdout, "FROM-WHEEL") || !strings.Contains(r.stdout, "INDEX=https://me:") {
			t.Fatalf("pip install inside did not work through the preset:\n%s", r)
		}
		if strings.Contains(r.stdout+r.stderr, "REAL") {
			t.Fatalf("the index password reached the sandbox or cordon's output:\n%s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := seen["/simple/cordon-demo/"]; got != "me:"+secret {
			t.Errorf("the index saw credentials %q, want the real password", got)
		}
	})
}

// TestGoPresetModuleProxy: a real `go mod download` inside fetches from the caller's GOPROXY (a module
// proxy tree served over HTTPS) with the caller's GOSUMDB=off and GOFLAGS unset, the settings coming
// from the caller's go env file.
func TestGoPresetModuleProxy(t *testing.T) {
	requireTool(t, "go")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Fatal(err)
		}
		var modZip bytes.Buffer
		zw := zip.NewWriter(&modZip)
		for name, body := range map[string]string{"go.mod": "module example.test/m\n\ngo 1.21\n", "m.go": "package m\n\nconst Msg = \"FROM-PROXY\"\n"} {
			w, _ := zw.Create("example.test/m@v1.0.0/" + name)
			w.Write([]byte(body))
		}
		zw.Close()
		var mu sync.Mutex
		var paths []string
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.URL.Path)
			mu.Unlock()
			switch r.URL.Path {
			case "/example.test/m/@v/list":
				fmt.Fprint(w, "v1.0.0\n")
			case "/example.test/m/@v/v1.0.0.info":
				fmt.Fprint(w, `{"Version": "v1.0.0", "Time": "2024-01-01T00:00:00Z"}`)
			case "/example.test/m/@v/v1.0.0.mod":
				fmt.Fprint(w, "module example.test/m\n\ngo 1.21\n")
			case "/example.test/m/@v/v1.0.0.zip":
				w.Write(modZip.Bytes())
			default:
				http.NotFound(w, r)
			}
		}), "goproxy.test")
		goTelemetryOff(h)
		h.writeFile(filepath.Join(h.home, ".config", "go", "env"), fmt.Sprintf("GOPROXY=https://goproxy.test:%d\nGOSUMDB=off\n", port), 0o644)
		h.writeFile(filepath.Join(h.ws, "go.mod"), "module app\n\ngo 1.21\n\nrequire example.test/m v1.0.0\n", 0o644)
		// A passthrough host with a private CA: network.tls.caFile is trusted inside too.
		pol := h.policy(fmt.Sprintf("network:\n  presets: [go]\n  hosts: {goproxy.test: 127.0.0.1}\n  tls: {caFile: %q}\n", caFile))
		r := h.cordon([]string{"PATH=" + filepath.Dir(goBin) + ":/usr/bin:/bin"}, "", "run", "--policy", pol, "--", "sh", "-c",
			`go mod download -json example.test/m && cat "$(go env GOMODCACHE)/example.test/m@v1.0.0/m.go"`)
		if r.code != 0 || !strings.Contains(r.stdout, "FROM-PROXY") {
			t.Fatalf("go mod download inside did not use the caller's proxy:\n%s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(paths, "/example.test/m/@v/v1.0.0.zip") {
			t.Errorf("the proxy served %v, not the module's zip", paths)
		}
	})
}

// cargoToolchain is the real cargo's toolchain directory (its bin holds cargo itself, not rustup's
// proxy) when the host has cargo new enough for sparse registries with authentication (1.74), and
// why not otherwise.
func cargoToolchain(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("rustc", "--print", "sysroot").Output()
	if err != nil {
		t.Skipf("no rust toolchain: %v (Debian's cargo 0.66, the one CI can install, has no sparse registries or registry authentication)", err)
	}
	sysroot := strings.TrimSpace(string(out))
	v, err := exec.Command(filepath.Join(sysroot, "bin", "cargo"), "--version").Output()
	var major, minor int
	if err != nil || func() bool { _, err := fmt.Sscanf(string(v), "cargo %d.%d", &major, &minor); return err != nil }() || major == 1 && minor < 74 {
		t.Skipf("cargo %q cannot use an authenticated sparse registry (needs 1.74; Debian's 0.66, the one CI can install, cannot)", v)
	}
	return sysroot
}

// TestCargoPresetRegistryToken: a registry and its token in the caller's CARGO_HOME (config.toml,
// credentials.toml) reach a real `cargo fetch` inside, which gets a crate from an authenticated sparse
// registry over HTTPS: the registry receives the real token, the sandbox holds a placeholder, and the
// toolchain (under rustup's home) is shown read-only and found through the caller's PATH.
func TestCargoPresetRegistryToken(t *testing.T) {
	sysroot := cargoToolchain(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		if h.who.uid != 0 {
			for d := sysroot; d != "/"; d = filepath.Dir(d) {
				if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
					t.Skipf("the host's toolchain %s is not reachable by the rootless caller (%s)", sysroot, d)
				}
			}
		}
		crate := cargoCrate(t)
		sum := sha256.Sum256(crate)
		token := "cio" + h.canary + "REAL"
		var mu sync.Mutex
		var seen []string
		var port int
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization"))
			mu.Unlock()
			if r.Header.Get("Authorization") == "" {
				w.Header().Set("WWW-Authenticate", `Cargo login_url="https://crates.test/me"`)
				http.Error(w, "token required", http.StatusUnauthorized)
				return
			}
			switch r.URL.Path {
			case "/index/config.json":
				fmt.Fprintf(w, `{"dl": "https://crates.test:%d/dl", "auth-required": true}`, port)
			case "/index/co/rd/cordon-demo":
				fmt.Fprintf(w, `{"name":"cordon-demo","vers":"1.0.0","deps":[],"cksum":"%x","features":{},"yanked":false}`+"\n", sum)
			case "/dl/cordon-demo/1.0.0/download":
				w.Write(crate)
			default:
				http.NotFound(w, r)
			}
		}), "crates.test")
		cargoHome := filepath.Join(h.home, ".cargo")
		h.writeFile(filepath.Join(cargoHome, "config.toml"), fmt.Sprintf("[registry]\nglobal-credential-providers = [\"cargo:token\"]\n[registries.corp]\nindex = \"sparse+https://crates.test:%d/index/\"\n", port), 0o644)
		h.writeFile(filepath.Join(cargoHome, "credentials.toml"), fmt.Sprintf("[registries.corp]\ntoken = %q\n", token), 0o600)
		h.writeFile(filepath.Join(h.ws, "Cargo.toml"), "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ncordon-demo = { version = \"1.0.0\", registry = \"corp\" }\n", 0o644)
		h.writeFile(filepath.Join(h.ws, "src", "main.rs"), "fn main() {}\n", 0o644)
		pol := h.policy(fmt.Sprintf("network:\n  presets: [cargo]\n  hosts: {crates.test: 127.0.0.1}\n  tls: {caFile: %q}\n", caFile))
		script := `cargo fetch -q || exit 1
cat "$HOME"/.cargo/registry/src/*/cordon-demo-1.0.0/src/lib.rs
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
grep -rs "REAL" "$HOME" /etc /tmp . && echo FOUND-IN-FILES
true`
		env := []string{"PATH=" + filepath.Join(sysroot, "bin") + ":/usr/bin:/bin", "RUSTUP_HOME=" + filepath.Dir(filepath.Dir(sysroot))}
		r := h.cordon(env, "", "run", "--policy", pol, "--", "sh", "-c", script)
		if r.code != 0 || !strings.Contains(r.stdout, "FROM-CRATE") {
			t.Fatalf("cargo fetch inside did not get the crate:\n%s", r)
		}
		if strings.Contains(r.stdout+r.stderr, "REAL") {
			t.Fatalf("the registry token reached the sandbox or cordon's output:\n%s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(seen, "/dl/cordon-demo/1.0.0/download "+token) {
			t.Errorf("the registry did not receive the real token with the download: %q", seen)
		}
	})
}

// cargoCrate is a .crate file (a gzipped tar under cordon-demo-1.0.0/) of a library crate.
func cargoCrate(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"cordon-demo-1.0.0/Cargo.toml", "[package]\nname = \"cordon-demo\"\nversion = \"1.0.0\"\nedition = \"2021\"\n"},
		{"cordon-demo-1.0.0/src/lib.rs", "pub const MSG: &str = \"FROM-CRATE\";\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestClaudePresetBaseURL: Claude Code pointed at another API host in the caller's
// ~/.claude/settings.json (an LLM gateway) works inside with the claude preset alone: the preset
// allows that host and passes ANTHROPIC_BASE_URL, which the sandbox's empty home would not have.
func TestClaudePresetBaseURL(t *testing.T) {
	requireTool(t, "claude")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		f := newFakeAPIs(t, h)
		h.writeFile(filepath.Join(h.home, ".claude", "settings.json"), fmt.Sprintf(`{"env": {"ANTHROPIC_BASE_URL": "https://anthropic.test:%d"}}`, f.port), 0o644)
		pol := fmt.Sprintf(`network:
  presets: [claude]
  hosts: {anthropic.test: 127.0.0.1}
  tls: {caFile: %q}
credentials:
  - name: ANTHROPIC_API_KEY
    from: {env: CORDON_TEST_ANTHROPIC_KEY}
    inject: {host: anthropic.test, header: x-api-key}
`, f.caFile)
		script := `export DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CODE_MAX_RETRIES=0
echo "BASE=$ANTHROPIC_BASE_URL"
export HOME=$PWD/claude-home; mkdir -p "$HOME"
claude -p hi 2>&1; true`
		r := f.run(h, pol, script)
		if !strings.Contains(r.stdout, "BASE=https://anthropic.test:") || !strings.Contains(r.stdout, f.marker) || len(f.anthropic.Requests()) == 0 {
			t.Fatalf("claude inside did not reach the API its settings name:\n%s\nthe fake saw %d requests", r, len(f.anthropic.Requests()))
		}
	})
}

// TestMavenPresetMirrorWithPassword: a mirror and its server's password in the caller's
// ~/.m2/settings.xml reach a real `mvn validate` inside, which downloads the project's parent POM from
// the mirror over HTTPS: the mirror receives the real password (maven's Basic answer to its 401), the
// sandbox's settings.xml holds a placeholder, and nothing inside holds the password.
func TestMavenPresetMirrorWithPassword(t *testing.T) {
	requireTool(t, "mvn")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		parent := "<project><modelVersion>4.0.0</modelVersion><groupId>com.example</groupId><artifactId>parent</artifactId><version>1.0</version><packaging>pom</packaging><properties><marker>FROM-MIRROR</marker></properties></project>\n"
		sum := sha1.Sum([]byte(parent))
		secret := "pw" + h.canary + "REAL"
		var mu sync.Mutex
		var seen []string
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, ok := r.BasicAuth()
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s:%s", r.URL.Path, user, pass))
			mu.Unlock()
			if !ok {
				w.Header().Set("WWW-Authenticate", `Basic realm="corp"`)
				http.Error(w, "login", http.StatusUnauthorized)
				return
			}
			switch r.URL.Path {
			case "/repo/com/example/parent/1.0/parent-1.0.pom":
				fmt.Fprint(w, parent)
			case "/repo/com/example/parent/1.0/parent-1.0.pom.sha1":
				fmt.Fprintf(w, "%x", sum)
			default:
				http.NotFound(w, r)
			}
		}), "maven.test")
		h.writeFile(filepath.Join(h.home, ".m2", "settings.xml"), fmt.Sprintf(`<settings>
  <mirrors><mirror><id>corp</id><mirrorOf>*</mirrorOf><url>https://maven.test:%d/repo</url></mirror></mirrors>
  <servers><server><id>corp</id><username>me</username><password>%s</password></server></servers>
</settings>
`, port, secret), 0o600)
		h.writeFile(filepath.Join(h.ws, "pom.xml"), `<project><modelVersion>4.0.0</modelVersion>
  <parent><groupId>com.example</groupId><artifactId>parent</artifactId><version>1.0</version></parent>
  <artifactId>app</artifactId>
</project>
`, 0o644)
		pol := h.policy(fmt.Sprintf("network:\n  presets: [maven]\n  hosts: {maven.test: 127.0.0.1}\n  tls: {caFile: %q}\n", caFile))
		script := `mvn -B validate >/tmp/mvn.log 2>&1 || { cat /tmp/mvn.log; exit 1; }
echo VALIDATED; grep -h marker "$HOME"/.m2/repository/com/example/parent/1.0/parent-1.0.pom | head -1
env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
grep -rs "REAL" "$HOME" /etc /tmp . && echo FOUND-IN-FILES
true`
		r := h.cordon(nil, "", "run", "--policy", pol, "--", "sh", "-c", script)
		if r.code != 0 || !strings.Contains(r.stdout, "VALIDATED") || !strings.Contains(r.stdout, "FROM-MIRROR") {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("mvn inside did not get the parent POM from the mirror:\n%s\nthe mirror saw %q", r, seen)
		}
		if strings.Contains(r.stdout+r.stderr, "REAL") {
			t.Fatalf("the mirror's password reached the sandbox or cordon's output:\n%s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(seen, "/repo/com/example/parent/1.0/parent-1.0.pom me:"+secret) {
			t.Errorf("the mirror did not receive the real password: %q", seen)
		}
	})
}
