package awssig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSTS speaks STS's query protocol: it verifies each call's signature with the base keys, checks
// the form, and answers AssumeRole with session credentials (or the error a real STS gives).
type fakeSTS struct {
	srv     *httptest.Server
	base    Keys
	session Keys
	expires time.Time

	mu    sync.Mutex
	calls []url.Values
}

func newFakeSTS(t *testing.T, base Keys) *fakeSTS {
	f := &fakeSTS{base: base, expires: time.Now().Add(time.Hour),
		session: Keys{AccessKeyID: "ASIASESSIONSESSION12", SecretAccessKey: "SESSIONsecretSESSIONsecretSESSIONsecret1", SessionToken: "SESSIONtoken" + strings.Repeat("s", 200)}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fail := func(status int, code, msg string) {
			w.WriteHeader(status)
			fmt.Fprintf(w, "<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error></ErrorResponse>", code, msg)
		}
		if err := verifySigV4(r, body, f.base.AccessKeyID, f.base.SecretAccessKey, f.base.SessionToken); err != nil {
			fail(http.StatusForbidden, "SignatureDoesNotMatch", err.Error())
			return
		}
		form, _ := url.ParseQuery(string(body))
		f.mu.Lock()
		f.calls = append(f.calls, form)
		f.mu.Unlock()
		if form.Get("Action") != "AssumeRole" || form.Get("Version") != "2011-06-15" {
			fail(http.StatusBadRequest, "InvalidAction", "unknown action")
			return
		}
		if !strings.HasPrefix(form.Get("RoleArn"), "arn:aws:iam::123456789012:role/") {
			fail(http.StatusForbidden, "AccessDenied", "not authorized to perform: sts:AssumeRole")
			return
		}
		fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>
<AssumedRoleUser><Arn>%s/%s</Arn><AssumedRoleId>AROA:%s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>`,
			f.session.AccessKeyID, f.session.SecretAccessKey, f.session.SessionToken, f.expires.UTC().Format(time.RFC3339),
			form.Get("RoleArn"), form.Get("RoleSessionName"), form.Get("RoleSessionName"))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

type staticSource Keys

func (s staticSource) Keys(context.Context) (Keys, error) { return Keys(s), nil }

// TestAssumeRole: the base keys sign one AssumeRole call, with the role, session name, duration
// and session policy asked for; the session's keys come back, and they (not the base keys) are
// what a re-signed request then carries to AWS.
func TestAssumeRole(t *testing.T) {
	for _, base := range []Keys{realKeys, {AccessKeyID: "ASIABASEBASEBASE1234", SecretAccessKey: realKeys.SecretAccessKey, SessionToken: "BASEtoken"}} {
		sts := newFakeSTS(t, base)
		policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::bucket/*"}]}`
		src := AssumeRole{Base: staticSource(base), RoleARN: "arn:aws:iam::123456789012:role/agent", SessionName: "cordon-test",
			Policy: policy, Duration: 15 * time.Minute, Endpoint: sts.srv.URL}
		got, err := src.Keys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if exp := got.Expires; exp.Sub(sts.expires).Abs() > time.Second {
			t.Fatalf("expires %v, want %v", exp, sts.expires)
		}
		if got.Expires = (time.Time{}); got != sts.session {
			t.Fatalf("got %v, want the session's keys", got)
		}
		if len(sts.calls) != 1 {
			t.Fatalf("%d calls", len(sts.calls))
		}
		c := sts.calls[0]
		if c.Get("RoleArn") != src.RoleARN || c.Get("RoleSessionName") != "cordon-test" || c.Get("DurationSeconds") != "900" || c.Get("Policy") != policy {
			t.Fatalf("STS got %v", c)
		}

		// The session's keys are what the gateway signs with.
		ph, err := NewPlaceholder(got)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ph.AccessKeyID, "ASIA") || ph.SessionToken == "" {
			t.Fatalf("placeholder for session keys: %v", ph)
		}
		rs, err := NewResigner(ph, got)
		if err != nil {
			t.Fatal(err)
		}
		aws := fakeAWS(t, sts.session)
		r, _ := http.NewRequest("GET", aws.URL+"/bucket/key", nil)
		clientSign(t, r, ph, "", "s3")
		if ok, err := rs.Resign(r); !ok || err != nil {
			t.Fatalf("Resign: %v %v", ok, err)
		}
		if status, body := send(t, r); status != 200 {
			t.Fatalf("AWS refused the session-signed request: %d %s", status, body)
		}
	}
}

func TestAssumeRoleRefusals(t *testing.T) {
	sts := newFakeSTS(t, realKeys)
	good := AssumeRole{Base: staticSource(realKeys), RoleARN: "arn:aws:iam::123456789012:role/agent", SessionName: "s", Endpoint: sts.srv.URL}
	tests := []struct {
		name  string
		edit  func(*AssumeRole)
		setup func()
		want  string
	}{
		{"STS refuses the role", func(a *AssumeRole) { a.RoleARN = "arn:aws:iam::999999999999:role/other" }, nil, "AccessDenied"},
		{"wrong base keys", func(a *AssumeRole) {
			a.Base = staticSource(Keys{AccessKeyID: "AKIAOTHEROTHEROTHER1", SecretAccessKey: strings.Repeat("o", 40)})
		}, nil, "SignatureDoesNotMatch"},
		{"duration too short", func(a *AssumeRole) { a.Duration = time.Minute }, nil, "outside AWS's"},
		{"expired credentials", nil, func() { sts.expires = time.Now().Add(-time.Minute) }, "not in the future"},
		{"no endpoint", func(a *AssumeRole) { a.Endpoint = "http://127.0.0.1:1" }, nil, "connect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := good
			if tc.edit != nil {
				tc.edit(&a)
			}
			if tc.setup != nil {
				tc.setup()
			}
			_, err := a.Keys(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "assuming AWS role") {
				t.Fatalf("err = %v, want one about %q", err, tc.want)
			}
			for _, secret := range []string{realKeys.SecretAccessKey, sts.session.SecretAccessKey, sts.session.SessionToken} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error holds a secret: %v", err)
				}
			}
		})
	}
	if s := fmt.Sprintf("%v %+v %#v", good, good, good); strings.Contains(s, realKeys.SecretAccessKey) {
		t.Fatalf("AssumeRole prints its base keys: %s", s)
	}
}

// countingSource hands out keys, counting calls, or fails.
type countingSource struct {
	mu    sync.Mutex
	calls int
	keys  Keys
	err   error
}

func (c *countingSource) Keys(context.Context) (Keys, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.keys, c.err
}

// TestResignerRefresh: keys that are about to expire are renewed before a request is signed, the
// placeholder staying the same; a failed renewal keeps keys that still work and refuses the request
// once they do not; keys without an expiry are never renewed.
func TestResignerRefresh(t *testing.T) {
	first := Keys{AccessKeyID: "ASIAFIRSTFIRSTFIRST1", SecretAccessKey: strings.Repeat("f", 40), SessionToken: "FIRSTtoken", Expires: time.Now().Add(time.Hour)}
	second := Keys{AccessKeyID: "ASIASECONDSECONDSEC2", SecretAccessKey: strings.Repeat("s", 40), SessionToken: "SECONDtoken", Expires: time.Now().Add(2 * time.Hour)}
	ph, rs := newResigner(t, first)
	src := &countingSource{keys: second}
	rs.RefreshFrom(src)
	resign := func(upstream Keys) (int, string) {
		t.Helper()
		aws := fakeAWS(t, upstream)
		r, _ := http.NewRequest("GET", aws.URL+"/bucket/key", nil)
		clientSign(t, r, ph, "", "s3")
		if ok, err := rs.Resign(r); !ok || err != nil {
			return 0, fmt.Sprint(ok, err)
		}
		return send(t, r)
	}
	if status, body := resign(first); status != 200 || src.calls != 0 {
		t.Fatalf("fresh keys: %d %s, %d renewals", status, body, src.calls)
	}
	rs.now = func() time.Time { return first.Expires.Add(-time.Minute) } // within refreshBefore
	if status, body := resign(second); status != 200 || src.calls != 1 || rs.Current().AccessKeyID != second.AccessKeyID {
		t.Fatalf("about to expire: %d %s, %d renewals", status, body, src.calls)
	}

	// Renewal fails: the current keys serve while they work, then requests are refused.
	src.err = errors.New("STS unreachable")
	rs.now = func() time.Time { return second.Expires.Add(-time.Minute) }
	if status, body := resign(second); status != 200 {
		t.Fatalf("renewal failed, keys still valid: %d %s", status, body)
	}
	rs.now = func() time.Time { return second.Expires.Add(time.Minute) }
	if status, body := resign(second); status != 0 || !strings.Contains(body, "expired") {
		t.Fatalf("renewal failed, keys expired: %d %s", status, body)
	}

	// Static keys are never renewed.
	static, _ := NewResigner(ph, Keys{AccessKeyID: first.AccessKeyID, SecretAccessKey: first.SecretAccessKey, SessionToken: first.SessionToken})
	src2 := &countingSource{keys: second}
	static.RefreshFrom(src2)
	static.now = func() time.Time { return time.Now().Add(100 * time.Hour) }
	if _, err := static.keys(context.Background()); err != nil || src2.calls != 0 {
		t.Fatalf("static keys renewed: %v, %d", err, src2.calls)
	}
}
