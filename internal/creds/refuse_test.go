package creds

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
)

// TestModifyRefusesCleartextAndRanges: a request that would carry a value is refused when it goes out
// in cleartext, or asks for part of an answer without Inject.Ranges; the placeholder stays, no value
// is fetched, and the details say why. The same request over https without Range is the control.
func TestModifyRefusesCleartextAndRanges(t *testing.T) {
	set, ph, gh := testSet(t)
	env := []string{"RANGED=" + realAPI}
	ranged, err := Prepare(context.Background(), []Spec{
		{Name: "RANGED", Source: FromEnv(env, "RANGED"), Inject: Inject{Hosts: []string{"media.example.com"}, Header: "X-Key", Ranges: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rph := strings.TrimPrefix(ranged.Env()[0], "RANGED=")
	for _, tc := range []struct {
		name, url, host string
		set             *Set
		header          [2]string
		extra           [2]string
		body            string
		detail, errHas  string // "" detail: injected
	}{
		{name: "https header", url: "https://api.example.com/", host: "api.example.com", header: [2]string{"X-Api-Key", ph["API"]}},
		{name: "http header", url: "http://api.example.com:443/", host: "api.example.com", header: [2]string{"X-Api-Key", ph["API"]},
			detail: DetailCleartext, errHas: "credential API is sent only over TLS (use https://)"},
		{name: "origin form (no scheme) is cleartext", url: "/", host: "api.example.com", header: [2]string{"X-Api-Key", ph["API"]},
			detail: DetailCleartext, errHas: "only over TLS"},
		{name: "http bearer", url: "http://github.example.com/", host: "github.example.com", header: [2]string{"Authorization", "Bearer " + ph["GH"]},
			detail: DetailCleartext, errHas: "credential GH is sent only over TLS"},
		{name: "http basic", url: "http://git.example.com/", host: "git.example.com", header: [2]string{"Authorization", basic("x", ph["GIT"])},
			detail: DetailCleartext, errHas: "credential GIT"},
		{name: "http body", url: "http://body.example.com/", host: "body.example.com", body: "k=" + ph["BODY"],
			detail: DetailCleartext, errHas: "credential BODY"},
		{name: "http without the placeholder goes on", url: "http://api.example.com/", host: "api.example.com", header: [2]string{"X-Api-Key", "none"},
			detail: "none"},
		{name: "http placeholder elsewhere is misuse", url: "http://api.example.com/", host: "api.example.com", header: [2]string{"X-Other", ph["API"]},
			detail: DetailMisuse},
		{name: "range", url: "https://api.example.com/", host: "api.example.com", header: [2]string{"X-Api-Key", ph["API"]}, extra: [2]string{"Range", "bytes=0-3"},
			detail: DetailRange, errHas: "credential API is not sent with Range"},
		{name: "if-range", url: "https://github.example.com/", host: "github.example.com", header: [2]string{"Authorization", "Bearer " + ph["GH"]}, extra: [2]string{"If-Range", `"x"`},
			detail: DetailRange, errHas: "ranges: true"},
		{name: "request-range", url: "https://api.example.com/", host: "api.example.com", header: [2]string{"X-Api-Key", ph["API"]}, extra: [2]string{"Request-Range", "bytes=0-3"},
			detail: DetailRange, errHas: "Request-Range"},
		{name: "range without the placeholder", url: "https://api.example.com/", host: "api.example.com", header: [2]string{"X-Api-Key", "none"}, extra: [2]string{"Range", "bytes=0-3"},
			detail: "none"},
		{name: "range allowed", url: "https://media.example.com/", host: "media.example.com", set: ranged, header: [2]string{"X-Key", rph}, extra: [2]string{"Range", "bytes=0-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := set
			if tc.set != nil {
				s = tc.set
			}
			var r = httptest.NewRequest("POST", tc.url, strings.NewReader(tc.body))
			if tc.url == "/" {
				r.URL.Scheme, r.URL.Host = "", "" // as a server reads an origin-form request
			}
			if tc.header[0] != "" {
				r.Header.Set(tc.header[0], tc.header[1])
			}
			if tc.extra[0] != "" {
				r.Header.Set(tc.extra[0], tc.extra[1])
			}
			before := gh.n.Load()
			details, err := s.Modify(r, tc.host)
			switch tc.detail {
			case "":
				if err != nil || details[DetailInjected] == "" {
					t.Fatalf("not injected: %v %v", details, err)
				}
				return
			case "none", DetailMisuse:
				if err != nil || details[DetailInjected] != "" || (tc.detail == DetailMisuse) != (details[DetailMisuse] != "") {
					t.Fatalf("details %v, err %v", details, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || details[tc.detail] == "" || details[DetailInjected] != "" {
				t.Fatalf("want a refusal %q with %s: details %v, err %v", tc.errHas, tc.detail, details, err)
			}
			if gh.n.Load() != before {
				t.Errorf("the source was asked for a value the request was refused")
			}
			for _, real := range []string{realAPI, realGit, realBody, "REAL"} {
				if strings.Contains(err.Error()+r.Header.Get(tc.header[0])+r.Header.Get("Authorization"), real) {
					t.Fatalf("a real value was put in or reported: %v", err)
				}
			}
			if tc.header[0] != "" && r.Header.Get(tc.header[0]) != tc.header[1] {
				t.Errorf("the refused request was changed: %q", r.Header.Get(tc.header[0]))
			}
		})
	}
}

// TestModifyAWSCleartextAndRanges: a request signed with the placeholder keys is not re-signed over
// plain HTTP, nor with Range unless allowed.
func TestModifyAWSCleartextAndRanges(t *testing.T) {
	real := awssig.Keys{AccessKeyID: "AKIAREALREALREAL9876", SecretAccessKey: "REALsecretREALsecretREALsecretREALsecret"}
	for _, tc := range []struct {
		url, rng string
		ranges   bool
		detail   string
	}{
		{"http://s3.amazonaws.com:443/bucket/key", "", false, DetailCleartext},
		{"https://s3.amazonaws.com/bucket/key", "bytes=0-9", false, DetailRange},
		{"https://s3.amazonaws.com/bucket/key", "bytes=0-9", true, ""},
		{"https://s3.amazonaws.com/bucket/key", "", false, ""},
	} {
		set, err := Prepare(context.Background(), []Spec{{Name: "AWS", AWS: staticKeys(real), Inject: Inject{Hosts: []string{"*.amazonaws.com"}, Ranges: tc.ranges}}})
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range set.Env() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		r := httptest.NewRequest("GET", tc.url, nil)
		if tc.rng != "" {
			r.Header.Set("Range", tc.rng)
		}
		signForTest(t, r, awssig.Keys{AccessKeyID: env["AWS_ACCESS_KEY_ID"], SecretAccessKey: env["AWS_SECRET_ACCESS_KEY"]})
		details, err := set.Modify(r, "s3.amazonaws.com")
		if tc.detail == "" {
			if err != nil || details[DetailInjected] != "AWS" || !strings.Contains(r.Header.Get("Authorization"), real.AccessKeyID) {
				t.Errorf("%s range=%q: not re-signed: %v %v", tc.url, tc.rng, details, err)
			}
			continue
		}
		if err == nil || details[tc.detail] != "AWS" || strings.Contains(r.Header.Get("Authorization"), real.AccessKeyID) {
			t.Errorf("%s range=%q: want refusal %s: %v %v (%s)", tc.url, tc.rng, tc.detail, details, err, r.Header.Get("Authorization"))
		}
	}
}
