//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGitPushRules: real git inside a real sandbox clones acme/app from git http-backend behind the
// tests' TLS server and pushes through the gateway under network.git's example rule (agent/* only).
// The push to agent/x lands upstream; pushes to main, of a tag, of a deletion, and of several refs one
// of which is outside the rule are refused whole, git prints each reason, cordon prints the line that
// would allow it, no refused push reaches the upstream and its refs are as they were. A push to
// another repository on the host is refused too. The control, a permissive rule, makes every one of
// those pushes land.
//
// Git over another protocol to the same host (ssh's port, say) would go around the rules: a connection
// to the host that is neither TLS nor HTTP is refused, where without the git rule it reaches the
// server (the control).
func TestGitPushRules(t *testing.T) {
	for _, tool := range []string{"git", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (.ci/run installs it): %v", tool, err)
		}
	}
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	forEachTier(t, func(t *testing.T, h *harness) {
		root, git := acmeRepos(t, string(backend))
		var mu sync.Mutex
		pushes := 0 // receive-pack POSTs the upstream saw
		port, caFile := serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
				mu.Lock()
				pushes++
				mu.Unlock()
			}
			git.ServeHTTP(w, r)
		}), "github.test")
		seen := func() int {
			mu.Lock()
			defer mu.Unlock()
			return pushes
		}
		refs := func(repo string) string {
			cmd := exec.Command("git", "-C", filepath.Join(root, "acme", repo+".git"), "for-each-ref", "--format=%(refname) %(objectname)")
			cmd.Env = append(os.Environ(), hostGitEnv...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("for-each-ref: %v", err)
			}
			return string(out)
		}
		sshPort, sshSeen := rawListener(t)
		policyFor := func(push string) string {
			p := fmt.Sprintf(`network:
  allow: [{host: github.test, ports: [%d, %d]}]
  hosts: {github.test: 127.0.0.1}
  tls: {caFile: %q}
`, port, sshPort, caFile)
			if push != "" {
				p += fmt.Sprintf("  git:\n    - host: github.test\n      repos: [acme/app]\n      push: %s\n", push)
			}
			return p
		}
		script := fmt.Sprintf(`export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a GIT_TERMINAL_PROMPT=0
url=https://github.test:%d/acme
git clone -q $url/app.git app && cd app && cat README || exit 1
echo one > one && git add one && git commit -qm one
git push -q origin +HEAD:agent/x && echo PUSHED-agent-x
echo two > two && git add two && git commit -qm two && git tag v1
git push origin HEAD:main 2>&1; echo "MAIN=$?"
git push origin v1 2>&1; echo "TAG=$?"
git push origin :agent/x 2>&1; echo "DELETE=$?"
git push origin HEAD:agent/y HEAD:main 2>&1; echo "SEVERAL=$?"
cd /tmp && git clone -q $url/other.git other && echo CLONED-other && cd other && echo o > o && git add o && git commit -qm o
git push origin HEAD:agent/x 2>&1; echo "OTHER=$?"
`+sshScript, port, sshPort)

		r := h.sandboxed(policyFor(`{branches: ["agent/*"], tags: false, delete: false}`), script)
		if !strings.Contains(r.stdout, "hello") || !strings.Contains(r.stdout, "PUSHED-agent-x") || !strings.Contains(r.stdout, "CLONED-other") {
			t.Fatalf("clone, push to agent/x or clone of another repository failed:\n%s", r)
		}
		for _, want := range []string{
			"MAIN=1", "! [remote rejected] HEAD -> main (cordon: branch main is not in network.git[0].push.branches",
			`remote: cordon: to allow: add "main" to network.git[0].push.branches`,
			"TAG=1", "! [remote rejected] v1 -> v1 (cordon: pushing tag v1 is not allowed by network.git[0])",
			"DELETE=1", "! [remote rejected] agent/x (cordon: deleting branch agent/x is not allowed by network.git[0])",
			"SEVERAL=1", "! [remote rejected] HEAD -> agent/y (cordon: refused with the rest of the push)",
			"OTHER=", "pushing to acme/other is not allowed: network.git[0] does not list it",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("git inside did not print %q:\n%s", want, r)
			}
		}
		if strings.Contains(r.stdout, "OTHER=0") {
			t.Errorf("the push to acme/other succeeded:\n%s", r)
		}
		for _, want := range []string{`to allow: add "main" to network.git[0].push.branches`, "to allow: set network.git[0].push.tags: true",
			"to allow: set network.git[0].push.delete: true", "to allow: add acme/other to network.git[0].repos"} {
			if !strings.Contains(r.stderr, "cordon: blocked POST https://github.test") || !strings.Contains(r.stderr, want) {
				t.Errorf("cordon did not print the refusal with %q:\n%s", want, r.stderr)
			}
		}
		got := refs("app")
		if !strings.Contains(got, "refs/heads/agent/x ") {
			t.Fatalf("agent/x did not reach the upstream:\n%s", got)
		}
		for _, ref := range []string{"refs/tags/v1 ", "refs/heads/agent/y "} {
			if strings.Contains(got, ref) {
				t.Errorf("refused %s reached the upstream:\n%s", ref, got)
			}
		}
		mainBefore := strings.Fields(got[strings.Index(got, "refs/heads/main "):])[1]
		seed := exec.Command("git", "-C", filepath.Join(root, "seed"), "rev-parse", "HEAD")
		if out, err := seed.Output(); err != nil || strings.TrimSpace(string(out)) != mainBefore {
			t.Errorf("main moved upstream: %s, seed %s (%v)", mainBefore, out, err)
		}
		if strings.Contains(refs("other"), "agent") {
			t.Errorf("acme/other changed:\n%s", refs("other"))
		}
		if n := seen(); n != 1 {
			t.Errorf("the upstream saw %d pushes, want the one to agent/x", n)
		}
		if sshSeen() {
			t.Errorf("a non-HTTP connection to the git host reached it:\n%s", r)
		}
		// Control: without the git rule the same bytes arrive.
		if r := h.sandboxed(policyFor(""), fmt.Sprintf(sshScript, sshPort)); !sshSeen() {
			t.Errorf("control: the raw connection did not reach the listener:\n%s", r)
		}

		// Control: a rule allowing every branch, tags and deletion lets the same pushes land.
		r = h.sandboxed(policyFor(`{branches: ["*", "*/*"], tags: true, delete: true}`), script)
		for _, want := range []string{"PUSHED-agent-x", "MAIN=0", "TAG=0", "DELETE=0", "SEVERAL=0"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("control: %q missing:\n%s", want, r)
			}
		}
		got = refs("app")
		for _, ref := range []string{"refs/tags/v1 ", "refs/heads/agent/y "} {
			if !strings.Contains(got, ref) {
				t.Errorf("control: %s did not reach the upstream:\n%s", ref, got)
			}
		}
	})
}

// sshScript sends an ssh client's greeting to github.test on the port given.
const sshScript = `python3 -c 'import socket, sys
try:
    s = socket.create_connection(("github.test", int(sys.argv[1])), timeout=5); s.sendall(b"SSH-2.0-OpenSSH_9.2\r\n"); s.recv(1)
except OSError as e:
    print("SSH", e)' %d`

// rawListener accepts TCP on the host's loopback and reports whether an ssh greeting arrived.
func rawListener(t *testing.T) (int, func() bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var got atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 7)
			if _, err := io.ReadFull(c, b); err == nil && string(b) == "SSH-2.0" {
				got.Store(true)
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, got.Load
}

// hostGitEnv is the environment of git run on the host by the tests: no user or system configuration.
var hostGitEnv = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"}

// acmeRepos makes the bare repositories acme/app.git and acme/other.git (pushes allowed over HTTP,
// main holding one commit, made in ROOT/seed) and returns their root and git http-backend (from
// git's exec path, backend) serving them.
func acmeRepos(t *testing.T, backend string) (string, *cgi.Handler) {
	t.Helper()
	root := t.TempDir()
	setup := exec.Command("sh", "-ec", `for r in app other; do git init -q --bare -b main acme/$r.git && git -C acme/$r.git config http.receivepack true; done
git init -q -b main seed && cd seed && echo hello > README && git add README && git commit -qm seed && git push -q ../acme/app.git main && git push -q ../acme/other.git main`)
	setup.Dir, setup.Env = root, append(os.Environ(), hostGitEnv...)
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	return root, &cgi.Handler{Path: filepath.Join(strings.TrimSpace(backend), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
}
