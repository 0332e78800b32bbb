package intercept

import (
	"errors"
	"strings"
	"testing"
)

func TestCanonicalPath(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   string
		err    error
	}{
		{"/", "/", nil},
		{"/acme/app.git/info/refs?service=git-upload-pack", "/acme/app.git/info/refs", nil},
		{"/acme/app/", "/acme/app/", nil},
		{"/a%20b/%7Euser", "/a b/~user", nil},
		{"/acme/app%2Egit/x", "/acme/app.git/x", nil}, // an encoded dot inside a name is just a dot
		{"/caf%C3%A9", "/café", nil},
		{"/a;b/c", "/a;b/c", nil},
		{"", "", errNotOrigin},
		{"*", "", errNotOrigin},
		{"https://github.com/acme/app.git/info/refs", "", errNotOrigin},
		{"github.com:443", "", errNotOrigin},
		{"/acme/app.git/../other.git/info/refs", "", errDotSeg},
		{"/acme/app.git/./x", "", errDotSeg},
		{"/acme/app.git/..", "", errDotSeg},
		{"/acme/app.git/..;x/other.git", "", errDotSeg},
		{"/acme/app.git/%2e%2e/other.git/x", "", errDotSeg},
		{"/acme/app.git/%2E./other.git/x", "", errDotSeg},
		{"/acme/app.git/.%2e/other.git/x", "", errDotSeg},
		{"/acme/app.git%2f..%2fother.git/x", "", errEncodedSep},
		{"/acme/app.git/x%2F", "", errEncodedSep},
		{"/acme/app.git/%5c", "", errEncodedSep},
		{"/acme/app.git/%252e%252e/x", "", errEncodedSep},
		{"/acme/app.git/%00", "", errEncodedSep},
		{"/acme/app.git/%0a", "", errEncodedSep},
		{"/acme/app.git/\\..\\other.git", "", errBackslashes},
		{"//acme/app.git/x", "", errEmptySeg},
		{"/acme//app.git/x", "", errEmptySeg},
		{"/acme/app.git/%", "", errBadEscape},
		{"/acme/app.git/%2", "", errBadEscape},
		{"/acme/app.git/%zz", "", errBadEscape},
		{"/acme/app.git/x#frag", "", errBadByte},
		{"/acme/app.git/x y", "", errBadByte},
		{"/acme/app.git/\x7f", "", errBadByte},
		{"/acme/app.git/\xc3\xa9", "", errBadByte},
		// Decoded bytes must be UTF-8, and not spell a dot, slash, backslash or percent sign another way.
		{"/acme/app.git/%c0%ae%c0%ae/secret", "", errBadUTF8},         // overlong "."
		{"/acme/app.git/..%c0%af..%c0%afsecret", "", errBadUTF8},      // overlong "/"
		{"/acme/app.git/%e0%80%ae%e0%80%ae/x", "", errBadUTF8},        // three-byte overlong "."
		{"/acme/app.git/%ed%a0%80", "", errBadUTF8},                   // a surrogate
		{"/acme/app.git/%ff", "", errBadUTF8},                         // not UTF-8 at all
		{"/acme/app.git/%ef%bc%8e%ef%bc%8e/secret", "", errLookalike}, // full-width "."
		{"/acme/app.git/..%ef%bc%8fsecret", "", errLookalike},         // full-width "/"
		{"/acme/app.git/..%ef%bc%bcsecret", "", errLookalike},         // full-width "\"
		{"/acme/app.git/%e2%80%a4%e2%80%a4/x", "", errLookalike},      // one dot leader
		{"/acme/app.git/..%e2%81%84x", "", errLookalike},              // fraction slash
		{"/acme/app.git/..%e2%88%95x", "", errLookalike},              // division slash
		{"/acme/app.git/%ef%bc%85%32%65", "", errLookalike},           // full-width "%"
		{"/acme/app.git/%e2%82%ac", "/acme/app.git/€", nil},
	} {
		got, err := canonicalPath(tc.target)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("canonicalPath(%q) = %q, %v; want %q, %v", tc.target, got, err, tc.want, tc.err)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, s string
		want    bool
	}{
		{"/acme/app.git/*", "/acme/app.git/info/refs", true},
		{"/acme/app.git/*", "/acme/app.git/", true},
		{"/acme/app.git/*", "/acme/app.git", false},
		{"/acme/app.git/*", "/acme/app.gitx/y", false},
		{"/acme/app.git/*", "/acme/other.git/info/refs", false},
		{"/acme/app.git/*", "/ACME/app.git/info/refs", false},
		{"/*", "/", true},
		{"/a/*/c", "/a/b/x/c", true},
		{"/a/*/c", "/a/c", false},
		{"/a*b*c", "/abc", true},
		{"/a*b*c", "/acb", false},
		{"/a*a", "/a", false},
		{"/exact", "/exact", true},
		{"/exact", "/exact/", false},
	} {
		if got := globMatch(tc.glob, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.glob, tc.s, got, tc.want)
		}
	}
}

// gitRules is the example: clone and push acme/app only.
var gitRules = []Rule{{
	Host:   "github.com",
	Allow:  []Access{{Methods: []string{"GET", "post"}, Paths: []string{"/acme/app.git/*", "/acme/app/*"}}},
	Source: "network.http[0]",
}}

func TestJudge(t *testing.T) {
	rs, err := compileRules(append(gitRules,
		Rule{Host: "*.example.com", Allow: []Access{{Methods: []string{"GET"}}}, Source: "network.http[1]"},
		Rule{Host: "locked.test", Source: "network.http[2]"},
		Rule{Host: "any.test", Allow: []Access{{}}, Source: "network.http[3]"},
	))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, target string
		allow                bool
		rule                 string
	}{
		{"github.com", "GET", "/acme/app.git/info/refs?service=git-receive-pack", true, "network.http[0]"},
		{"github.com", "POST", "/acme/app.git/git-upload-pack", true, "network.http[0]"},
		{"github.com", "POST", "/acme/app.git/git-receive-pack", true, "network.http[0]"},
		{"github.com", "POST", "/acme/other.git/git-receive-pack", false, "network.http[0]"},
		{"github.com", "GET", "/acme/other.git/info/refs?service=git-upload-pack", false, "network.http[0]"},
		{"github.com", "GET", "/acme/app.git/../other.git/info/refs", false, "network.http[0]"},
		{"github.com", "GET", "/acme/app.git/%2e%2e/other.git/info/refs", false, "network.http[0]"},
		{"github.com", "GET", "/acme/app.git%2f..%2fother.git/info/refs", false, "network.http[0]"},
		{"github.com", "DELETE", "/acme/app/issues/1", false, "network.http[0]"},
		{"github.com", "get", "/acme/app/issues/1", false, "network.http[0]"},
		{"api.example.com", "GET", "/anything", true, "network.http[1]"},
		{"a.b.example.com", "GET", "/anything", true, "network.http[1]"},
		{"api.example.com", "PUT", "/anything", false, "network.http[1]"},
		{"example.com", "PUT", "/anything", true, ""}, // "*." covers subdomains only
		{"locked.test", "GET", "/", false, "network.http[2]"},
		{"any.test", "PATCH", "/x", true, "network.http[3]"},
		{"any.test", "PATCH", "/x/../y", false, "network.http[3]"}, // rules apply, so the path must be canonical
		{"other.test", "GET", "//x/../y", true, ""},                // no rule covers it
	} {
		v := rs.judge(tc.name, tc.method, tc.target)
		if v.allow != tc.allow || v.rule != tc.rule {
			t.Errorf("judge(%s %s %s) = %+v; want allow=%v rule=%q", tc.name, tc.method, tc.target, v, tc.allow, tc.rule)
		}
	}
	v := rs.judge("github.com", "POST", "/acme/other.git/git-receive-pack")
	for _, want := range []string{"network.http[0]", "GET,POST on /acme/app.git/* /acme/app/*", `add {methods: [POST], paths: ["/acme/other.git/git-receive-pack"]} to network.http[0].allow`} {
		if !strings.Contains(v.reason+v.fix, want) {
			t.Errorf("denial %+v does not say %q", v, want)
		}
	}
}

func TestCompileRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{Host: "", Source: "r"}, "r: host"},
		{Rule{Host: "git*hub.com", Source: "r"}, "want a name"},
		{Rule{Host: "*.*.com", Source: "r"}, "want a name"},
		{Rule{Host: "10.0.0.1", Source: "r"}, "want a name"},
		{Rule{Host: "a.com", Allow: []Access{{Methods: []string{"GE T"}}}, Source: "r"}, "not an HTTP method"},
		{Rule{Host: "a.com", Allow: []Access{{Paths: []string{"acme/*"}}}, Source: "r"}, "must start with /"},
		{Rule{Host: "a.com", Allow: []Access{{Paths: []string{"/acme/*?x=1"}}}, Source: "r"}, "no place"},
		{Rule{Host: "a.com", Allow: []Access{{Paths: []string{"/acme%2f*"}}}, Source: "r"}, "no place"},
		{Rule{Host: "a.com", Allow: []Access{{Paths: []string{"/acme/../*"}}}, Source: "r"}, "dot segments"},
		{Rule{Host: "a.com", Allow: []Access{{Paths: []string{"/acme//*"}}}, Source: "r"}, "empty segments"},
	} {
		if _, err := compileRules([]Rule{tc.rule}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compileRules(%+v) = %v, want an error with %q", tc.rule, err, tc.want)
		}
	}
	// Control: a valid rule compiles.
	if _, err := compileRules(gitRules); err != nil {
		t.Fatal(err)
	}
}
