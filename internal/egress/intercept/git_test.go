package intercept

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/gitpush"
)

// agentRule is the example: acme/app on github.com, pushes to agent/* only.
var agentRule = GitRule{Host: "github.com", Repos: []string{"acme/app"}, Push: gitpush.Rule{Branches: []string{"agent/*"}, Source: "network.git[0]"}}

func withGit(rs ...GitRule) option { return func(c *Config) { c.Git = rs } }

// gitClient runs real git against the interceptor in a clone of acme/REPO.
type gitClient struct {
	t    *testing.T
	s    *setup
	dir  string
	conf []string
}

func newGitClient(t *testing.T, s *setup, repo string, config ...string) (*gitClient, string, error) {
	g := &gitClient{t: t, s: s, dir: filepath.Join(t.TempDir(), "c")}
	g.conf = append([]string{"-c", "http.sslCAInfo=" + s.caFile, "-c", "http.curloptResolve=" + s.hostPort() + ":127.0.0.1"}, config...)
	out, err := run(t, filepath.Dir(g.dir), nil, "git", append(g.conf, "clone", "-q", s.url("/acme/"+repo+".git"), "c")...)
	return g, out, err
}

// git runs git in the clone; commit makes a commit first.
func (g *gitClient) git(args ...string) (string, error) {
	g.t.Helper()
	return run(g.t, g.dir, nil, "git", append(g.conf, args...)...)
}

func (g *gitClient) commit(name string) {
	g.t.Helper()
	if out, err := run(g.t, g.dir, nil, "sh", "-ec", fmt.Sprintf("echo %[1]s > %[1]s && git add %[1]s && git commit -qm %[1]s", name)); err != nil {
		g.t.Fatalf("commit: %v\n%s", err, out)
	}
}

// refsOf lists the upstream repository's refs, as the server has them.
func refsOf(t *testing.T, root, repo string) string {
	t.Helper()
	out, err := run(t, filepath.Join(root, "acme", repo+".git"), nil, "git", "for-each-ref", "--format=%(refname) %(objectname)")
	if err != nil {
		t.Fatalf("for-each-ref: %v\n%s", err, out)
	}
	return out
}

// receivePacks counts the push requests that reached the upstream.
func receivePacks(up *upstream) int {
	n := 0
	for _, r := range up.requests() {
		if r.Method == "POST" && strings.HasSuffix(r.URI, "/git-receive-pack") {
			n++
		}
	}
	return n
}

// TestGitPushRules: real git pushes through the interceptor under a git rule for acme/app that allows
// agent/* only. The push to agent/x reaches the upstream; pushes to main, of a tag, of a deletion, of
// several refs one of which is outside the rule, and with push options are refused whole with reasons
// git prints, never reach the upstream, and leave its refs as they were. Fetching works without any
// HTTP rule; a push to another repository on the host is refused. The control, a permissive rule,
// lets every one of the refused pushes through. Each over HTTP/2 and HTTP/1.1.
func TestGitPushRules(t *testing.T) {
	for _, proto := range []string{"HTTP/2", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			up, root := gitUpstream(t)
			s := newSetup(t, up, "github.com", false, withGit(agentRule))
			g, out, err := newGitClient(t, s, "app", "-c", "http.version="+proto)
			if err != nil {
				t.Fatalf("clone of a listed repository: %v\n%s", err, out)
			}
			g.commit("one")
			if out, err := g.git("push", "-q", "origin", "HEAD:agent/x"); err != nil {
				t.Fatalf("push to agent/x: %v\n%s", err, out)
			}
			if refs := refsOf(t, root, "app"); !strings.Contains(refs, "refs/heads/agent/x ") {
				t.Fatalf("agent/x did not reach the upstream:\n%s", refs)
			}
			ev := s.rec.last(t, "POST", "/acme/app.git/git-receive-pack")
			if ev.Decision != audit.Allow || ev.Rule != "network.git[0]" || ev.Detail[detailGitRefs] != "create refs/heads/agent/x" {
				t.Fatalf("allowed push event %+v", ev)
			}

			g.commit("two")
			if out, err := g.git("tag", "v1"); err != nil {
				t.Fatalf("tag: %v\n%s", err, out)
			}
			if out, err := run(t, filepath.Join(root, "acme", "app.git"), nil, "git", "config", "receive.advertisePushOptions", "true"); err != nil {
				t.Fatalf("config: %v\n%s", err, out)
			}
			before, posts := refsOf(t, root, "app"), receivePacks(up)
			for _, tc := range []struct {
				name   string
				args   []string
				want   []string // in git's output
				rule   string   // the audit event's
				reason string   // in the audit event
			}{
				{"main", []string{"HEAD:main"}, []string{"! [remote rejected] HEAD -> main (cordon: branch main is not in network.git[0].push.branches", "remote: cordon: to allow: add \"main\" to network.git[0].push.branches"}, "network.git[0].push.branches", "branch main is not in network.git[0].push.branches"},
				{"tag", []string{"v1"}, []string{"! [remote rejected] v1 -> v1 (cordon: pushing tag v1 is not allowed by network.git[0])", "set network.git[0].push.tags: true"}, "network.git[0].push.tags", "pushing tag v1"},
				{"delete", []string{":agent/x"}, []string{"! [remote rejected] agent/x (cordon: deleting branch agent/x is not allowed by network.git[0])", "set network.git[0].push.delete: true"}, "network.git[0].push.delete", "deleting branch agent/x"},
				{"several, one outside", []string{"HEAD:agent/y", "HEAD:agent/x", "HEAD:release"}, []string{"! [remote rejected] HEAD -> agent/y (cordon: refused with the rest of the push)", "! [remote rejected] HEAD -> release (cordon: branch release is not in", "remote: cordon: 1 of the 3 refs pushed are refused"}, "network.git[0].push.branches", "branch release"},
				{"atomic", []string{"--atomic", "HEAD:agent/z", "HEAD:main"}, []string{"HEAD -> main (cordon: branch main"}, "network.git[0].push.branches", "branch main"},
				{"push options", []string{"-o", "merge_request.create", "HEAD:agent/opt"}, []string{"HEAD -> agent/opt (cordon: push options (1 given) are not allowed by network.git[0]", "set network.git[0].push.options: true"}, "network.git[0].push.options", "push options"},
			} {
				out, err := g.git(append([]string{"push", "origin"}, tc.args...)...)
				if err == nil {
					t.Errorf("%s: push succeeded:\n%s", tc.name, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("%s: git did not print %q:\n%s", tc.name, w, out)
					}
				}
				ev := s.rec.last(t, "POST", "/acme/app.git/git-receive-pack")
				if ev.Decision != audit.Deny || ev.Rule != tc.rule || !strings.Contains(ev.Reason, tc.reason) || ev.Detail["status"] != "200" {
					t.Errorf("%s: refusal event %+v", tc.name, ev)
				}
			}
			if after := refsOf(t, root, "app"); after != before {
				t.Fatalf("refused pushes changed the upstream's refs:\n%s\nwas\n%s", after, before)
			}
			if n := receivePacks(up); n != posts {
				t.Fatalf("%d refused pushes reached the upstream", n-posts)
			}

			// A large push (git probes with a flush first and sends the pack chunked) works to
			// agent/*, and is refused to main with the reason after its pack was read.
			big := make([]byte, 3<<20)
			_, _ = rand.Read(big)
			if err := os.WriteFile(filepath.Join(g.dir, "big"), big, 0o644); err != nil {
				t.Fatal(err)
			}
			g.commit("big-commit")
			if out, err := g.git("push", "origin", "HEAD:main"); err == nil || !strings.Contains(out, "HEAD -> main (cordon: branch main") {
				t.Fatalf("a large push to main: %v\n%s", err, out)
			}
			if out, err := g.git("push", "-q", "origin", "HEAD:agent/big"); err != nil || !strings.Contains(refsOf(t, root, "app"), "refs/heads/agent/big ") {
				t.Fatalf("a large push to agent/big: %v\n%s", err, out)
			}

			// Another repository on the host: fetched as without the rule, never pushed to.
			o, out, err := newGitClient(t, s, "other", "-c", "http.version="+proto)
			if err != nil {
				t.Fatalf("clone of an unlisted repository with no HTTP rule: %v\n%s", err, out)
			}
			o.commit("other")
			out, err = o.git("push", "origin", "HEAD:agent/x")
			if err == nil || !strings.Contains(out, "pushing to acme/other is not allowed: network.git[0] does not list it") || !strings.Contains(out, "to allow: add acme/other to network.git[0].repos") {
				t.Fatalf("push to an unlisted repository: %v\n%s", err, out)
			}
			if refs := refsOf(t, root, "other"); strings.Contains(refs, "agent") {
				t.Fatalf("acme/other changed:\n%s", refs)
			}

			// Control: a permissive rule lets each refused push through.
			open := agentRule
			open.Push = gitpush.Rule{Branches: []string{"*", "*/*"}, Tags: true, Delete: true, Options: true, Source: "network.git[0]"}
			wide := newSetup(t, up, "github.com", false, withGit(open))
			w, out, err := newGitClient(t, wide, "app", "-c", "http.version="+proto)
			if err != nil {
				t.Fatalf("control clone: %v\n%s", err, out)
			}
			if out, err := w.git("fetch", "-q", "origin", "--tags"); err != nil {
				t.Fatalf("control fetch: %v\n%s", err, out)
			}
			w.commit("three")
			if out, err := w.git("tag", "v2"); err != nil {
				t.Fatal(out)
			}
			for _, args := range [][]string{{"HEAD:main"}, {"v2"}, {":agent/x"}, {"HEAD:agent/y", "HEAD:release"}, {"-o", "merge_request.create", "HEAD:agent/opt"}} {
				if out, err := w.git(append([]string{"push", "-q", "origin"}, args...)...); err != nil {
					t.Fatalf("control push %v: %v\n%s", args, err, out)
				}
			}
			refs := refsOf(t, root, "app")
			for _, want := range []string{"refs/tags/v2 ", "refs/heads/agent/y ", "refs/heads/release ", "refs/heads/agent/opt "} {
				if !strings.Contains(refs, want) {
					t.Errorf("control: %s missing upstream:\n%s", want, refs)
				}
			}
			if strings.Contains(refs, "refs/heads/agent/x ") {
				t.Errorf("control: agent/x was not deleted:\n%s", refs)
			}
		})
	}
}

// TestGitPushRequests: pushes made by hand that git would not send. A gzip-encoded push is judged by
// its decoded commands (the upstream inflates it: the control is applied); a body that cannot be read,
// a signed push, a second encoding, requests dressed as other things and receive-pack discovery of an
// unlisted repository are refused and never reach the upstream.
func TestGitPushRequests(t *testing.T) {
	up, root := gitUpstream(t)
	s := newSetup(t, up, "github.com", false, withGit(agentRule))
	tip := strings.Fields(refsOf(t, root, "app"))[1] // refs/heads/main's object
	emptyPack := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	sum := sha1.Sum(emptyPack)
	emptyPack = append(emptyPack, sum[:]...)
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	zero := strings.Repeat("0", 40)
	push := func(ref, old, caps string) []byte {
		return append([]byte(pkt(old+" "+tip+" "+ref+"\x00"+caps+"\n")+"0000"), emptyPack...)
	}
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		_, _ = w.Write(b)
		_ = w.Close()
		return out.Bytes()
	}
	c := s.client(false)
	post := func(path string, body []byte, header ...string) (int, string) {
		req := newRequest(t, "POST", s.url(path), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		resp, b := get(t, c, req)
		return resp.StatusCode, b
	}
	before, posts := refsOf(t, root, "app"), receivePacks(up)
	for _, tc := range []struct {
		name   string
		path   string
		body   []byte
		header []string
		status int
		want   string
	}{
		{"gzip to main", "/acme/app.git/git-receive-pack", gz(push("refs/heads/main", tip, "report-status")), []string{"Content-Encoding", "gzip"}, 200, "ng refs/heads/main cordon: branch main is not in"},
		{"x-gzip upper case to main", "/acme/app.git/git-receive-pack", gz(push("refs/heads/main", tip, "report-status")), []string{"Content-Encoding", "X-GZIP"}, 200, "ng refs/heads/main"},
		{"no report asked", "/acme/app.git/git-receive-pack", push("refs/heads/main", tip, ""), nil, 403, "branch main is not in"},
		{"two encodings", "/acme/app.git/git-receive-pack", gz(gz(push("refs/heads/main", tip, "report-status"))), []string{"Content-Encoding", "gzip, gzip"}, 400, "more than one Content-Encoding"},
		{"deflate", "/acme/app.git/git-receive-pack", push("refs/heads/agent/d", zero, "report-status"), []string{"Content-Encoding", "deflate"}, 403, "neither gzip nor identity"},
		{"signed push", "/acme/app.git/git-receive-pack", []byte(pkt("push-cert\x00report-status\n") + "0000"), nil, 403, "signed pushes"},
		{"garbage", "/acme/app.git/git-receive-pack", []byte("PACK"), nil, 403, "could not be read"},
		{"case of the repository", "/ACME/App.git/git-receive-pack", push("refs/heads/main", tip, "report-status"), nil, 200, "ng refs/heads/main"},
		{"without .git", "/acme/app/git-receive-pack", push("refs/heads/main", tip, "report-status"), nil, 200, "ng refs/heads/main"},
		{"trailing slash", "/acme/app.git/git-receive-pack/", push("refs/heads/main", tip, "report-status"), nil, 403, "names receive-pack but is not a request git sends"},
		{"upload-pack path, receive-pack query", "/acme/app.git/git-upload-pack?service=git-receive-pack", push("refs/heads/main", tip, "report-status"), nil, 403, "names receive-pack"},
		{"unlisted repository", "/acme/other.git/git-receive-pack", push("refs/heads/agent/x", zero, "report-status"), nil, 403, "add acme/other to network.git[0].repos"},
		{"dot segments", "/acme/other.git/../app.git/git-receive-pack", push("refs/heads/main", tip, "report-status"), nil, 400, "dot segment"},
	} {
		status, body := post(tc.path, tc.body, tc.header...)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want %d and %q", tc.name, status, body, tc.status, tc.want)
		}
	}
	for _, tc := range []struct{ target, want string }{
		{"/acme/other.git/info/refs?service=git-receive-pack", "add acme/other to network.git[0].repos"},
		{"/acme/app.git/info/refs?service=git-upload-pack&service=git-receive-pack", "names receive-pack"},
	} {
		resp, body := get(t, c, newRequest(t, "GET", s.url(tc.target), nil))
		if resp.StatusCode != 403 || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %q", tc.target, resp.StatusCode, body)
		}
	}
	if after := refsOf(t, root, "app"); after != before {
		t.Fatalf("refused pushes changed the upstream's refs:\n%s\nwas\n%s", after, before)
	}
	if n := receivePacks(up); n != posts {
		t.Fatalf("%d refused pushes reached the upstream", n-posts)
	}

	// Controls: the same gzip body to agent/* is forwarded and applied by the upstream, and so is
	// git's probe (a flush alone).
	if status, body := post("/acme/app.git/git-receive-pack", gz(push("refs/heads/agent/gz", zero, "report-status")), "Content-Encoding", "gzip"); status != 200 || !strings.Contains(body, "ok refs/heads/agent/gz") {
		t.Fatalf("control: gzip push to agent/gz: %d %q", status, body)
	}
	if !strings.Contains(refsOf(t, root, "app"), "refs/heads/agent/gz "+tip) {
		t.Fatal("control: the upstream did not apply the gzip push")
	}
	if status, _ := post("/acme/app.git/git-receive-pack", []byte("0000")); status != 200 || receivePacks(up) != posts+2 {
		t.Fatalf("git's probe was not forwarded: %d", status)
	}
}

// TestGitRuleAndHTTPRules: on a host with both, the git rule's repositories are fetched whatever the
// HTTP rules say, a push to another repository is the HTTP rules' to allow (and they do), and other
// requests are judged by them as before.
func TestGitRuleAndHTTPRules(t *testing.T) {
	up, root := gitUpstream(t)
	httpRule := Rule{Host: "github.com", Allow: []Access{{Methods: []string{"GET", "POST"}, Paths: []string{"/acme/other.git/*"}}}, Source: "network.http[0]"}
	s := newSetup(t, up, "github.com", false, withGit(agentRule), withRules(httpRule))
	g, out, err := newGitClient(t, s, "app")
	if err != nil {
		t.Fatalf("clone of acme/app, which no HTTP rule allows: %v\n%s", err, out)
	}
	g.commit("x")
	if out, err := g.git("push", "origin", "HEAD:main"); err == nil || !strings.Contains(out, "cordon: branch main") {
		t.Fatalf("push to main: %v\n%s", err, out)
	}
	o, out, err := newGitClient(t, s, "other")
	if err != nil {
		t.Fatalf("clone of acme/other: %v\n%s", err, out)
	}
	o.commit("y")
	if out, err := o.git("push", "-q", "origin", "HEAD:main"); err != nil || !strings.Contains(refsOf(t, root, "other"), "refs/heads/main ") {
		t.Fatalf("push to acme/other, which the HTTP rule allows: %v\n%s", err, out)
	}
	if ev := s.rec.last(t, "POST", "/acme/other.git/git-receive-pack"); ev.Decision != audit.Allow || ev.Rule != "network.http[0]" {
		t.Fatalf("event %+v", ev)
	}
	resp, _ := get(t, s.client(false), newRequest(t, "GET", s.url("/acme/app.git/HEAD"), nil))
	if resp.StatusCode != 403 {
		t.Fatalf("a non-git request to acme/app, which no HTTP rule allows: %d", resp.StatusCode)
	}

	// An HTTP rule that allows everything on acme/app does not let a disguised push to it past the
	// git rule; the same disguise to acme/other is the HTTP rule's business (the control).
	wide := Rule{Host: "github.com", Allow: []Access{{Methods: []string{"GET", "POST"}, Paths: []string{"/acme/*"}}}, Source: "network.http[0]"}
	s = newSetup(t, up, "github.com", false, withGit(agentRule), withRules(wide))
	for _, tc := range []struct {
		path   string
		status int
	}{{"/acme/app.git/git-receive-pack/", 403}, {"/acme/other.git/git-receive-pack/", 404}} {
		resp, body := get(t, s.client(false), newRequest(t, "POST", s.url(tc.path), strings.NewReader("0000")))
		if resp.StatusCode != tc.status {
			t.Errorf("POST %s under an HTTP rule allowing /acme/*: %d %q, want %d", tc.path, resp.StatusCode, body, tc.status)
		}
	}
}
