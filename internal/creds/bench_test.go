package creds

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
)

// BenchmarkModify measures Set.Modify on a typical request (a dozen headers,
// five credentials) against cloning the same request, which a reverse proxy
// does for every request anyway; the ratio is reported as modify/clone.
func BenchmarkModify(b *testing.B) {
	env := []string{"API=" + realAPI, "GIT=" + realGit, "BODY=" + realBody, "WILD=" + realWild}
	set, err := Prepare(context.Background(), []Spec{
		{Name: "API", Source: FromEnv(env, "API"), Inject: Inject{Hosts: []string{"api.example.com"}, Header: "x-api-key"}},
		{Name: "GIT", Source: FromEnv(env, "GIT"), Inject: Inject{Hosts: []string{"git.example.com"}, Scheme: SchemeBasic}},
		{Name: "BODY", Source: FromEnv(env, "BODY"), Inject: Inject{Hosts: []string{"body.example.com"}, Body: true}},
		{Name: "WILD", Source: FromEnv(env, "WILD"), Inject: Inject{Hosts: []string{"*.wild.example.com"}, Header: "X-Token"}},
		{Name: "AWS", AWS: staticKeys(awssig.Keys{AccessKeyID: "AKIAREALREALREAL9876", SecretAccessKey: strings.Repeat("s", 40)}), Inject: Inject{Hosts: []string{"*.amazonaws.example.com"}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ph := map[string]string{}
	for _, kv := range set.Env() {
		k, v, _ := strings.Cut(kv, "=")
		ph[k] = v
	}
	base := func(host string) *http.Request {
		r := httptest.NewRequest("GET", "https://"+host+"/v1/messages?beta=true", nil)
		for _, h := range []string{"Accept", "Accept-Encoding", "User-Agent", "Content-Type", "X-Request-Id", "Anthropic-Version", "X-Stainless-Os", "X-Stainless-Lang", "X-Stainless-Runtime"} {
			r.Header.Set(h, "some value of a typical length/1.0")
		}
		return r
	}
	api := base("api.example.com")
	api.Header.Set("X-Api-Key", ph["API"])
	git := base("git.example.com")
	git.SetBasicAuth("x-access-token", ph["GIT"])
	aws := base("s3.amazonaws.example.com")
	signForTest(b, aws, awssig.Keys{AccessKeyID: ph["AWS_ACCESS_KEY_ID"], SecretAccessKey: ph["AWS_SECRET_ACCESS_KEY"]})
	cases := []struct {
		name, host string
		req        *http.Request
	}{
		{"unbound-host", "other.example.com", base("other.example.com")},
		{"header", "api.example.com", api},
		{"basic", "git.example.com", git},
		{"aws-resign", "s3.amazonaws.example.com", aws},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var cloneNs, modifyNs time.Duration
			ctx := context.Background()
			for b.Loop() {
				start := time.Now()
				r := c.req.Clone(ctx)
				cloneNs += time.Since(start)
				start = time.Now()
				if _, err := set.Modify(r, c.host); err != nil {
					b.Fatal(err)
				}
				modifyNs += time.Since(start)
			}
			b.ReportMetric(float64(modifyNs.Nanoseconds())/float64(b.N), "ns/modify")
			b.ReportMetric(float64(cloneNs.Nanoseconds())/float64(b.N), "ns/clone")
			b.ReportMetric(float64(modifyNs)/float64(cloneNs), "modify/clone")
		})
	}
}
