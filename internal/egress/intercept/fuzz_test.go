package intercept

import (
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"
)

// FuzzJudge attacks the rule matcher with arbitrary request-targets: whatever it allows under
// "/acme/app.git/*" must, read the way a lenient server would (decoded, backslashes as slashes,
// cleaned), still be inside /acme/app.git/.
func FuzzJudge(f *testing.F) {
	rs, err := compileRules(gitRules)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("GET", "/acme/app.git/info/refs?service=git-upload-pack")
	f.Add("POST", "/acme/app.git/../other.git/git-receive-pack")
	f.Add("GET", "/acme/app.git/%2e%2e/other.git/info/refs")
	f.Add("GET", "/acme/app.git%2f..%2fother.git/info/refs")
	f.Add("GET", "/acme/app.git/\\..\\other.git/x")
	f.Fuzz(func(t *testing.T, method, target string) {
		v := rs.judge("github.com", method, target)
		if !v.allow {
			return
		}
		if method != "GET" && method != "POST" {
			t.Fatalf("allowed method %q", method)
		}
		p, err := canonicalPath(target)
		if err != nil {
			t.Fatalf("allowed a non-canonical target %q: %v", target, err)
		}
		raw, _, _ := strings.Cut(target, "?")
		lenient, err := url.PathUnescape(strings.ReplaceAll(raw, `\`, "/"))
		if err != nil {
			t.Fatalf("allowed %q, which does not decode: %v", target, err)
		}
		if lenient != p {
			t.Fatalf("allowed %q as %q, but it decodes to %q", target, p, lenient)
		}
		for _, read := range []string{path.Clean(lenient), path.Clean(strings.ReplaceAll(lenient, `\`, "/"))} {
			if strings.HasSuffix(lenient, "/") {
				read += "/" // Clean drops it; the upstream may not
			}
			if !strings.HasPrefix(read, "/acme/app.git/") && !strings.HasPrefix(read, "/acme/app/") {
				t.Fatalf("allowed %q, which a server may read as %q", target, read)
			}
		}
	})
}

// FuzzGlob checks globMatch against a regular expression built from the same glob.
func FuzzGlob(f *testing.F) {
	f.Add("/acme/app.git/*", "/acme/app.git/info/refs")
	f.Add("/a*b*c", "/acb")
	f.Add("/a*a", "/a")
	f.Add("*", "")
	f.Fuzz(func(t *testing.T, glob, s string) {
		parts := strings.Split(glob, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re, err := regexp.Compile(`\A(?s:` + strings.Join(parts, ".*") + `)\z`)
		if err != nil {
			t.Skip()
		}
		if got, want := globMatch(glob, s), re.MatchString(s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, regexp says %v", glob, s, got, want)
		}
	})
}

// FuzzAuthority: a Host or :authority the interceptor accepts for github.com:8443 names that host,
// and no other port, however a URL parser reads it.
func FuzzAuthority(f *testing.F) {
	c := &conn{name: "github.com", port: 8443, scheme: "https"}
	for _, s := range []string{"github.com", "github.com:8443", "GitHub.com.", "github.com:443", "github.com@evil.example", "[::1]:8443", "github.com:", "evil.example#github.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !authorityMatches(host, c) {
			return
		}
		u, err := url.Parse("https://" + host + "/")
		if err != nil {
			t.Fatalf("accepted %q, which does not parse as an authority: %v", host, err)
		}
		if normalName(u.Hostname()) != "github.com" || (u.Port() != "" && u.Port() != "8443") || u.User != nil {
			t.Fatalf("accepted %q, which a URL parser reads as host %q port %q user %v", host, u.Hostname(), u.Port(), u.User)
		}
	})
}

// FuzzOriginForm: an absolute-form target taken on plain HTTP names the connection's host however a
// URL parser reads it, and what is judged is the rest of the target as sent.
func FuzzOriginForm(f *testing.F) {
	c := &conn{name: "github.com", port: 80, scheme: "http"}
	for _, s := range []string{"/acme/app", "http://github.com/acme/app", "HTTP://github.com:80?x", "http://github.com@evil.example/", "http://evil.example/http://github.com/", "http://github.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		got, ok := originForm(target, c)
		if !ok {
			return
		}
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("originForm(%q) = %q, not a path", target, got)
		}
		if strings.HasPrefix(target, "/") {
			if got != target {
				t.Fatalf("originForm changed an origin-form target %q to %q", target, got)
			}
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return // net/http refuses it before the interceptor sees it
		}
		if normalName(u.Hostname()) != "github.com" || u.User != nil || (u.Port() != "" && u.Port() != "80") {
			t.Fatalf("took %q, which a URL parser reads as host %q port %q", target, u.Hostname(), u.Port())
		}
		if !strings.HasSuffix(target, strings.TrimPrefix(got, "/")) {
			t.Fatalf("judged %q, which is not the rest of %q", got, target)
		}
	})
}
