package creds

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
)

// exportSpecs are static credentials of every kind Export carries: a header, the bearer and Basic
// schemes, the body, a wildcard host, a shape and Ranges.
func exportSpecs() []Spec {
	env := []string{"API=" + realAPI, "GIT=" + realGit, "BODY=" + realBody, "WILD=" + realWild, "SHAPED=shp-REALshaped0123456789abcdefghijk"}
	return []Spec{
		{Name: "API", Source: FromEnv(env, "API"), Inject: Inject{Hosts: []string{"api.example.com"}, Header: "x-api-key"}},
		{Name: "GH", Source: FromEnv(env, "GIT"), Inject: Inject{Hosts: []string{"github.example.com", "API.GitHub.example.com."}, Scheme: SchemeBearer}},
		{Name: "GIT", Source: FromEnv(env, "GIT"), Inject: Inject{Hosts: []string{"git.example.com"}, Scheme: SchemeBasic}},
		{Name: "BODY", Source: FromEnv(env, "BODY"), Inject: Inject{Hosts: []string{"body.example.com"}, Body: true}},
		{Name: "WILD", Source: FromEnv(env, "WILD"), Inject: Inject{Hosts: []string{"*.wild.example.com"}, Header: "X-Token", Ranges: true}},
		{Name: "SHAPED", Source: FromEnv(env, "SHAPED"), Shape: "shp-", Inject: Inject{Hosts: []string{"shaped.example.com"}, Header: "X-Shaped"}},
	}
}

// roundTrip exports set, sends it through JSON as the pod's Secret does, and restores it.
func roundTrip(t *testing.T, set *Set) (*Set, []Exported) {
	t.Helper()
	ex, err := set.Export()
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	b, err := json.Marshal(ex)
	if err != nil {
		t.Fatal(err)
	}
	var back []Exported
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	restored, err := Restore(context.Background(), back)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return restored, ex
}

// A restored Set is the original as far as the sandbox and the upstreams can tell: the same
// environment, the same hosts, and every request modified (or refused) alike, with the same values
// put in, the same misuse reported and the same answers redacted.
func TestRestoreModifiesAsTheOriginal(t *testing.T) {
	orig, err := Prepare(context.Background(), exportSpecs())
	if err != nil {
		t.Fatal(err)
	}
	restored, ex := roundTrip(t, orig)
	if !slices.Equal(orig.Env(), restored.Env()) {
		t.Errorf("Env differs:\n orig     %q\n restored %q", orig.Env(), restored.Env())
	}
	if !slices.Equal(orig.Hosts(), restored.Hosts()) {
		t.Errorf("Hosts differ: %q, %q", orig.Hosts(), restored.Hosts())
	}
	ph := map[string]string{}
	for _, kv := range orig.Env() {
		k, v, _ := strings.Cut(kv, "=")
		ph[k] = v
	}
	if x := ex[5]; x.Shape != "shp-" || !strings.HasPrefix(x.Placeholder, "shp-") {
		t.Errorf("the shape did not cross: %q", x.Shape)
	}

	type req struct {
		host, method, url, body string
		header                  map[string]string
	}
	reqs := map[string]req{
		"named header":            {host: "api.example.com", url: "https://api.example.com/v1", header: map[string]string{"X-Api-Key": ph["API"]}},
		"header to another host":  {host: "evil.example.com", url: "https://evil.example.com/", header: map[string]string{"X-Api-Key": ph["API"]}},
		"placeholder in the URL":  {host: "api.example.com", url: "https://api.example.com/?k=" + ph["API"]},
		"bearer, second host":     {host: "api.github.example.com", url: "https://api.github.example.com/", header: map[string]string{"Authorization": "Bearer " + ph["GH"]}},
		"bearer in basic form":    {host: "github.example.com", url: "https://github.example.com/", header: map[string]string{"Authorization": basic("x-access-token", ph["GH"])}},
		"basic password":          {host: "git.example.com", url: "https://git.example.com/r.git/info/refs", header: map[string]string{"Authorization": basic("u", ph["GIT"])}},
		"basic to another host":   {host: "api.example.com", url: "https://api.example.com/", header: map[string]string{"Authorization": basic("u", ph["GIT"])}},
		"body":                    {host: "body.example.com", method: "POST", url: "https://body.example.com/", body: `{"t":"` + ph["BODY"] + `"}`},
		"body to another host":    {host: "api.example.com", method: "POST", url: "https://api.example.com/", body: `{"t":"` + ph["BODY"] + `"}`},
		"wildcard subdomain":      {host: "a.wild.example.com", url: "https://a.wild.example.com/", header: map[string]string{"X-Token": ph["WILD"]}},
		"wildcard apex":           {host: "wild.example.com", url: "https://wild.example.com/", header: map[string]string{"X-Token": ph["WILD"]}},
		"range allowed":           {host: "a.wild.example.com", url: "https://a.wild.example.com/", header: map[string]string{"X-Token": ph["WILD"], "Range": "bytes=0-1"}},
		"range refused":           {host: "api.example.com", url: "https://api.example.com/", header: map[string]string{"X-Api-Key": ph["API"], "Range": "bytes=0-1"}},
		"cleartext refused":       {host: "api.example.com", url: "http://api.example.com/", header: map[string]string{"X-Api-Key": ph["API"]}},
		"shaped":                  {host: "shaped.example.com", url: "https://shaped.example.com/", header: map[string]string{"X-Shaped": ph["SHAPED"]}},
		"no placeholder at all":   {host: "api.example.com", url: "https://api.example.com/", header: map[string]string{"X-Api-Key": "own"}},
		"placeholder header name": {host: "api.example.com", url: "https://api.example.com/", header: map[string]string{"X-" + ph["API"]: "1"}},
	}
	type result struct {
		header  http.Header
		url     string
		body    string
		details map[string]string
		err     string
		redact  string
	}
	modify := func(set *Set, rq req) result {
		method := rq.method
		if method == "" {
			method = "GET"
		}
		var body io.Reader
		if rq.body != "" {
			body = strings.NewReader(rq.body)
		}
		r := httptest.NewRequest(method, rq.url, body)
		for k, v := range rq.header {
			r.Header.Set(k, v)
		}
		details, err := set.Modify(r, rq.host)
		res := result{header: r.Header, url: r.URL.String(), details: details}
		if err != nil {
			res.err = err.Error()
		}
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			res.body = string(b)
		}
		res.redact = fmt.Sprint(set.Redactions(rq.host))
		return res
	}
	injected := 0
	for name, rq := range reqs {
		t.Run(name, func(t *testing.T) {
			want, got := modify(orig, rq), modify(restored, rq)
			if !reflect.DeepEqual(want, got) {
				t.Errorf("restored Set modified the request otherwise:\n orig     %+v\n restored %+v", want, got)
			}
			if want.details[DetailInjected] != "" {
				injected++
			}
		})
	}
	if injected < 6 {
		t.Errorf("only %d requests had a value put in: the comparison shows little", injected)
	}
}

// A minting source's value crosses as it is when exported: the restored Set puts that token in, the
// same placeholder in its place.
func TestExportTakesAMintedValueOnce(t *testing.T) {
	gh := &rotating{}
	orig, err := Prepare(context.Background(), []Spec{{Name: "GH", Source: gh, Inject: Inject{Hosts: []string{"github.example.com"}, Scheme: SchemeBearer}}})
	if err != nil {
		t.Fatal(err)
	}
	restored, ex := roundTrip(t, orig)
	if !strings.HasPrefix(ex[0].Value, "ghs_REALrotating") || !slices.Equal(orig.Env(), restored.Env()) {
		t.Fatalf("exported %v, env %q vs %q", ex, orig.Env(), restored.Env())
	}
	_, ph, _ := strings.Cut(restored.Env()[0], "=")
	for range 2 {
		r := httptest.NewRequest("GET", "https://github.example.com/", nil)
		r.Header.Set("Authorization", "Bearer "+ph)
		if _, err := restored.Modify(r, "github.example.com"); err != nil {
			t.Fatal(err)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+ex[0].Value {
			t.Errorf("restored Set sent %q, want the exported token", got)
		}
	}
	if err := restored.Close(context.Background()); err != nil || gh.closed.Load() != 0 {
		t.Errorf("closing the restored Set: %v, source closed %d times (it must revoke nothing)", err, gh.closed.Load())
	}
}

// An AWS credential is not exported (its re-signing stays in this process), with one line saying so.
func TestExportRefusesAWS(t *testing.T) {
	set, err := Prepare(context.Background(), []Spec{{Name: "AWS", AWS: staticKeys(awssig.Keys{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}),
		Inject: Inject{Hosts: []string{"s3.amazonaws.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = set.Export()
	if err == nil || !strings.Contains(err.Error(), "Kubernetes backend does not carry AWS keys") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Export of AWS keys: %v, want one line saying the Kubernetes backend does not carry them", err)
	}
}

// Restore checks what it is given as Prepare checks a Spec, and refuses placeholders that would
// break substitution; nothing of a value appears in its errors or in fmt's output.
func TestRestoreRefuses(t *testing.T) {
	good := func() Exported {
		return Exported{Name: "API", Inject: Inject{Hosts: []string{"api.example.com"}, Header: "X-Api-Key"},
			Placeholder: "sk-ant-api03-" + strings.Repeat("p", 40), Value: realAPI}
	}
	with := func(f func(*Exported)) []Exported { x := good(); f(&x); return []Exported{x} }
	other := good()
	other.Name, other.Placeholder, other.Value = "OTHER", "sk-ant-api03-"+strings.Repeat("q", 40), "other-secret-value-0123456789abcdef"
	tests := map[string]struct {
		ex   []Exported
		want string
	}{
		"bad name":               {with(func(x *Exported) { x.Name = "1BAD" }), "environment variable name"},
		"no hosts":               {with(func(x *Exported) { x.Inject.Hosts = nil }), "no hosts"},
		"bad host":               {with(func(x *Exported) { x.Inject.Hosts = []string{"a b"} }), "host pattern"},
		"no place":               {with(func(x *Exported) { x.Inject.Header = "" }), "no place for the value"},
		"bad scheme":             {with(func(x *Exported) { x.Inject.Scheme = "digest" }), "unknown scheme"},
		"no value":               {with(func(x *Exported) { x.Value = "" }), "no value"},
		"short placeholder":      {with(func(x *Exported) { x.Placeholder = "sk-short" }), "shorter than"},
		"placeholder with space": {with(func(x *Exported) { x.Placeholder = strings.Repeat("p", 40) + " x" }), "space"},
		"placeholder with NUL":   {with(func(x *Exported) { x.Placeholder = strings.Repeat("p", 40) + "\x00" }), "printable"},
		"shape not kept":         {with(func(x *Exported) { x.Shape = "zz-" }), "shape"},
		"placeholder in value":   {with(func(x *Exported) { x.Value = "v" + x.Placeholder }), "collides"},
		"same variable twice":    {[]Exported{good(), good()}, "both set API"},
		"placeholder in another": {[]Exported{good(), func() Exported { x := other; x.Placeholder = good().Placeholder + "x"; return x }()}, "collides"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			set, err := Restore(context.Background(), tc.ex)
			if err == nil {
				t.Fatalf("Restore succeeded: %v", set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Restore: %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), realAPI) {
				t.Errorf("the error holds the value: %v", err)
			}
		})
	}
	if _, err := Restore(context.Background(), []Exported{good(), other}); err != nil {
		t.Fatalf("the control is refused: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Restore(ctx, []Exported{good()}); err == nil {
		t.Error("Restore with a cancelled context succeeded")
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if s := fmt.Sprintf(verb, []Exported{good()}); strings.Contains(s, realAPI) || strings.Contains(s, good().Placeholder) || strings.Contains(s, "7265414c") {
			t.Errorf("%s of an Exported prints its value or placeholder: %s", verb, s)
		}
	}
}
