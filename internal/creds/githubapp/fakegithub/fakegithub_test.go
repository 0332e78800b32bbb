package fakegithub_test

import (
	"bytes"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/creds/githubapp/fakegithub"
)

func newClock() *fakegithub.Clock {
	return fakegithub.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// forge builds a JWT by hand, independently of any JWT library, so the fake's verifier can be attacked
// with exactly the bytes an attacker would send.
func forge(t *testing.T, header, claims map[string]any, sign func(signingInput []byte) []byte) string {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	return input + "." + base64.RawURLEncoding.EncodeToString(sign([]byte(input)))
}

func rs256(t *testing.T, key *rsa.PrivateKey) func([]byte) []byte {
	return func(in []byte) []byte {
		d := sha256.Sum256(in)
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
}

func rs512(t *testing.T, key *rsa.PrivateKey) func([]byte) []byte {
	return func(in []byte) []byte {
		d := sha512.Sum512(in)
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA512, d[:])
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
}

func hs256(secret []byte) func([]byte) []byte {
	return func(in []byte) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write(in)
		return m.Sum(nil)
	}
}

func do(t *testing.T, app *fakegithub.App, method, path, auth string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, app.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := app.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if len(data) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, data, err)
		}
	}
	return resp.StatusCode, out
}

// TestJWTAttacks sends forged app JWTs. Each refused forgery sits next to the same JWT done right, which
// is accepted, so a verifier that refused everything would fail the test.
func TestJWTAttacks(t *testing.T) {
	clk := newClock()
	app := fakegithub.NewApp(t, fakegithub.Options{AppID: 77, Now: clk.Now, TLS: true})
	_, otherKey := fakegithub.GenerateKey(t)
	now := clk.Now().Unix()
	good := map[string]any{"iat": now - 60, "exp": now + 540, "iss": "77"}
	with := func(k string, v any) map[string]any {
		c := maps.Clone(good)
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	rsHeader := map[string]any{"alg": "RS256", "typ": "JWT"}
	pkix, err := x509.MarshalPKIXPublicKey(&app.Key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix})
	pubPKCS1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&app.Key.PublicKey)})
	validJWT := forge(t, rsHeader, good, rs256(t, app.Key))
	parts := strings.Split(validJWT, ".")

	tests := []struct {
		name string
		auth string
		want int
	}{
		{"valid RS256 (control)", "Bearer " + validJWT, 200},
		{"numeric iss (control: GitHub accepts it)", "Bearer " + forge(t, rsHeader, with("iss", 77), rs256(t, app.Key)), 200},
		{"alg none, no signature", "Bearer " + forge(t, map[string]any{"alg": "none", "typ": "JWT"}, good, func([]byte) []byte { return nil }), 401},
		{"alg none keeping a valid signature", "Bearer " + base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2], 401},
		{"alg None (case)", "Bearer " + forge(t, map[string]any{"alg": "None"}, good, func([]byte) []byte { return nil }), 401},
		{"HS256 keyed with the PKIX public key PEM", "Bearer " + forge(t, map[string]any{"alg": "HS256", "typ": "JWT"}, good, hs256(pubPEM)), 401},
		{"HS256 keyed with the PKCS#1 public key PEM", "Bearer " + forge(t, map[string]any{"alg": "HS256", "typ": "JWT"}, good, hs256(pubPKCS1)), 401},
		{"HS256 keyed with the DER public key", "Bearer " + forge(t, map[string]any{"alg": "HS256", "typ": "JWT"}, good, hs256(pkix)), 401},
		{"RS512 with the right key", "Bearer " + forge(t, map[string]any{"alg": "RS512", "typ": "JWT"}, good, rs512(t, app.Key)), 401},
		{"RS256 claiming to be RS512", "Bearer " + forge(t, map[string]any{"alg": "RS512", "typ": "JWT"}, good, rs256(t, app.Key)), 401},
		{"RS256 with another key", "Bearer " + forge(t, rsHeader, good, rs256(t, otherKey)), 401},
		{"payload swapped after signing", "Bearer " + parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"iat":1,"exp":9999999999,"iss":"77"}`)) + "." + parts[2], 401},
		{"signature truncated", "Bearer " + validJWT[:len(validJWT)-4], 401},
		{"wrong iss", "Bearer " + forge(t, rsHeader, with("iss", "78"), rs256(t, app.Key)), 401},
		{"no iss", "Bearer " + forge(t, rsHeader, with("iss", nil), rs256(t, app.Key)), 401},
		{"expired", "Bearer " + forge(t, rsHeader, with("exp", now-1), rs256(t, app.Key)), 401},
		{"no exp", "Bearer " + forge(t, rsHeader, with("exp", nil), rs256(t, app.Key)), 401},
		{"exp more than 10 minutes ahead", "Bearer " + forge(t, rsHeader, with("exp", now+601), rs256(t, app.Key)), 401},
		{"exp exactly 10 minutes ahead (control)", "Bearer " + forge(t, rsHeader, map[string]any{"iat": now, "exp": now + 600, "iss": "77"}, rs256(t, app.Key)), 200},
		{"exp-iat beyond 10 minutes", "Bearer " + forge(t, rsHeader, with("iat", now-300), rs256(t, app.Key)), 401},
		{"iat in the future", "Bearer " + forge(t, rsHeader, map[string]any{"iat": now + 30, "exp": now + 300, "iss": "77"}, rs256(t, app.Key)), 401},
		{"no iat", "Bearer " + forge(t, rsHeader, with("iat", nil), rs256(t, app.Key)), 401},
		{"token scheme instead of Bearer", "token " + validJWT, 401},
		{"no authorization", "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(t, app, "GET", "/app", tt.auth, nil)
			if status != tt.want {
				t.Fatalf("GET /app: status %d, want %d (body %v)", status, tt.want, body)
			}
			if status == 200 && body["id"] != float64(77) {
				t.Errorf("GET /app: id %v, want 77", body["id"])
			}
			if status == 401 && body["message"] == "" {
				t.Errorf("401 without a message")
			}
		})
	}
	if got, want := len(app.JWTs()), 3; got != want {
		t.Errorf("fake recorded %d accepted JWTs, want %d (the controls)", got, want)
	}
}

func appJWT(t *testing.T, app *fakegithub.App, now time.Time) string {
	return forge(t, map[string]any{"alg": "RS256", "typ": "JWT"},
		map[string]any{"iat": now.Unix() - 60, "exp": now.Unix() + 540, "iss": "1"}, rs256(t, app.Key))
}

func TestCreateToken(t *testing.T) {
	clk := newClock()
	app := fakegithub.NewApp(t, fakegithub.Options{Now: clk.Now,
		Permissions: map[string]string{"contents": "write", "issues": "read", "metadata": "read"}})
	auth := "Bearer " + appJWT(t, app, clk.Now())
	path := "/app/installations/1000/access_tokens"

	tests := []struct {
		name      string
		path      string
		body      any
		want      int
		wantRepos []string
		wantPerms map[string]string
		selection string
	}{
		{"scoped", path, map[string]any{"repositories": []string{"app"}, "permissions": map[string]string{"contents": "write"}},
			201, []string{"acme/app"}, map[string]string{"contents": "write", "metadata": "read"}, "selected"},
		{"names are case-insensitive, ids work", path, map[string]any{"repositories": []string{"APP"}, "repository_ids": []int{2}, "permissions": map[string]string{"issues": "read"}},
			201, []string{"acme/app", "acme/docs"}, map[string]string{"issues": "read", "metadata": "read"}, "selected"},
		{"lower level than granted", path, map[string]any{"repositories": []string{"docs"}, "permissions": map[string]string{"contents": "read"}},
			201, []string{"acme/docs"}, map[string]string{"contents": "read", "metadata": "read"}, "selected"},
		{"no scope means everything (GitHub semantics)", path, map[string]any{},
			201, []string{"acme/app", "acme/docs", "acme/infra"}, map[string]string{"contents": "write", "issues": "read", "metadata": "read"}, "all"},
		{"repository outside the installation", path, map[string]any{"repositories": []string{"other"}, "permissions": map[string]string{"contents": "read"}}, 422, nil, nil, ""},
		{"repository id outside the installation", path, map[string]any{"repository_ids": []int{4}, "permissions": map[string]string{"contents": "read"}}, 422, nil, nil, ""},
		{"permission above the app's grant", path, map[string]any{"repositories": []string{"app"}, "permissions": map[string]string{"issues": "write"}}, 422, nil, nil, ""},
		{"permission the app lacks", path, map[string]any{"repositories": []string{"app"}, "permissions": map[string]string{"administration": "read"}}, 422, nil, nil, ""},
		{"unknown level", path, map[string]any{"repositories": []string{"app"}, "permissions": map[string]string{"contents": "owner"}}, 422, nil, nil, ""},
		{"another installation", "/app/installations/1001/access_tokens", map[string]any{}, 404, nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(app.Tokens())
			status, body := do(t, app, "POST", tt.path, auth, tt.body)
			if status != tt.want {
				t.Fatalf("status %d, want %d (body %v)", status, tt.want, body)
			}
			toks := app.Tokens()
			if status != 201 {
				if len(toks) != before {
					t.Fatalf("a refused request issued a token")
				}
				return
			}
			tok := toks[len(toks)-1]
			if body["token"] != tok.Value || !strings.HasPrefix(tok.Value, "ghs_") {
				t.Errorf("token %v, recorded %q", body["token"], tok.Value)
			}
			if body["expires_at"] != clk.Now().Add(time.Hour).Format(time.RFC3339) {
				t.Errorf("expires_at %v, want an hour from now", body["expires_at"])
			}
			if !slices.Equal(tok.Repositories, tt.wantRepos) || !maps.Equal(tok.Permissions, tt.wantPerms) {
				t.Errorf("token covers %v %v, want %v %v", tok.Repositories, tok.Permissions, tt.wantRepos, tt.wantPerms)
			}
			if body["repository_selection"] != tt.selection {
				t.Errorf("repository_selection %v, want %s", body["repository_selection"], tt.selection)
			}
			var names []string
			for _, r := range body["repositories"].([]any) {
				names = append(names, r.(map[string]any)["full_name"].(string))
			}
			if !slices.Equal(names, tt.wantRepos) {
				t.Errorf("response repositories %v, want %v", names, tt.wantRepos)
			}
		})
	}
}

func TestTokenLifecycle(t *testing.T) {
	clk := newClock()
	app := fakegithub.NewApp(t, fakegithub.Options{Now: clk.Now, TLS: true,
		Permissions: map[string]string{"contents": "write", "metadata": "read"}})
	mint := func(perms map[string]string) string { return mintToken(t, app, clk, []string{"app"}, perms) }
	writer := mint(map[string]string{"contents": "write"})
	reader := mint(map[string]string{"contents": "read"})
	metaOnly := mint(map[string]string{"metadata": "read"})

	authz := []struct {
		tok, repo string
		write     bool
		want      bool
	}{
		{writer, "acme/app", true, true},
		{writer, "ACME/app.git", false, true},
		{writer, "acme/docs", false, false},
		{writer, "other/app", false, false},
		{writer, "app", false, false},
		{reader, "acme/app", false, true},
		{reader, "acme/app", true, false},
		{metaOnly, "acme/app", false, false},
		{"ghs_forged", "acme/app", false, false},
	}
	for _, a := range authz {
		if got := app.Authorize(a.tok, a.repo, a.write); got != a.want {
			t.Errorf("Authorize(%.8s…, %q, write=%v) = %v, want %v", a.tok, a.repo, a.write, got, a.want)
		}
	}

	if status, body := do(t, app, "GET", "/installation/repositories", "token "+writer, nil); status != 200 || body["total_count"] != float64(1) {
		t.Fatalf("list repositories with a live token: %d %v", status, body)
	}
	if status, _ := do(t, app, "DELETE", "/installation/token", "Bearer ghs_forged", nil); status != 401 {
		t.Errorf("revoking an unknown token: %d, want 401", status)
	}
	if !app.Valid(writer) || app.Revoked(writer) {
		t.Fatal("fresh token not valid")
	}
	if status, _ := do(t, app, "DELETE", "/installation/token", "Bearer "+writer, nil); status != 204 {
		t.Fatalf("revoke: %d, want 204", status)
	}
	if app.Valid(writer) || !app.Revoked(writer) || app.Authorize(writer, "acme/app", false) {
		t.Error("revoked token still accepted")
	}
	if status, _ := do(t, app, "GET", "/installation/repositories", "token "+writer, nil); status != 401 {
		t.Errorf("list repositories with a revoked token: %d, want 401", status)
	}
	if status, _ := do(t, app, "DELETE", "/installation/token", "Bearer "+writer, nil); status != 401 {
		t.Errorf("revoking twice: %d, want 401 as GitHub answers", status)
	}
	if !app.Valid(reader) {
		t.Error("revoking one token affected another")
	}

	clk.Advance(time.Hour - time.Second)
	if !app.Valid(reader) {
		t.Error("token expired early")
	}
	clk.Advance(time.Second)
	if app.Valid(reader) || app.Authorize(reader, "acme/app", false) || app.Revoked(reader) {
		t.Error("token valid at its expiry, or counted as revoked")
	}
}

// mintToken asks the fake for a token as an app client would, with a hand-made JWT.
func mintToken(t *testing.T, app *fakegithub.App, clk *fakegithub.Clock, repos []string, perms map[string]string) string {
	t.Helper()
	status, body := do(t, app, "POST", "/app/installations/1000/access_tokens", "Bearer "+appJWT(t, app, clk.Now()),
		map[string]any{"repositories": repos, "permissions": perms})
	if status != 201 {
		t.Fatalf("mint: %d %v", status, body)
	}
	return body["token"].(string)
}

func revoke(t *testing.T, app *fakegithub.App, tok string) {
	t.Helper()
	if status, _ := do(t, app, "DELETE", "/installation/token", "Bearer "+tok, nil); status != 204 {
		t.Fatalf("revoke: %d, want 204", status)
	}
}
