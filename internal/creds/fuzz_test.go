package creds

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzModify attacks placeholder substitution: whatever the host, headers,
// Authorization values (Basic encoded or not) and query, a real value ends
// up in the request only on its bound host and only in its allowed place,
// never in audit details; the body's Content-Length follows substitution;
// and a placeholder sent to an unbound host is always reported. In the
// inputs "{API}", "{GH}", "{GIT}" and "{BODY}" stand for the placeholders,
// so the fuzzer can place them.
func FuzzModify(f *testing.F) {
	env := []string{"API=" + realAPI, "GIT=" + realGit, "GH=" + realWild, "BODY=" + realBody}
	set, err := Prepare(context.Background(), []Spec{
		{Name: "API", Source: FromEnv(env, "API"), Inject: Inject{Hosts: []string{"api.example.com"}, Header: "x-api-key"}},
		{Name: "GH", Source: FromEnv(env, "GH"), Inject: Inject{Hosts: []string{"*.gh.example.com"}, Scheme: SchemeBearer}},
		{Name: "GIT", Source: FromEnv(env, "GIT"), Inject: Inject{Hosts: []string{"git.example.com"}, Scheme: SchemeBasic}},
		{Name: "BODY", Source: FromEnv(env, "BODY"), Inject: Inject{Hosts: []string{"api.example.com", "git.example.com"}, Body: true}},
	})
	if err != nil {
		f.Fatal(err)
	}
	ph := map[string]string{}
	for _, kv := range set.Env() {
		k, v, _ := strings.Cut(kv, "=")
		ph[k] = v
	}
	expand := func(s string) string {
		return strings.NewReplacer("{API}", ph["API"], "{GH}", ph["GH"], "{GIT}", ph["GIT"], "{BODY}", ph["BODY"]).Replace(s)
	}
	reals := map[string]string{"API": realAPI, "GH": realWild, "GIT": realGit, "BODY": realBody}
	bound := map[string]func(host string) bool{
		"API":  func(h string) bool { return h == "api.example.com" },
		"GH":   func(h string) bool { return strings.HasSuffix(h, ".gh.example.com") },
		"GIT":  func(h string) bool { return h == "git.example.com" },
		"BODY": func(h string) bool { return h == "api.example.com" || h == "git.example.com" },
	}
	f.Fuzz(func(t *testing.T, host, apiKey, auth, basicUser, basicPass, query, body string) {
		apiKey, auth, basicUser, basicPass, query, body = expand(apiKey), expand(auth), expand(basicUser), expand(basicPass), expand(query), expand(body)
		input := host + apiKey + auth + basicUser + basicPass + query + body
		r := &http.Request{Method: "POST", URL: &url.URL{Path: "/", RawQuery: query}, Host: host, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
		if apiKey != "" {
			r.Header.Set("X-Api-Key", apiKey)
		}
		if auth != "" {
			r.Header.Add("Authorization", auth)
		}
		if basicUser != "" || basicPass != "" {
			r.Header.Add("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basicUser+":"+basicPass)))
		}
		details, err := set.Modify(r, host)
		if err != nil {
			return
		}
		norm := strings.ToLower(strings.TrimSuffix(host, "."))
		for name, real := range reals {
			for k, v := range details {
				if strings.Contains(k+v, real) {
					t.Fatalf("audit detail %s=%q holds %s's value", k, v, name)
				}
			}
			if strings.Contains(input, real) || strings.Contains(decodeAll(input), real) {
				continue // the fuzzer wrote the value itself
			}
			for k, vs := range r.Header {
				for _, v := range vs {
					if !strings.Contains(v, real) && !strings.Contains(decodeAll(v), real) {
						continue
					}
					allowed := bound[name](norm) && (name == "API" && k == "X-Api-Key" || name != "API" && k == "Authorization")
					if !allowed {
						t.Fatalf("%s's value sent to %q in header %s", name, host, k)
					}
				}
			}
			if strings.Contains(r.URL.String(), real) {
				t.Fatalf("%s's value put into the URL", name)
			}
			sent, err := io.ReadAll(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			r.Body = io.NopCloser(bytes.NewReader(sent))
			if strings.Contains(string(sent), real) && (name != "BODY" || !bound[name](norm)) {
				t.Fatalf("%s's value sent to %q in the body", name, host)
			}
			if r.ContentLength != int64(len(sent)) {
				t.Fatalf("Content-Length %d for a body of %d bytes", r.ContentLength, len(sent))
			}
		}
		// A placeholder in a header sent to a host no credential is bound to
		// is always reported.
		if norm == "evil.example.com" {
			for _, p := range ph {
				if (strings.Contains(apiKey, p) || strings.Contains(auth, p)) && details[DetailMisuse] == "" {
					t.Fatalf("placeholder sent to an unbound host, not reported: %v", details)
				}
			}
		}
	})
}

// decodeAll decodes every Basic credential found in s, so that a value
// hidden in base64 is still seen.
func decodeAll(s string) string {
	var out []string
	for _, word := range strings.Fields(s) {
		if b, err := base64.StdEncoding.DecodeString(word); err == nil {
			out = append(out, string(b))
		} else if b, err := base64.RawStdEncoding.DecodeString(word); err == nil {
			out = append(out, string(b))
		}
	}
	return strings.Join(out, " ")
}
