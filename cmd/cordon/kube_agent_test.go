//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// kubeApp is an app whose stdout and stderr are files the test reads back.
func kubeApp(t *testing.T) (a *app, stdout, stderr func() string) {
	t.Helper()
	dir := t.TempDir()
	open := func(name string) (*os.File, func() string) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f, func() string { b, _ := os.ReadFile(f.Name()); return string(b) }
	}
	out, readOut := open("stdout")
	errf, readErr := open("stderr")
	return &app{stdin: nil, stdout: out, stderr: errf, env: []string{"PATH=" + os.Getenv("PATH")}, uid: os.Getuid(), argv0: "cordon"}, readOut, readErr
}

// TestKubeAgentSideClone: cordon kube clone fetches a branch from git http-backend into --dir and
// prints the commit; a missing ref exits 1 with git's reason on one line; missing flags are a usage
// error; names that are not the agent side's are left to the caller.
func TestKubeAgentSideClone(t *testing.T) {
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	root, _ := acmeRepos(t, string(backend))
	srv := httptest.NewServer(&cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	defer srv.Close()
	seed := exec.Command("git", "-C", filepath.Join(root, "seed"), "rev-parse", "HEAD")
	want, err := seed.Output()
	if err != nil {
		t.Fatal(err)
	}

	a, stdout, stderr := kubeApp(t)
	dir := filepath.Join(t.TempDir(), "src")
	code, handled := a.kubeAgentSide("clone", []string{"--repo", srv.URL + "/acme/app.git", "--ref", "main", "--dir", dir})
	if !handled || code != 0 || stdout() != string(want) {
		t.Fatalf("clone: handled %v, code %d, stdout %q (want %q), stderr %q", handled, code, stdout(), want, stderr())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "README")); err != nil || string(b) != "hello\n" {
		t.Errorf("README: %q, %v", b, err)
	}

	a, _, stderr = kubeApp(t)
	code, _ = a.kubeAgentSide("clone", []string{"--repo", srv.URL + "/acme/app.git", "--ref", "nope", "--dir", filepath.Join(t.TempDir(), "src")})
	if msg := stderr(); code != 1 || !strings.HasPrefix(msg, "cordon: kube clone: cloning "+srv.URL+"/acme/app.git at nope: ") ||
		!strings.Contains(msg, "couldn't find remote ref nope") || strings.Count(msg, "\n") != 1 {
		t.Errorf("clone of a missing ref: code %d, stderr %q", code, msg)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"clone", []string{"--repo", "x"}, exitUsage},
		{"clone", []string{"--bogus"}, exitUsage},
		{"agent", []string{"--dir", "/nonexistent"}, exitCordon}, // no command: nothing runs
		{"agent", []string{"--dir", "/nonexistent", "--", "true"}, exitCordon},
		{"agent", []string{"--dir", t.TempDir(), "--", "true"}, exitCordon}, // no HEAD to take the base from
		{"keep", []string{"extra"}, exitUsage},
		{"fetch", []string{"extra"}, exitUsage},
	} {
		a, _, stderr := kubeApp(t)
		if code, handled := a.kubeAgentSide(tc.name, tc.args); !handled || code != tc.code || !strings.Contains(stderr(), "cordon: kube "+tc.name) {
			t.Errorf("kube %s %q: handled %v, code %d, stderr %q; want %d", tc.name, tc.args, handled, code, stderr(), tc.code)
		}
	}
	for _, name := range []string{"setup", "gateway", "ready", "bogus"} {
		a, _, _ := kubeApp(t)
		if _, handled := a.kubeAgentSide(name, nil); handled {
			t.Errorf("kube %s was taken by the agent side", name)
		}
	}
}

// TestKubeAgentSideFetch: cordon kube fetch writes a bundle of the directories it is given that
// kubepod.ReadBundle reads back.
func TestKubeAgentSideFetch(t *testing.T) {
	out, audit := t.TempDir(), t.TempDir()
	st, _ := json.Marshal(kubepod.Status{Version: kubepod.Version, Base: strings.Repeat("c", 40)})
	for path, b := range map[string][]byte{filepath.Join(out, kubepod.StatusFile): st, filepath.Join(out, kubepod.PatchFile): []byte("diff\n"),
		filepath.Join(audit, kubepod.AuditFile): []byte("{}\n")} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, stdout, stderr := kubeApp(t)
	if code, _ := a.kubeAgentSide("fetch", []string{"--out-dir", out, "--audit-dir", audit}); code != 0 {
		t.Fatalf("fetch: %d, %s", code, stderr())
	}
	var patch, log bytes.Buffer
	hdr, _, err := kubepod.ReadBundle(strings.NewReader(stdout()), &patch, &log)
	if err != nil || hdr.Status == nil || hdr.Status.Base != strings.Repeat("c", 40) || patch.String() != "diff\n" || log.String() != "{}\n" {
		t.Errorf("bundle: %v, %+v, patch %q, audit %q", err, hdr, patch.String(), log.String())
	}
}

// TestKubeAgentSideLease: cordon kube lease renews the lease file in --dir at cordon's heartbeat and
// ends with it; arguments are a usage error.
func TestKubeAgentSideLease(t *testing.T) {
	a, _, stderr := kubeApp(t)
	beat := filepath.Join(t.TempDir(), "heartbeat")
	if err := os.WriteFile(beat, []byte("..."), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(beat)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	a.stdin = in
	dir := t.TempDir()
	if code, handled := a.kubeAgentSide("lease", []string{"--dir", dir}); !handled || code != 0 {
		t.Fatalf("lease: handled %v, code %d, stderr %q", handled, code, stderr())
	}
	if fi, err := os.Stat(filepath.Join(dir, kubepod.LeaseFile)); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Fatalf("the lease file after a heartbeat: %v %v", fi, err)
	}
	if code, _ := a.kubeAgentSide("lease", []string{"--dir", dir, "extra"}); code != exitUsage || !strings.Contains(stderr(), "kube lease: takes no arguments") {
		t.Errorf("lease with an argument: code %d, stderr %q", code, stderr())
	}
}
