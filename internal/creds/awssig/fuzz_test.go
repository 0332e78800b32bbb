package awssig

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseAuthorization: any header value is parsed without panicking, and
// what parses cleanly holds only well-formed parts.
func FuzzParseAuthorization(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string) {
		a, ok, err := ParseAuthorization(v)
		if !ok || err != nil {
			return
		}
		for _, s := range []string{a.AccessKeyID, a.Date, a.Region, a.Service} {
			if s == "" || strings.ContainsAny(s, "/,") {
				t.Fatalf("malformed part %q accepted from %q", s, v)
			}
		}
		if len(a.Signature) != 64 || len(a.SignedHeaders) == 0 {
			t.Fatalf("malformed signature or headers accepted from %q", v)
		}
	})
}

// FuzzResign: whatever the Authorization, date, payload hash, token and
// path, Resign does not panic, leaves requests not signed with the
// placeholder as they were, and what it re-signs verifies with the real
// keys and carries no placeholder. "{ID}" and "{TOKEN}" in the inputs stand
// for the placeholder access key id and session token.
func FuzzResign(f *testing.F) {
	real := Keys{AccessKeyID: "AKIAREALREALREAL1234", SecretAccessKey: "REALsecretREALsecretREALsecretREALsecret", SessionToken: "REALtoken"}
	ph, rs := newResigner(f, real)
	expand := strings.NewReplacer("{ID}", ph.AccessKeyID, "{TOKEN}", ph.SessionToken).Replace
	f.Fuzz(func(t *testing.T, auth, date, payload, token, path, query string) {
		auth, token, query = expand(auth), expand(token), expand(query)
		r := &http.Request{Method: "PUT", URL: &url.URL{Path: "/" + path, RawQuery: query}, Host: "s3.example.com", Header: http.Header{}, Body: http.NoBody}
		for k, v := range map[string]string{"Authorization": auth, "X-Amz-Date": date, "X-Amz-Content-Sha256": payload, "X-Amz-Security-Token": token} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		before := r.Header.Clone()
		ok, err := rs.Resign(r)
		if err != nil && (strings.Contains(err.Error(), real.SecretAccessKey) || strings.Contains(err.Error(), real.SessionToken)) {
			t.Fatalf("error holds a secret: %v", err)
		}
		if !ok {
			if r.Header.Get("Authorization") != before.Get("Authorization") || r.Header.Get("X-Amz-Security-Token") != before.Get("X-Amz-Security-Token") {
				t.Fatalf("a request that was not re-signed was changed")
			}
			return
		}
		if err != nil {
			t.Fatalf("re-signed and failed: %v", err)
		}
		got := r.Header.Get("Authorization") + r.Header.Get("X-Amz-Security-Token")
		if strings.Contains(got, ph.AccessKeyID) || strings.Contains(got, ph.SessionToken) {
			t.Fatalf("re-signed request still holds a placeholder: %q", got)
		}
		if err := verifySigV4(r, nil, real.AccessKeyID, real.SecretAccessKey, ""); err != nil {
			t.Fatalf("re-signed request does not verify: %v (Authorization %q)", err, r.Header.Get("Authorization"))
		}
	})
}
