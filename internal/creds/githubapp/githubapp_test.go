package githubapp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/creds/githubapp"
	"github.com/cordon-sandbox/cordon/internal/creds/githubapp/fakegithub"
)

// testKey is the app key most tests share: generating one per test would dominate the run time.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return key
})

// newApp starts a fake GitHub for an app with the shared key.
func newApp(t *testing.T, o fakegithub.Options) *fakegithub.App {
	o.Key = testKey()
	return fakegithub.NewApp(t, o)
}

func newClock() *fakegithub.Clock {
	return fakegithub.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// config is a Config for app, asking for contents:write and pull_requests:write on acme/app and docs.
func config(app *fakegithub.App, clk *fakegithub.Clock) githubapp.Config {
	return githubapp.Config{
		AppID:          app.ID,
		PrivateKeyPEM:  app.PrivateKeyPEM,
		InstallationID: app.InstallationID,
		Repositories:   []string{"acme/app", "docs"},
		Permissions:    map[string]string{"contents": "write", "pull_requests": "write"},
		BaseURL:        app.URL(),
		HTTPClient:     app.Client(),
		Now:            clk.Now,
	}
}

func newSourceB(t testing.TB, cfg githubapp.Config) *githubapp.Source { return newSource(t, cfg) }

func newSource(t testing.TB, cfg githubapp.Config) *githubapp.Source {
	t.Helper()
	s, err := githubapp.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// get calls the fake's GET /installation/repositories with tok, as a client of the API would.
func get(t *testing.T, app *fakegithub.App, tok string) int {
	t.Helper()
	req, err := http.NewRequest("GET", app.URL()+"/installation/repositories", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := app.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestMintScoped(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			clk := newClock()
			app := newApp(t, fakegithub.Options{AppID: 31337, Now: clk.Now, TLS: tls})
			src := newSource(t, config(app, clk))

			tok, err := src.Token(context.Background())
			if err != nil {
				t.Fatalf("Token: %v", err)
			}
			toks := app.Tokens()
			if len(toks) != 1 || toks[0].Value != tok {
				t.Fatalf("fake issued %d tokens, want the 1 returned", len(toks))
			}
			if want := []string{"acme/app", "acme/docs"}; !slices.Equal(toks[0].Repositories, want) {
				t.Errorf("token covers %v, want %v", toks[0].Repositories, want)
			}
			if want := map[string]string{"contents": "write", "pull_requests": "write", "metadata": "read"}; !maps.Equal(toks[0].Permissions, want) {
				t.Errorf("token permissions %v, want %v", toks[0].Permissions, want)
			}
			jwts := app.JWTs()
			if len(jwts) != 1 {
				t.Fatalf("fake accepted %d app JWTs, want 1", len(jwts))
			}
			j := jwts[0]
			if j.Issuer != "31337" || !j.IssuedAt.Equal(clk.Now().Add(-time.Minute)) || !j.ExpiresAt.Equal(clk.Now().Add(9*time.Minute)) {
				t.Errorf("JWT iss %s iat %v exp %v; want the app id, now-60s, now+9m", j.Issuer, j.IssuedAt, j.ExpiresAt)
			}
			if !app.Authorize(tok, "acme/app", true) || !app.Authorize(tok, "acme/docs", true) || app.Authorize(tok, "acme/infra", false) {
				t.Error("token's scope on the fake is not the one asked for")
			}
		})
	}
}

// TestEnterpriseBaseURL serves the fake under /api/v3, as GitHub Enterprise Server does, over HTTP/2,
// and checks the headers GitHub's API wants on every call.
func TestEnterpriseBaseURL(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now})
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s accept=%s version=%s ua=%t ctype=%s", r.Proto, r.Method, r.URL.Path,
			r.Header.Get("Accept"), r.Header.Get("X-GitHub-Api-Version"), r.Header.Get("User-Agent") != "", r.Header.Get("Content-Type")))
		mu.Unlock()
		http.StripPrefix("/api/v3", app.Handler()).ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := config(app, clk)
	cfg.BaseURL, cfg.HTTPClient = srv.URL+"/api/v3/", srv.Client()
	src := newSource(t, cfg)
	tok, err := src.Token(context.Background())
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	if err := src.Revoke(context.Background()); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if !app.Revoked(tok) {
		t.Error("token not revoked")
	}
	want := []string{
		"HTTP/2.0 POST /api/v3/app/installations/1000/access_tokens accept=application/vnd.github+json version=2022-11-28 ua=true ctype=application/json",
		"HTTP/2.0 DELETE /api/v3/installation/token accept=application/vnd.github+json version=2022-11-28 ua=true ctype=",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

func TestRefresh(t *testing.T) {
	tests := []struct {
		name          string
		ttl           time.Duration
		stillCached   time.Duration // since mint: the same token is handed out
		refreshedFrom time.Duration // since mint: a new token is minted
	}{
		{"one hour, refreshed with 10 minutes left", time.Hour, 50*time.Minute - time.Second, 50 * time.Minute},
		{"short-lived, refreshed at half its life", 8 * time.Minute, 4*time.Minute - time.Second, 4 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			app := newApp(t, fakegithub.Options{Now: clk.Now, TokenTTL: tt.ttl})
			src := newSource(t, config(app, clk))
			ctx := context.Background()
			first, err := src.Token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(tt.stillCached)
			again, err := src.Token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if again != first || len(app.Tokens()) != 1 {
				t.Fatalf("re-minted before the refresh margin (%d tokens)", len(app.Tokens()))
			}
			clk.Advance(tt.refreshedFrom - tt.stillCached)
			second, err := src.Token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if second == first || len(app.Tokens()) != 2 {
				t.Fatalf("no refresh inside the margin (%d tokens)", len(app.Tokens()))
			}
			if !app.Valid(first) {
				t.Error("the replaced token was revoked while requests may still use it")
			}
			if again, _ := src.Token(ctx); again != second {
				t.Error("the new token is not the one handed out")
			}
			if err := src.Revoke(ctx); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if !app.Revoked(first) || !app.Revoked(second) {
				t.Errorf("Revoke left a token alive: first revoked %v, second %v", app.Revoked(first), app.Revoked(second))
			}
		})
	}
}

// slowMint delays token creation until release is closed, counting the mints that reach the fake.
func slowMint(app *fakegithub.App, release <-chan struct{}, mints *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mints.Add(1)
			<-release
		}
		app.Handler().ServeHTTP(w, r)
	}
}

// sourceVia returns a Source for app whose requests go to handler instead (a fault or a delay in
// front of the fake, or a server of the test's own), served over plain HTTP.
func sourceVia(t testing.TB, app *fakegithub.App, clk *fakegithub.Clock, handler http.HandlerFunc) *githubapp.Source {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	cfg := config(app, clk)
	cfg.BaseURL, cfg.HTTPClient = srv.URL, nil
	return newSource(t, cfg)
}

func TestConcurrentCallsMintOnce(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now})
	release := make(chan struct{})
	var mints atomic.Int32
	src := sourceVia(t, app, clk, slowMint(app, release, &mints))

	const callers = 16
	results := make(chan string, callers)
	var started sync.WaitGroup
	for range callers {
		started.Add(1)
		go func() {
			started.Done()
			tok, err := src.Token(context.Background())
			if err != nil {
				t.Error(err)
			}
			results <- tok
		}()
	}
	started.Wait()
	// Hold the mint until it has certainly started, so the other callers find it in flight.
	for mints.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	var toks []string
	for range callers {
		toks = append(toks, <-results)
	}
	if n := mints.Load(); n != 1 {
		t.Errorf("%d mints for %d concurrent callers, want 1", n, callers)
	}
	if toks[0] == "" || slices.ContainsFunc(toks, func(s string) bool { return s != toks[0] }) {
		t.Errorf("callers got different tokens")
	}
}

// TestWaitingCallerCancelled: a caller whose context ends stops waiting, and the mint it started still
// completes for the next caller instead of being wasted or repeated.
func TestWaitingCallerCancelled(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now})
	release := make(chan struct{})
	var mints atomic.Int32
	src := sourceVia(t, app, clk, slowMint(app, release, &mints))

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := src.Token(ctx)
		errc <- err
	}()
	for mints.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v, want context.Canceled", err)
	}
	close(release)
	tok, err := src.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if mints.Load() != 1 || !app.Valid(tok) {
		t.Errorf("%d mints, token valid %v; want the first mint's token", mints.Load(), app.Valid(tok))
	}
}

func TestRevoke(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now, TLS: true})
	src := newSource(t, config(app, clk))
	ctx := context.Background()
	tok, err := src.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status := get(t, app, tok); status != 200 {
		t.Fatalf("API call with the token before Revoke: %d, want 200", status)
	}
	if err := src.Revoke(ctx); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if !app.Revoked(tok) || app.Valid(tok) {
		t.Fatal("token still valid on the fake after Revoke")
	}
	if status := get(t, app, tok); status != 401 {
		t.Errorf("API call with the token after Revoke: %d, want 401", status)
	}
	if err := src.Revoke(ctx); err != nil {
		t.Errorf("second Revoke: %v", err)
	}
	if _, err := src.Token(ctx); !errors.Is(err, githubapp.ErrRevoked) {
		t.Errorf("Token after Revoke: %v, want ErrRevoked", err)
	}
	if n := len(app.Tokens()); n != 1 {
		t.Errorf("%d tokens minted, want 1", n)
	}
}

func TestRevokeNeverMinted(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	app := newApp(t, fakegithub.Options{})
	cfg := config(app, newClock())
	cfg.BaseURL, cfg.HTTPClient = srv.URL, nil
	src := newSource(t, cfg)
	if err := src.Revoke(context.Background()); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if calls.Load() != 0 {
		t.Errorf("Revoke with nothing minted made %d requests", calls.Load())
	}
}

// TestRevokeRetried: a revocation that fails is reported, and the next Revoke retries it.
func TestRevokeRetried(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now})
	var failOnce atomic.Bool
	failOnce.Store(true)
	src := sourceVia(t, app, clk, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && failOnce.CompareAndSwap(true, false) {
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`{"message":"Server Error"}`))
			return
		}
		app.Handler().ServeHTTP(w, r)
	})
	ctx := context.Background()
	tok, err := src.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = src.Revoke(ctx)
	var apiErr *githubapp.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || !strings.Contains(err.Error(), "Server Error") {
		t.Fatalf("Revoke against a failing server: %v, want an APIError 502", err)
	}
	if app.Revoked(tok) {
		t.Fatal("the failing revocation reached the fake: the test does not test a retry")
	}
	if err := src.Revoke(ctx); err != nil {
		t.Fatalf("second Revoke: %v", err)
	}
	if !app.Revoked(tok) {
		t.Error("second Revoke did not retry the failed revocation")
	}
}

// TestAPIErrorsCarryNoSecrets: a wrong key, a missing installation and a scope the installation lacks
// each fail with GitHub's status and message, and without the key, the JWT or a token in the text. The
// same source with the right settings succeeds, so the failures are due to what was changed.
func TestAPIErrorsCarryNoSecrets(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now, TLS: true})
	wrongPEM, _ := fakegithub.GenerateKey(t)
	var mu sync.Mutex
	var sent []string // every credential the client sent
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		app.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	base := config(app, clk)
	base.BaseURL, base.HTTPClient = srv.URL, srv.Client()

	tests := []struct {
		name     string
		change   func(*githubapp.Config)
		status   int
		message  string
		wantMint bool
	}{
		{"right settings (control)", func(*githubapp.Config) {}, 0, "", true},
		{"wrong key", func(c *githubapp.Config) { c.PrivateKeyPEM = wrongPEM }, 401, "A JSON web token could not be decoded", false},
		{"wrong app id", func(c *githubapp.Config) { c.AppID = 2 }, 401, "Integration not found", false},
		{"wrong installation", func(c *githubapp.Config) { c.InstallationID = 999 }, 404, "Not Found", false},
		{"repository outside the installation", func(c *githubapp.Config) { c.Repositories = []string{"secret"} }, 422, "repository that does not exist", false},
		{"permission the app lacks", func(c *githubapp.Config) { c.Permissions = map[string]string{"administration": "write"} }, 422, "permissions requested are not granted", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.change(&cfg)
			before := len(app.Tokens())
			tok, err := newSource(t, cfg).Token(context.Background())
			if tt.wantMint {
				if err != nil || tok == "" {
					t.Fatalf("control failed: %v", err)
				}
				return
			}
			var apiErr *githubapp.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status {
				t.Fatalf("error %v, want an APIError with status %d", err, tt.status)
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprint(tt.status)) || !strings.Contains(msg, tt.message) {
				t.Errorf("error %q lacks the status or GitHub's message %q", msg, tt.message)
			}
			if len(app.Tokens()) != before {
				t.Error("a token was issued")
			}
			mu.Lock()
			defer mu.Unlock()
			secrets := append(slices.Clone(sent), pemBody(cfg.PrivateKeyPEM)...)
			for _, s := range secrets {
				if s != "" && strings.Contains(msg, s) {
					t.Errorf("error %q contains a secret", msg)
				}
			}
		})
	}
}

// pemBody returns the base64 lines of a PEM file: any of them in an error would be a leak.
func pemBody(p []byte) []string {
	var out []string
	for _, l := range strings.Split(string(p), "\n") {
		if len(l) > 16 && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// TestOverGrantRefused: the fake misbehaves and grants the whole installation. The client refuses the
// token and revokes it; the well-behaved fake's token is accepted (control).
func TestOverGrantRefused(t *testing.T) {
	for _, over := range []bool{false, true} {
		t.Run(fmt.Sprintf("overgrant=%v", over), func(t *testing.T) {
			clk := newClock()
			app := newApp(t, fakegithub.Options{Now: clk.Now, OverGrant: over})
			src := newSource(t, config(app, clk))
			tok, err := src.Token(context.Background())
			toks := app.Tokens()
			if len(toks) != 1 {
				t.Fatalf("%d tokens issued, want 1", len(toks))
			}
			if !over {
				if err != nil || tok != toks[0].Value || app.Revoked(tok) {
					t.Fatalf("exact grant refused: %v", err)
				}
				return
			}
			if err == nil || tok != "" {
				t.Fatal("a token broader than asked was accepted")
			}
			if !strings.Contains(err.Error(), "grant differs from the request") || !strings.Contains(err.Error(), "was revoked") {
				t.Errorf("error %q does not say the grant was refused and revoked", err)
			}
			if strings.Contains(err.Error(), toks[0].Value) {
				t.Errorf("error contains the token")
			}
			if !app.Revoked(toks[0].Value) {
				t.Error("the refused token was left alive")
			}
		})
	}
}

// TestBadResponses: answers a buggy or hostile server could give to the mint. Each is refused, and a
// token that exists on the server's side is revoked.
func TestBadResponses(t *testing.T) {
	const tok = "v1.0123456789abcdef"
	exact := func() map[string]any {
		return map[string]any{
			"token":        tok,
			"expires_at":   "2026-03-01T13:00:00Z",
			"permissions":  map[string]string{"contents": "write", "pull_requests": "write", "metadata": "read"},
			"repositories": []map[string]any{{"name": "app", "full_name": "acme/app"}, {"name": "docs", "full_name": "acme/docs"}},
		}
	}
	set := func(k string, v any) map[string]any { m := exact(); m[k] = v; return m }
	tests := []struct {
		name       string
		status     int
		body       any
		wantErr    string
		wantRevoke bool
	}{
		{"exact, token without ghs_ prefix (control)", 201, exact(), "", false},
		{"200 instead of 201 (control)", 200, exact(), "", false},
		{"token with CRLF", 201, set("token", "abc\r\nX-Injected: 1"), "no usable token", false},
		{"token with a space", 201, set("token", "abc def"), "no usable token", false},
		{"empty token", 201, set("token", ""), "no usable token", false},
		{"not JSON", 201, "<html>", "not the expected JSON", false},
		{"expires_at not a time", 201, set("expires_at", "in an hour"), "not an RFC 3339 time", true},
		{"expires_at missing", 201, set("expires_at", nil), "not an RFC 3339 time", true},
		{"already expired", 201, set("expires_at", "2026-03-01T11:59:59Z"), "before now", true},
		{"another owner's repository", 201, set("repositories", []map[string]any{{"name": "app", "full_name": "evil/app"}, {"name": "docs", "full_name": "evil/docs"}}), "asked for acme/app", true},
		{"no repositories", 201, set("repositories", nil), "lists no repositories", true},
		{"extra permission", 201, set("permissions", map[string]string{"contents": "write", "pull_requests": "write", "workflows": "write"}), "workflows:write, which was not asked for", true},
		{"selection all", 201, set("repository_selection", "all"), "repository_selection", true},
		{"token echoed into a field", 201, set("repository_selection", tok), "repository_selection \"[redacted]\"", true},
		{"server error echoing the JWT", 500, "echo", "HTTP 500 Internal Server Error: bad credential Bearer [redacted]", false},
		{"redirect", 307, nil, "HTTP 307", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var deletes atomic.Int32
			var redirected atomic.Int32
			elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { redirected.Add(1) }))
			t.Cleanup(elsewhere.Close)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodDelete {
					if r.Header.Get("Authorization") == "Bearer "+tok {
						deletes.Add(1)
					}
					w.WriteHeader(http.StatusNoContent)
					return
				}
				if tt.status == 307 {
					http.Redirect(w, r, elsewhere.URL+r.URL.Path, tt.status)
					return
				}
				w.WriteHeader(tt.status)
				if tt.body == "echo" {
					json.NewEncoder(w).Encode(map[string]string{"message": "bad credential " + r.Header.Get("Authorization")})
				} else if s, ok := tt.body.(string); ok {
					w.Write([]byte(s))
				} else {
					json.NewEncoder(w).Encode(tt.body)
				}
			}))
			t.Cleanup(srv.Close)
			app := newApp(t, fakegithub.Options{})
			clk := newClock()
			cfg := config(app, clk)
			cfg.BaseURL, cfg.HTTPClient = srv.URL, nil
			got, err := newSource(t, cfg).Token(context.Background())
			if redirected.Load() != 0 {
				t.Error("the client followed a redirect with the app's JWT")
			}
			if tt.wantErr == "" {
				if err != nil || got != tok {
					t.Fatalf("control refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), tok) {
				t.Errorf("error %q contains the token", err)
			}
			if revoked := deletes.Load() == 1; revoked != tt.wantRevoke {
				t.Errorf("refused token revoked: %v, want %v", revoked, tt.wantRevoke)
			}
		})
	}
}

func TestNewValidation(t *testing.T) {
	app := newApp(t, fakegithub.Options{})
	good := config(app, newClock())
	tests := []struct {
		name    string
		change  func(*githubapp.Config)
		wantErr string
	}{
		{"valid (control)", func(*githubapp.Config) {}, ""},
		{"default base URL", func(c *githubapp.Config) { c.BaseURL = "" }, ""},
		{"enterprise base URL", func(c *githubapp.Config) { c.BaseURL = "https://ghe.example/api/v3" }, ""},
		{"no app id", func(c *githubapp.Config) { c.AppID = 0 }, "AppID"},
		{"negative installation", func(c *githubapp.Config) { c.InstallationID = -1 }, "InstallationID"},
		{"no key", func(c *githubapp.Config) { c.PrivateKeyPEM = nil }, "private key"},
		{"no repositories", func(c *githubapp.Config) { c.Repositories = nil }, "no repositories"},
		{"no permissions", func(c *githubapp.Config) { c.Permissions = nil }, "no permissions"},
		{"plain http to a remote host", func(c *githubapp.Config) { c.BaseURL = "http://api.github.example" }, "want https"},
		{"other scheme", func(c *githubapp.Config) { c.BaseURL = "ftp://127.0.0.1" }, "want https"},
		{"credentials in the URL", func(c *githubapp.Config) { c.BaseURL = "https://user:pw@ghe.example" }, "nothing else"},
		{"query in the URL", func(c *githubapp.Config) { c.BaseURL = "https://ghe.example/?x=1" }, "nothing else"},
		{"no host", func(c *githubapp.Config) { c.BaseURL = "https:///api" }, "nothing else"},
		{"unparseable, with a password", func(c *githubapp.Config) { c.BaseURL = "https://u:pw@ghe.example:port/" }, "does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			_, err := githubapp.New(cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("error %q shows the URL's password", err)
			}
		})
	}
}

// TestFormattingHidesSecrets prints a Config and a Source holding a live token every way fmt and
// log/slog can, and looks for the key and the token in the output.
func TestFormattingHidesSecrets(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{AppID: 4711, Now: clk.Now})
	cfg := config(app, clk)
	src := newSource(t, cfg)
	tok, err := src.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg.BaseURL = "https://user:hunter2hunter2@ghe.example/api/v3" // a Config New would refuse can still be logged
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		fmt.Fprintf(&out, verb+"\n", cfg)
		fmt.Fprintf(&out, verb+"\n", &cfg)
		fmt.Fprintf(&out, verb+"\n", src)
		fmt.Fprintf(&out, verb+"\n", []any{cfg, src})
	}
	for _, h := range []slog.Handler{slog.NewJSONHandler(&out, nil), slog.NewTextHandler(&out, nil)} {
		slog.New(h).Info("x", "cfg", cfg, "cfgp", &cfg, "src", src)
	}
	if !strings.Contains(out.String(), fmt.Sprint(app.ID)) {
		t.Fatalf("output does not even show the app id:\n%s", out.String())
	}
	// The key as text, as the list of byte values %v prints, and as %x hex.
	inner := app.PrivateKeyPEM[40:80]
	secrets := append(pemBody(app.PrivateKeyPEM), tok, "hunter2", strings.Trim(fmt.Sprint(inner), "[]"), hex.EncodeToString(inner))
	leaks := func(text string) bool {
		return slices.ContainsFunc(secrets, func(s string) bool { return strings.Contains(text, s) })
	}
	if leaks(out.String()) {
		t.Fatalf("output contains a secret:\n%s", out.String())
	}
	// Control: the same struct without its Format method leaks, and the check finds it.
	type plainConfig githubapp.Config
	for _, verb := range []string{"%v", "%x"} {
		if !leaks(fmt.Sprintf(verb, plainConfig(cfg))) {
			t.Fatalf("the leak check cannot fail (%s)", verb)
		}
	}
}

// TestRevokeDuringMint: a Revoke that arrives while a mint is in flight waits for it and revokes its
// token too, so no token outlives the run.
func TestRevokeDuringMint(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now})
	release := make(chan struct{})
	var mints atomic.Int32
	src := sourceVia(t, app, clk, slowMint(app, release, &mints))

	go src.Token(context.Background()) //nolint:errcheck // the token is checked on the fake
	for mints.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	revoked := make(chan error, 1)
	go func() { revoked <- src.Revoke(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-revoked; err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	toks := app.Tokens()
	if len(toks) != 1 || !toks[0].Revoked {
		t.Fatalf("the in-flight mint's token survived Revoke (%d tokens)", len(toks))
	}
	if _, err := src.Token(context.Background()); !errors.Is(err, githubapp.ErrRevoked) {
		t.Errorf("Token after Revoke: %v, want ErrRevoked", err)
	}
}

// TestRefreshFailure: inside the refresh margin, a failed refresh still hands out the current token
// while it has a minute left, retries at most every 30 seconds, and fails once the token is nearly dead.
func TestRefreshFailure(t *testing.T) {
	clk := newClock()
	app := newApp(t, fakegithub.Options{Now: clk.Now})
	var failing atomic.Bool
	var attempts atomic.Int32
	src := sourceVia(t, app, clk, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			attempts.Add(1)
			if failing.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"message":"Service Unavailable"}`))
				return
			}
		}
		app.Handler().ServeHTTP(w, r)
	})
	ctx := context.Background()
	first, err := src.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)

	steps := []struct {
		advance      time.Duration
		wantAttempts int32
		wantTok      string // "" means an error
	}{
		{51 * time.Minute, 2, first},            // inside the margin: refresh fails, old token served
		{0, 2, first},                           // backing off: no new attempt
		{29 * time.Second, 2, first},            // still backing off
		{time.Second, 3, first},                 // 30 s later: one more attempt
		{7*time.Minute + 31*time.Second, 4, ""}, // 59 min: under a minute left, the error surfaces
		{0, 5, ""},                              // and every call retries
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		tok, err := src.Token(ctx)
		if st.wantTok == "" {
			var apiErr *githubapp.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
				t.Fatalf("step %d: Token = %v, want the refresh's 503", i, err)
			}
		} else if err != nil || tok != st.wantTok {
			t.Fatalf("step %d: Token = %v, want the current token", i, err)
		}
		if n := attempts.Load(); n != st.wantAttempts {
			t.Fatalf("step %d: %d mint attempts, want %d", i, n, st.wantAttempts)
		}
	}
	failing.Store(false)
	tok, err := src.Token(ctx)
	if err != nil || tok == first || !app.Valid(tok) {
		t.Fatalf("after recovery: %v, want a new valid token", err)
	}
}
