package awssig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

var realKeys = Keys{AccessKeyID: "AKIAREALREALREAL1234", SecretAccessKey: "REALsecretREALsecretREALsecretREALsecret"}

// fakeAWS is an AWS-like upstream: it verifies every request's signature with
// the real keys and answers 200, or 403 with the reason, like a service does.
func fakeAWS(t *testing.T, keys Keys) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifySigV4(r, body, keys.AccessKeyID, keys.SecretAccessKey, keys.SessionToken); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		fmt.Fprintf(w, "ok %d", len(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// newResigner returns placeholder keys for real and a Resigner from them to real.
func newResigner(t testing.TB, real Keys) (Keys, *Resigner) {
	t.Helper()
	ph, err := NewPlaceholder(real)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := NewResigner(ph, real)
	if err != nil {
		t.Fatal(err)
	}
	return ph, rs
}

// clientSign signs r as an AWS SDK in the sandbox would, with keys.
func clientSign(t *testing.T, r *http.Request, keys Keys, payload, service string) {
	t.Helper()
	if payload == "" {
		var b []byte
		if r.Body != nil {
			b, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		sum := sha256.Sum256(b)
		payload = hex.EncodeToString(sum[:])
	} else {
		r.Header.Set("X-Amz-Content-Sha256", payload)
	}
	if keys.SessionToken != "" {
		r.Header.Set("X-Amz-Security-Token", keys.SessionToken)
	}
	s := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" })
	err := s.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keys.AccessKeyID, SecretAccessKey: keys.SecretAccessKey, SessionToken: keys.SessionToken},
		r, payload, service, "eu-west-3", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
}

func send(t *testing.T, r *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestResign: requests signed with the placeholder keys are refused by the
// AWS-like upstream as they are, and accepted once the gateway re-signed
// them with the real keys; across services, payload kinds, paths needing
// escapes, query strings, extra signed headers and temporary keys.
func TestResign(t *testing.T) {
	withToken := realKeys
	withToken.SessionToken = "REALtoken" + strings.Repeat("t", 300)
	for _, real := range []Keys{realKeys, withToken} {
		ph, rs := newResigner(t, real)
		upstream := fakeAWS(t, real)
		tests := []struct {
			name, method, path, body, payload, service string
			header                                     map[string]string
		}{
			{name: "s3 get, unsigned payload", method: "GET", path: "/bucket/key", payload: "UNSIGNED-PAYLOAD", service: "s3"},
			{name: "s3 put, hashed payload, escaped path", method: "PUT", path: "/bucket/a%20b/c%2Bd/%C3%A9", body: "object data", service: "s3",
				header: map[string]string{"Content-Type": "text/plain", "X-Amz-Meta-Owner": "agent"}},
			{name: "s3 chunked upload, unsigned trailer", method: "PUT", path: "/bucket/obj", body: "b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n",
				payload: "STREAMING-UNSIGNED-PAYLOAD-TRAILER", service: "s3",
				header: map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": "11", "X-Amz-Trailer": "x-amz-checksum-crc32"}},
			{name: "sts post, body hashed by the gateway", method: "POST", path: "/", body: "Action=GetCallerIdentity&Version=2011-06-15", service: "sts",
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}},
			{name: "query string, path escaped twice", method: "GET", path: "/2015-03-31/functions/my%3Afn/invocations?Qualifier=a b&x=%2F", service: "lambda"},
			{name: "json api", method: "POST", path: "/", body: `{"TableName":"t"}`, service: "dynamodb",
				header: map[string]string{"X-Amz-Target": "DynamoDB_20120810.ListTables", "Content-Type": "application/x-amz-json-1.0"}},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/token=%v", tt.name, real.SessionToken != ""), func(t *testing.T) {
				newReq := func() *http.Request {
					r, err := http.NewRequest(tt.method, upstream.URL+tt.path, strings.NewReader(tt.body))
					if err != nil {
						t.Fatal(err)
					}
					if tt.body == "" {
						r.Body, r.ContentLength = http.NoBody, 0
					}
					for k, v := range tt.header {
						r.Header.Set(k, v)
					}
					clientSign(t, r, ph, tt.payload, tt.service)
					return r
				}
				// As the client signed it: valid for the placeholder keys
				// (so the verifier agrees with the signer), refused upstream.
				r := newReq()
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(b))
				if err := verifySigV4(r, b, ph.AccessKeyID, ph.SecretAccessKey, ph.SessionToken); err != nil {
					t.Fatalf("the verifier refuses the client's own signature: %v", err)
				}
				if code, msg := send(t, r); code != http.StatusForbidden {
					t.Fatalf("placeholder-signed request accepted upstream: %d %s", code, msg)
				}
				r = newReq()
				ok, err := rs.Resign(r)
				if err != nil || !ok {
					t.Fatalf("Resign = %v, %v", ok, err)
				}
				if code, msg := send(t, r); code != http.StatusOK {
					t.Fatalf("re-signed request refused upstream: %d %s", code, msg)
				}
			})
		}
	}
}

// TestResignLeavesOthersAlone: a request signed with other keys (or not
// signed) is not re-signed and reaches the upstream as it was; requests
// signed with the placeholder that cannot be re-signed faithfully are
// refused, while the same request in a form that can is re-signed.
func TestResignLeavesOthersAlone(t *testing.T) {
	ph, _ := NewPlaceholder(realKeys)
	rs, err := NewResigner(ph, realKeys)
	if err != nil {
		t.Fatal(err)
	}
	upstream := fakeAWS(t, realKeys)
	newReq := func(keys Keys, payload string) *http.Request {
		r, _ := http.NewRequest("GET", upstream.URL+"/bucket/key", nil)
		clientSign(t, r, keys, payload, "s3")
		return r
	}

	other := Keys{AccessKeyID: "AKIAOTHEROTHEROTHER1", SecretAccessKey: strings.Repeat("o", 40)}
	r := newReq(other, "UNSIGNED-PAYLOAD")
	before := r.Header.Clone()
	if ok, err := rs.Resign(r); ok || err != nil {
		t.Fatalf("request signed with other keys: Resign = %v, %v", ok, err)
	}
	if r.Header.Get("Authorization") != before.Get("Authorization") {
		t.Fatalf("request signed with other keys was changed")
	}
	if code, _ := send(t, r); code != http.StatusForbidden {
		t.Fatalf("upstream accepted keys it does not know: %d", code)
	}
	// A key id that merely contains the placeholder's is someone else's.
	r = newReq(Keys{AccessKeyID: ph.AccessKeyID + "X", SecretAccessKey: ph.SecretAccessKey}, "UNSIGNED-PAYLOAD")
	if ok, err := rs.Resign(r); ok || err != nil {
		t.Fatalf("longer key id: Resign = %v, %v", ok, err)
	}
	unsigned, _ := http.NewRequest("GET", upstream.URL+"/", nil)
	if ok, err := rs.Resign(unsigned); ok || err != nil {
		t.Fatalf("unsigned request: Resign = %v, %v", ok, err)
	}

	refused := []struct {
		name   string
		mutate func(*http.Request)
		want   string
	}{
		{"signed chunks", func(r *http.Request) {}, "per-chunk signatures"},
		{"foreign session token", func(r *http.Request) { r.Header.Set("X-Amz-Security-Token", "someone-elses") }, "session token"},
		{"date outside the scope", func(r *http.Request) {
			r.Header.Set("X-Amz-Date", time.Now().UTC().Add(-48*time.Hour).Format(timeFormat))
		}, "scope's date"},
		{"two authorization headers", func(r *http.Request) { r.Header.Add("Authorization", r.Header.Get("Authorization")) }, "more than one"},
		{"malformed", func(r *http.Request) {
			r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+ph.AccessKeyID+"/x, SignedHeaders=host, Signature=00")
		}, "malformed"},
		{"sigv2 presigned URL", func(r *http.Request) {
			r.Header.Del("Authorization")
			r.URL.RawQuery = "AWSAccessKeyId=" + ph.AccessKeyID + "&Signature=iAAyrZRIPu%2BmLzEeqp9VpLGEIxE%3D&Expires=1796013768"
		}, "Signature Version 2"},
		{"sigv4a", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256", 1))
		}, "only AWS4-HMAC-SHA256"},
		{"presigned URL", func(r *http.Request) {
			r.Header.Del("Authorization")
			r.URL.RawQuery = "X-Amz-Credential=" + ph.AccessKeyID + "%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
		}, "presigned"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			payload := "UNSIGNED-PAYLOAD"
			if tt.name == "signed chunks" {
				payload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
			}
			r := newReq(ph, payload)
			tt.mutate(r)
			ok, err := rs.Resign(r)
			if ok || !errors.Is(err, ErrNotResigned) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Resign = %v, %v; want ErrNotResigned: %s", ok, err, tt.want)
			}
			if strings.Contains(err.Error(), realKeys.SecretAccessKey) || strings.Contains(err.Error(), ph.SecretAccessKey) {
				t.Fatalf("error holds a secret: %v", err)
			}
		})
	}
	// The control: the same request, unmutated and with a plain payload, is re-signed.
	r = newReq(ph, "UNSIGNED-PAYLOAD")
	if ok, err := rs.Resign(r); !ok || err != nil {
		t.Fatalf("control: Resign = %v, %v", ok, err)
	}
	if code, msg := send(t, r); code != http.StatusOK {
		t.Fatalf("control refused upstream: %d %s", code, msg)
	}
}

// TestResignPresigned: a presigned URL made with the placeholder keys (as
// `aws s3 presign` makes one) is refused upstream as it is and accepted
// once re-signed; its expiry is kept.
func TestResignPresigned(t *testing.T) {
	withToken := realKeys
	withToken.SessionToken = "REALtoken"
	for _, real := range []Keys{realKeys, withToken} {
		ph, _ := NewPlaceholder(real)
		rs, err := NewResigner(ph, real)
		if err != nil {
			t.Fatal(err)
		}
		upstream := fakeAWS(t, real)
		for _, service := range []string{"s3", "sts"} {
			r, _ := http.NewRequest("GET", upstream.URL+"/bucket/a%20b?X-Amz-Expires=300&x-id=GetObject", nil)
			payload := "UNSIGNED-PAYLOAD"
			if service != "s3" {
				payload = hex.EncodeToString(sha256.New().Sum(nil))
			}
			signed, _, err := v4.NewSigner().PresignHTTP(context.Background(),
				aws.Credentials{AccessKeyID: ph.AccessKeyID, SecretAccessKey: ph.SecretAccessKey, SessionToken: ph.SessionToken},
				r, payload, service, "us-east-1", time.Now().UTC(), func(o *v4.SignerOptions) { o.DisableURIPathEscaping = service == "s3" })
			if err != nil {
				t.Fatal(err)
			}
			newReq := func() *http.Request {
				r, _ := http.NewRequest("GET", signed, nil)
				return r
			}
			r = newReq()
			if err := verifySigV4(r, nil, ph.AccessKeyID, ph.SecretAccessKey, ph.SessionToken); err != nil {
				t.Fatalf("%s: the verifier refuses the client's presigned URL: %v", service, err)
			}
			if code, _ := send(t, r); code != http.StatusForbidden {
				t.Fatalf("%s: placeholder-presigned URL accepted upstream", service)
			}
			r = newReq()
			if ok, err := rs.Resign(r); !ok || err != nil {
				t.Fatalf("%s: Resign = %v, %v", service, ok, err)
			}
			if strings.Contains(r.URL.RawQuery, ph.AccessKeyID) || r.URL.Query().Get("X-Amz-Expires") != "300" {
				t.Fatalf("%s: re-signed query %q", service, r.URL.RawQuery)
			}
			if code, msg := send(t, r); code != http.StatusOK {
				t.Fatalf("%s: re-signed presigned URL refused upstream: %d %s", service, code, msg)
			}
		}
	}
}

func TestKeysRedact(t *testing.T) {
	k := Keys{AccessKeyID: "AKIAEXAMPLEEXAMPLE12", SecretAccessKey: "SECRETsecret", SessionToken: "TOKENtoken"}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%#v %+v %x %q %s", k, k, k, k, k), fmt.Sprintf("%v", &k), fmt.Sprintf("%v", struct{ K Keys }{k})} {
		if strings.Contains(s, "SECRET") || strings.Contains(s, "TOKEN") || strings.Contains(strings.ToUpper(s), strings.ToUpper(hex.EncodeToString([]byte("SECRET")))) {
			t.Errorf("printed a secret: %s", s)
		}
	}
	if b, _ := k.MarshalJSON(); bytes.Contains(b, []byte("SECRET")) || !bytes.Contains(b, []byte("AKIAEXAMPLE")) {
		t.Errorf("JSON: %s", b)
	}
}

func TestPlaceholderKeys(t *testing.T) {
	for _, real := range []Keys{realKeys, {AccessKeyID: "ASIAX", SecretAccessKey: "s", SessionToken: "short"}} {
		a, err := NewPlaceholder(real)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewPlaceholder(real)
		prefix := "AKIA"
		if real.SessionToken != "" {
			prefix = "ASIA"
		}
		if !strings.HasPrefix(a.AccessKeyID, prefix) || len(a.AccessKeyID) != 20 || strings.Trim(a.AccessKeyID, upperDigits) != "" {
			t.Errorf("access key id %q", a.AccessKeyID)
		}
		if len(a.SecretAccessKey) != 40 || strings.Trim(a.SecretAccessKey, secretChars) != "" {
			t.Errorf("secret %q", a.SecretAccessKey)
		}
		if (real.SessionToken != "") != (len(a.SessionToken) >= 64) {
			t.Errorf("session token %q for real token %q", a.SessionToken, real.SessionToken)
		}
		if a.AccessKeyID == b.AccessKeyID || a.SecretAccessKey == b.SecretAccessKey {
			t.Errorf("placeholders repeat")
		}
	}
}

// TestResignerRedacts: printing a Resigner (whose key fields fmt would
// print raw) shows no secret.
func TestResignerRedacts(t *testing.T) {
	rs, err := NewResigner(Keys{AccessKeyID: "AKIAPH", SecretAccessKey: "PHSECRET", SessionToken: "PHTOKEN"}, Keys{AccessKeyID: "AKIAREAL", SecretAccessKey: "REALSECRET", SessionToken: "REALTOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("%v %+v %#v %s %x", rs, rs, rs, rs, rs) + fmt.Sprintf("%+v", struct{ r *Resigner }{rs})
	for _, s := range []string{"SECRET", "TOKEN", hex.EncodeToString([]byte("SECRET"))} {
		if strings.Contains(out, s) {
			t.Fatalf("printed %s: %s", s, out)
		}
	}
	if !strings.Contains(out, "AKIAREAL") {
		t.Fatalf("the check cannot see what is printed: %s", out)
	}
}
