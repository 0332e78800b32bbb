package awssig

import (
	"context"
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
		if got != sts.session {
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
