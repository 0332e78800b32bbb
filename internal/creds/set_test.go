package creds

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

const (
	realAPI  = "sk-ant-api03-REAL-api-0123456789abcdefghijklmnopqrstuvwxyz"
	realGit  = "ghp_REALgit0123456789abcdefghijklmnopqrs"
	realBody = "REALbody0123456789abcdefghijklmnop"
	realWild = "REALwild0123456789abcdefghijklmnop"
)

// rotating is a Source whose value changes on every call, as a minted token
// does when it is refreshed; it counts Close calls.
type rotating struct {
	n      atomic.Int64
	closed atomic.Int64
	fail   atomic.Bool
}

func (r *rotating) Secret(context.Context) (Secret, error) {
	if r.fail.Load() {
		return Secret{}, errors.New("minting failed")
	}
	return NewSecret(fmt.Sprintf("ghs_REALrotating%024d", r.n.Add(1))), nil
}

func (r *rotating) Close(context.Context) error { r.closed.Add(1); return nil }

func testSet(t *testing.T) (*Set, map[string]string, *rotating) {
	t.Helper()
	env := []string{"API=" + realAPI, "GIT=" + realGit, "BODY=" + realBody, "WILD=" + realWild}
	gh := &rotating{}
	set, err := Prepare(context.Background(), []Spec{
		{Name: "API", Source: FromEnv(env, "API"), Inject: Inject{Hosts: []string{"api.example.com"}, Header: "x-api-key"}},
		{Name: "GH", Source: gh, Inject: Inject{Hosts: []string{"github.example.com", "API.GitHub.example.com."}, Scheme: SchemeBearer}},
		{Name: "GIT", Source: FromEnv(env, "GIT"), Inject: Inject{Hosts: []string{"git.example.com"}, Scheme: SchemeBasic}},
		{Name: "BODY", Source: FromEnv(env, "BODY"), Inject: Inject{Hosts: []string{"body.example.com"}, Body: true}},
		{Name: "WILD", Source: FromEnv(env, "WILD"), Inject: Inject{Hosts: []string{"*.wild.example.com"}, Header: "X-Token"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ph := map[string]string{}
	for _, kv := range set.Env() {
		k, v, _ := strings.Cut(kv, "=")
		ph[k] = v
	}
	return set, ph, gh
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestModify(t *testing.T) {
	set, ph, _ := testSet(t)
	type req struct {
		method, url, body string
		header            map[string]string
	}
	tests := []struct {
		name     string
		host     string
		req      req
		want     map[string]string // header -> exact value after Modify
		wantBody string
		// wantBasicPass is a prefix of the Basic password after Modify (for the rotating token).
		wantBasicPass string
		injected      string
		misuse        string // substring of the misuse detail; "" means none
	}{
		{name: "named header", host: "api.example.com",
			req:  req{url: "/v1/messages", header: map[string]string{"X-Api-Key": ph["API"]}},
			want: map[string]string{"X-Api-Key": realAPI}, injected: "API"},
		{name: "named header, host with port and upper case", host: "API.example.com.",
			req:  req{url: "/", header: map[string]string{"x-api-key": ph["API"]}},
			want: map[string]string{"X-Api-Key": realAPI}, injected: "API"},
		{name: "other host: unchanged, misuse", host: "evil.example.com",
			req:  req{url: "/", header: map[string]string{"X-Api-Key": ph["API"]}},
			want: map[string]string{"X-Api-Key": ph["API"]}, misuse: "API in header X-Api-Key"},
		{name: "bound host, header not allowed", host: "api.example.com",
			req:  req{url: "/", header: map[string]string{"X-Other": ph["API"]}},
			want: map[string]string{"X-Other": ph["API"]}, misuse: "API in header X-Other"},
		{name: "bound host, in the URL", host: "api.example.com",
			req:    req{url: "/?key=" + ph["API"]},
			misuse: "API in URL"},
		{name: "bound host, percent-encoded in the query", host: "api.example.com",
			req:    req{url: "/?key=" + strings.ReplaceAll(ph["API"], "-", "%2D")},
			misuse: "API in URL"},
		{name: "bearer", host: "github.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": "Bearer " + ph["GH"]}},
			want: map[string]string{"Authorization": "Bearer ghs_REALrotating"}, injected: "GH"},
		{name: "token form, second host", host: "api.github.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": "token " + ph["GH"]}},
			want: map[string]string{"Authorization": "token ghs_REALrotating"}, injected: "GH"},
		{name: "bearer scheme takes git's basic form too", host: "github.example.com",
			req:           req{url: "/", header: map[string]string{"Authorization": basic("x-access-token", ph["GH"])}},
			wantBasicPass: "ghs_REALrotating", injected: "GH"},
		{name: "bearer basic form to the wrong host", host: "api.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": basic("x-access-token", ph["GH"])}},
			want: map[string]string{"Authorization": basic("x-access-token", ph["GH"])}, misuse: "GH in header Authorization"},
		{name: "bearer sent to the wrong host", host: "api.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": "Bearer " + ph["GH"]}},
			want: map[string]string{"Authorization": "Bearer " + ph["GH"]}, misuse: "GH in header Authorization"},
		{name: "basic password", host: "git.example.com",
			req:  req{url: "/repo.git/info/refs", header: map[string]string{"Authorization": basic("x-access-token", ph["GIT"])}},
			want: map[string]string{"Authorization": basic("x-access-token", realGit)}, injected: "GIT"},
		{name: "basic user", host: "git.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": basic(ph["GIT"], "x-oauth-basic")}},
			want: map[string]string{"Authorization": basic(realGit, "x-oauth-basic")}, injected: "GIT"},
		{name: "basic unpadded", host: "git.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": "basic " + base64.RawStdEncoding.EncodeToString([]byte("u:"+ph["GIT"]))}},
			want: map[string]string{"Authorization": "basic " + base64.StdEncoding.EncodeToString([]byte("u:"+realGit))}, injected: "GIT"},
		{name: "basic to the wrong host is decoded and reported", host: "api.example.com",
			req:  req{url: "/", header: map[string]string{"Authorization": basic("u", ph["GIT"])}},
			want: map[string]string{"Authorization": basic("u", ph["GIT"])}, misuse: "GIT in header Authorization"},
		{name: "body", host: "body.example.com",
			req:      req{method: "POST", url: "/", body: `{"token":"` + ph["BODY"] + `"}`},
			wantBody: `{"token":"` + realBody + `"}`, injected: "BODY"},
		{name: "body not allowed on another host", host: "api.example.com",
			req:      req{method: "POST", url: "/", body: `{"token":"` + ph["BODY"] + `"}`},
			wantBody: `{"token":"` + ph["BODY"] + `"}`},
		{name: "body host: placeholder of another credential in the body", host: "body.example.com",
			req:      req{method: "POST", url: "/", body: "k=" + ph["API"]},
			wantBody: "k=" + ph["API"], misuse: "API in body"},
		{name: "wildcard matches a subdomain", host: "a.b.wild.example.com",
			req:  req{url: "/", header: map[string]string{"X-Token": ph["WILD"]}},
			want: map[string]string{"X-Token": realWild}, injected: "WILD"},
		{name: "wildcard does not match the apex", host: "wild.example.com",
			req:  req{url: "/", header: map[string]string{"X-Token": ph["WILD"]}},
			want: map[string]string{"X-Token": ph["WILD"]}, misuse: "WILD in header X-Token"},
		{name: "suffix trick", host: "evilwild.example.com",
			req:  req{url: "/", header: map[string]string{"X-Token": ph["WILD"]}},
			want: map[string]string{"X-Token": ph["WILD"]}, misuse: "WILD"},
		{name: "no placeholder: no details", host: "api.example.com",
			req:  req{url: "/", header: map[string]string{"X-Api-Key": "their-own-key"}},
			want: map[string]string{"X-Api-Key": "their-own-key"}},
		{name: "placeholder in a header name", host: "api.example.com",
			req:    req{url: "/", header: map[string]string{"X-" + ph["API"]: "1"}},
			misuse: "API in header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.req.method
			if method == "" {
				method = "GET"
			}
			var body io.Reader
			if tt.req.body != "" {
				body = strings.NewReader(tt.req.body)
			}
			r := httptest.NewRequest(method, "https://"+strings.TrimSuffix(tt.host, ".")+tt.req.url, body)
			for k, v := range tt.req.header {
				r.Header.Set(k, v)
			}
			details, err := set.Modify(r, tt.host)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				got := r.Header.Get(k)
				if strings.HasSuffix(v, "ghs_REALrotating") {
					if !strings.HasPrefix(got, v) {
						t.Errorf("%s = %q, want prefix %q", k, got, v)
					}
					continue
				}
				if got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tt.wantBasicPass != "" {
				if _, pass, ok := r.BasicAuth(); !ok || !strings.HasPrefix(pass, tt.wantBasicPass) {
					t.Errorf("Basic password = %q, want prefix %q", pass, tt.wantBasicPass)
				}
			}
			if tt.wantBody != "" {
				b, _ := io.ReadAll(r.Body)
				if string(b) != tt.wantBody || r.ContentLength != int64(len(b)) {
					t.Errorf("body = %q (length %d), want %q", b, r.ContentLength, tt.wantBody)
				}
			}
			if details[DetailInjected] != tt.injected {
				t.Errorf("injected = %q, want %q", details[DetailInjected], tt.injected)
			}
			if got := details[DetailMisuse]; tt.misuse == "" && got != "" || !strings.Contains(got, tt.misuse) {
				t.Errorf("misuse = %q, want %q", got, tt.misuse)
			}
			for k, v := range details {
				for _, real := range []string{realAPI, realGit, realBody, realWild, "REAL"} {
					if strings.Contains(k+v, real) {
						t.Errorf("audit detail %s=%s holds a real value", k, v)
					}
				}
			}
		})
	}
}

// TestModifyRefreshingSource: the placeholder stays the same for the run
// while the real value the gateway injects changes; a failing source
// refuses the request without a value in the error.
func TestModifyRefreshingSource(t *testing.T) {
	set, ph, gh := testSet(t)
	seen := map[string]bool{}
	for range 3 {
		r := httptest.NewRequest("GET", "https://github.example.com/", nil)
		r.Header.Set("Authorization", "Bearer "+ph["GH"])
		if _, err := set.Modify(r, "github.example.com"); err != nil {
			t.Fatal(err)
		}
		seen[r.Header.Get("Authorization")] = true
	}
	if len(seen) != 3 {
		t.Fatalf("injected values %v: want a fresh value on each request", seen)
	}
	if env := set.Env(); !strings.Contains(strings.Join(env, "\n"), "GH="+ph["GH"]) {
		t.Fatalf("placeholder changed: %v", env)
	}
	gh.fail.Store(true)
	r := httptest.NewRequest("GET", "https://github.example.com/", nil)
	r.Header.Set("Authorization", "Bearer "+ph["GH"])
	if _, err := set.Modify(r, "github.example.com"); err == nil || !strings.Contains(err.Error(), "credential GH: minting failed") {
		t.Fatalf("err = %v, want the source's failure", err)
	}
	// A request without the placeholder does not need the source.
	r = httptest.NewRequest("GET", "https://github.example.com/", nil)
	if _, err := set.Modify(r, "github.example.com"); err != nil {
		t.Fatalf("a request without the placeholder failed: %v", err)
	}
	if err := set.Close(context.Background()); err != nil || gh.closed.Load() != 1 {
		t.Fatalf("Close = %v, closed %d times", err, gh.closed.Load())
	}
	_ = set.Close(context.Background())
	if gh.closed.Load() != 1 {
		t.Fatalf("second Close closed the source again")
	}
}

func TestModifyLargeBodyNotSearched(t *testing.T) {
	set, ph, _ := testSet(t)
	big := strings.Repeat("x", MaxBodyBytes) + ph["BODY"]
	r := httptest.NewRequest("POST", "https://body.example.com/", strings.NewReader(big))
	details, err := set.Modify(r, "body.example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	if string(b) != big {
		t.Fatalf("large body changed (len %d, want %d)", len(b), len(big))
	}
	if details[DetailBodySkipped] == "" || details[DetailInjected] != "" {
		t.Fatalf("details = %v", details)
	}
}

func TestModifyConcurrent(t *testing.T) {
	set, ph, _ := testSet(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				r := httptest.NewRequest("GET", "https://api.example.com/", nil)
				r.Header.Set("X-Api-Key", ph["API"])
				if _, err := set.Modify(r, "api.example.com"); err != nil || r.Header.Get("X-Api-Key") != realAPI {
					t.Errorf("concurrent Modify: %v %q", err, r.Header.Get("X-Api-Key"))
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestEnvAndHosts(t *testing.T) {
	set, ph, _ := testSet(t)
	if len(set.Env()) != 5 {
		t.Fatalf("Env = %v", set.Env())
	}
	for name, p := range ph {
		if strings.Contains(p, "REAL") || p == "" {
			t.Errorf("%s placeholder %q", name, p)
		}
	}
	if !strings.HasPrefix(ph["API"], "sk-ant-api03-") || len(ph["API"]) != len(realAPI) || !strings.HasPrefix(ph["GIT"], "ghp_") {
		t.Errorf("placeholders do not imitate the format: %v", ph)
	}
	want := "*.wild.example.com api.example.com api.github.example.com body.example.com git.example.com github.example.com"
	if got := strings.Join(set.Hosts(), " "); got != want {
		t.Errorf("Hosts = %q, want %q", got, want)
	}
}

func TestPrepareRefuses(t *testing.T) {
	env := []string{"K=value-of-k"}
	src := FromEnv(env, "K")
	ok := Inject{Hosts: []string{"a.example.com"}, Header: "X-K"}
	tests := []struct {
		name string
		spec []Spec
		err  string
	}{
		{"missing source value", []Spec{{Name: "M", Source: FromEnv(env, "M"), Inject: ok}}, "M is not set"},
		{"no source", []Spec{{Name: "K", Inject: ok}}, "no source"},
		{"bad name", []Spec{{Name: "K-1", Source: src, Inject: ok}}, "environment variable name"},
		{"no hosts", []Spec{{Name: "K", Source: src, Inject: Inject{Header: "X"}}}, "no hosts"},
		{"bad host", []Spec{{Name: "K", Source: src, Inject: Inject{Hosts: []string{"a.*.com"}, Header: "X"}}}, "host pattern"},
		{"bare wildcard", []Spec{{Name: "K", Source: src, Inject: Inject{Hosts: []string{"*"}, Header: "X"}}}, "host pattern"},
		{"no place", []Spec{{Name: "K", Source: src, Inject: Inject{Hosts: []string{"a.example.com"}}}}, "no place"},
		{"bad scheme", []Spec{{Name: "K", Source: src, Inject: Inject{Hosts: []string{"a.example.com"}, Scheme: "digest"}}}, "unknown scheme"},
		{"bad header", []Spec{{Name: "K", Source: src, Inject: Inject{Hosts: []string{"a.example.com"}, Header: "X K"}}}, "not a header name"},
		{"failing command", []Spec{{Name: "C", Source: FromCommand([]string{"sh", "-c", "echo value-of-k; exit 7"}, nil, nil), Inject: ok}},
			"credential C: credential command sh: exit status 7"},
		{"duplicate", []Spec{{Name: "K", Source: src, Inject: ok}, {Name: "K", Source: src, Inject: ok}}, "both set K"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closed := &rotating{}
			specs := append(tt.spec, Spec{Name: "OTHER", Source: closed, Inject: ok})
			_, err := Prepare(context.Background(), specs)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
			if strings.Contains(err.Error(), "value-of-k") {
				t.Fatalf("error holds a value: %v", err)
			}
			if closed.closed.Load() != 1 {
				t.Fatalf("a failed Prepare did not close the sources")
			}
		})
	}
	if _, err := Prepare(context.Background(), []Spec{{Name: "K", Source: src, Inject: ok}}); err != nil {
		t.Fatalf("the same source, valid: %v", err)
	}
}

// TestModifyAWS: through the Set, a request signed with the placeholder keys
// is re-signed on a bound host, refused when it cannot be, and left alone
// when signed with other keys; the placeholder secret key sent anywhere is
// misuse.
func TestModifyAWS(t *testing.T) {
	real := awssig.Keys{AccessKeyID: "AKIAREALREALREAL9876", SecretAccessKey: "REALsecretREALsecretREALsecretREALsecret"}
	set, err := Prepare(context.Background(), []Spec{{Name: "AWS", AWS: staticKeys(real), Inject: Inject{Hosts: []string{"*.amazonaws.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range set.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if _, has := env["AWS_SESSION_TOKEN"]; has || len(env) != 2 || !strings.HasPrefix(env["AWS_ACCESS_KEY_ID"], "AKIA") {
		t.Fatalf("Env = %v", set.Env())
	}
	ph := awssig.Keys{AccessKeyID: env["AWS_ACCESS_KEY_ID"], SecretAccessKey: env["AWS_SECRET_ACCESS_KEY"]}
	req := func(keys awssig.Keys, payload string) *http.Request {
		r := httptest.NewRequest("GET", "https://s3.amazonaws.com/bucket/key", nil)
		signForTest(t, r, keys)
		if payload != "" {
			r.Header.Set("X-Amz-Content-Sha256", payload)
		}
		return r
	}
	r := req(ph, "")
	d, err := set.Modify(r, "s3.amazonaws.com")
	if err != nil || d[DetailInjected] != "AWS" || d[DetailMisuse] != "" || !strings.Contains(r.Header.Get("Authorization"), "Credential="+real.AccessKeyID+"/") {
		t.Fatalf("bound host: %v %v %q", d, err, r.Header.Get("Authorization"))
	}
	// S3's errors quote the access key id they were signed with: it must come back as the placeholder.
	reds := set.Redactions("bucket.s3.amazonaws.com")
	if !slices.Contains(reds, redact.Pair{Secret: real.AccessKeyID, Replacement: ph.AccessKeyID}) {
		t.Fatalf("Redactions after re-signing = %v", reds)
	}
	r = req(ph, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
	if _, err := set.Modify(r, "s3.amazonaws.com"); err == nil || !strings.Contains(err.Error(), "credential AWS:") {
		t.Fatalf("signed chunks: err = %v, want a refusal", err)
	}
	other := awssig.Keys{AccessKeyID: "AKIAOTHEROTHEROTHER1", SecretAccessKey: strings.Repeat("o", 40)}
	r = req(other, "")
	before := r.Header.Get("Authorization")
	if d, err := set.Modify(r, "s3.amazonaws.com"); err != nil || d != nil || r.Header.Get("Authorization") != before {
		t.Fatalf("other keys: %v %v", d, err)
	}
	r = httptest.NewRequest("POST", "https://paste.example.com/?k="+ph.SecretAccessKey, nil)
	if d, err := set.Modify(r, "paste.example.com"); err != nil || d[DetailMisuse] != "AWS in URL" {
		t.Fatalf("secret key placeholder sent elsewhere: %v %v", d, err)
	}
}

// TestModifyBasicUserColon: a value holding ':' cannot be a Basic user name
// (it would split differently upstream); the request is refused, while the
// same value as the password goes through.
func TestModifyBasicUserColon(t *testing.T) {
	set, err := Prepare(context.Background(), []Spec{{Name: "P", Source: FromEnv([]string{"P=user:colon-REAL-0123456789abcdef"}, "P"),
		Inject: Inject{Hosts: []string{"git.example.com"}, Scheme: SchemeBasic}}})
	if err != nil {
		t.Fatal(err)
	}
	ph := strings.TrimPrefix(set.Env()[0], "P=")
	r := httptest.NewRequest("GET", "https://git.example.com/", nil)
	r.SetBasicAuth(ph, "x")
	if _, err := set.Modify(r, "git.example.com"); err == nil || strings.Contains(err.Error(), "REAL") {
		t.Fatalf("user name with ':': err = %v", err)
	}
	r = httptest.NewRequest("GET", "https://git.example.com/", nil)
	r.SetBasicAuth("x", ph)
	if _, err := set.Modify(r, "git.example.com"); err != nil {
		t.Fatal(err)
	}
	if u, p, _ := r.BasicAuth(); u != "x" || p != "user:colon-REAL-0123456789abcdef" {
		t.Fatalf("password with ':': %q %q", u, p)
	}
}

// TestRedactions: what Modify sent to a host is listed, with the sandbox's placeholder, for that
// host's answers only, and only once it was sent; Basic credentials in their encoded form too.
func TestRedactions(t *testing.T) {
	set, ph, _ := testSet(t)
	if got := set.Redactions("api.example.com"); len(got) != 0 {
		t.Fatalf("before any request: %v", got)
	}
	modify := func(host string, h http.Header) {
		t.Helper()
		r := httptest.NewRequest("GET", "https://"+host+"/", nil)
		r.Header = h
		if _, err := set.Modify(r, host); err != nil {
			t.Fatal(err)
		}
	}
	modify("api.example.com", http.Header{"X-Api-Key": {ph["API"]}})
	modify("git.example.com", http.Header{"Authorization": {basic("x-access-token", ph["GIT"])}})
	modify("evil.example.com", http.Header{"X-Api-Key": {ph["WILD"]}}) // not bound: nothing sent

	has := func(host, secret, replacement string) bool {
		for _, p := range set.Redactions(host) {
			if p.Secret == secret && p.Replacement == replacement {
				return true
			}
		}
		return false
	}
	if !has("api.example.com", realAPI, ph["API"]) || !has("API.Example.COM.", realAPI, ph["API"]) {
		t.Errorf("api.example.com: %v", set.Redactions("api.example.com"))
	}
	sentBasic := strings.TrimPrefix(basic("x-access-token", realGit), "Basic ")
	if !has("git.example.com", realGit, ph["GIT"]) || !has("git.example.com", sentBasic, strings.TrimPrefix(basic("x-access-token", ph["GIT"]), "Basic ")) {
		t.Errorf("git.example.com: %v", set.Redactions("git.example.com"))
	}
	for _, host := range []string{"git.example.com", "evil.example.com", "x.wild.example.com"} {
		for _, p := range set.Redactions(host) {
			if p.Secret == realAPI {
				t.Errorf("%s lists API's value, which only api.example.com was sent", host)
			}
		}
	}
	if got := set.Redactions("x.wild.example.com"); len(got) != 0 {
		t.Errorf("WILD was never sent, yet: %v", got)
	}
}
