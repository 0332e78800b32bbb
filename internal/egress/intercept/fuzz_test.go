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
