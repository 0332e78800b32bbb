//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// TestGoPresetPassesSettings: the go preset passes the caller's GOPROXY and GOSUMDB (set in its go env
// file, which the sandbox's empty home does not have), and the caller's PATH keeps go's directory.
func TestGoPresetPassesSettings(t *testing.T) {
	requireTool(t, "go")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Fatal(err)
		}
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
