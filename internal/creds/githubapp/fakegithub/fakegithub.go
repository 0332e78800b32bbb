// Package fakegithub is a GitHub API for tests: a local HTTP(S) server speaking the real GitHub App
// endpoints that cordon uses, strict where GitHub is strict, so that a test passing against it says
// something about GitHub.
//
// It authenticates the app by verifying its JWT (RS256 only, against the app's public key, issuer and
// time window checked), issues installation tokens only within the installation's repositories and the
// app's permissions (422 otherwise, like GitHub), revokes them, and records everything for assertions.
// Authorize lets another test server ask whether a token may read or write a repository, and GitAuth
// wraps a git smart-HTTP backend with that check, so an end-to-end test can see the scope a token
// really carries.
//
// Endpoints: GET /app and POST /app/installations/{id}/access_tokens (app JWT), DELETE
// /installation/token and GET /installation/repositories (installation token). Only the app's public
// key is needed to verify; NewApp also makes the private key, since a test plays the app's operator too.
// It is test code (it imports testing); nothing in cordon's binary may import it.
package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxJWTLifetime is GitHub's limit on an app JWT: exp at most ten minutes after now (and after iat).
const maxJWTLifetime = 10 * time.Minute

// Options describe the app, its one installation and how the fake behaves. Zero values take defaults.
type Options struct {
	// AppID is the app's id, the JWT issuer the fake expects. Default 1.
	AppID int64
	// InstallationID is the installation's id. Default 1000.
	InstallationID int64
	// Owner is the account the app is installed on. Default "acme".
	Owner string
	// Repositories in the installation, names without owner. Default "app", "docs", "infra".
	Repositories []string
	// Permissions the app has on the installation; a token may ask for these or less. Default contents,
	// pull_requests and issues write, metadata read.
	Permissions map[string]string
	// TokenTTL is how long an issued token lives. Default one hour, like GitHub.
	TokenTTL time.Duration
	// Now is the fake's clock, for JWT checks and token expiry. Default time.Now.
	Now func() time.Time
	// TLS serves HTTPS (HTTP/2 and HTTP/1.1) with httptest's certificate; Client trusts it.
	TLS bool
	// Key is the app's private key; nil generates one. Generating a 2048-bit key takes a noticeable
	// fraction of a second, so tests making many apps share one.
	Key *rsa.PrivateKey
	// OverGrant makes the fake misbehave: every token gets all of the installation's repositories and
	// permissions whatever was asked, as a server ignoring the request's scope would. For testing that
	// clients refuse a grant broader than they asked for.
	OverGrant bool
}

// App is a GitHub App with its key pair, installed once, with the fake API serving it.
type App struct {
	// ID is the app id, InstallationID its installation's, Owner the installation's account.
	ID             int64
	InstallationID int64
	Owner          string
	// PrivateKeyPEM is the app's key as GitHub hands it out (PKCS#1 PEM); Key is the same, parsed.
	PrivateKeyPEM []byte
	Key           *rsa.PrivateKey
	// Server is the fake API, closed when the test ends.
	*Server
}

// NewApp makes a key pair and starts a fake GitHub that knows the app by its public key.
func NewApp(t testing.TB, o Options) *App {
	t.Helper()
	key := o.Key
	if key == nil {
		_, key = GenerateKey(t)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	s := NewServer(t, &key.PublicKey, o)
	return &App{ID: s.appID, InstallationID: s.inst.id, Owner: s.inst.owner, PrivateKeyPEM: pemBytes, Key: key, Server: s}
}

// GenerateKey makes a 2048-bit RSA key, the size GitHub issues, and its PKCS#1 PEM form.
func GenerateKey(t testing.TB) ([]byte, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("generate RSA key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), key
}

// Token is an installation token the fake issued, as recorded for assertions.
type Token struct {
	// Value is the token itself.
	Value string
	// Repositories it covers, as full names ("acme/app").
	Repositories []string
	// Permissions it carries, metadata:read included when the app has it.
	Permissions map[string]string
	// IssuedAt and ExpiresAt by the fake's clock.
	IssuedAt, ExpiresAt time.Time
	// Revoked is set by DELETE /installation/token.
	Revoked bool
}

// JWT is an app JWT the fake accepted: proof a client authenticated properly, with the claims it sent.
type JWT struct {
	Issuer              string
	IssuedAt, ExpiresAt time.Time
}

type installation struct {
	id          int64
	owner       string
	repos       []string // names, index+1 is the repository id
	permissions map[string]string
}

// Server is the fake API. Its methods are safe for concurrent use with the requests it serves.
type Server struct {
	appID     int64
	pub       *rsa.PublicKey
	inst      installation
	ttl       time.Duration
	now       func() time.Time
	overGrant bool
	handler   http.Handler
	httpSrv   *httptest.Server

	mu     sync.Mutex
	tokens []*Token
	jwts   []JWT
}

// NewServer starts a fake GitHub for the app whose public key is pub. Most tests want NewApp.
func NewServer(t testing.TB, pub *rsa.PublicKey, o Options) *Server {
	t.Helper()
	s := &Server{
		appID: o.AppID,
		pub:   pub,
		inst: installation{
			id:          o.InstallationID,
			owner:       o.Owner,
			repos:       slices.Clone(o.Repositories),
			permissions: maps.Clone(o.Permissions),
		},
		ttl:       o.TokenTTL,
		now:       o.Now,
		overGrant: o.OverGrant,
	}
	if s.appID == 0 {
		s.appID = 1
	}
	if s.inst.id == 0 {
		s.inst.id = 1000
	}
	if s.inst.owner == "" {
		s.inst.owner = "acme"
	}
	if s.inst.repos == nil {
		s.inst.repos = []string{"app", "docs", "infra"}
	}
	if s.inst.permissions == nil {
		s.inst.permissions = map[string]string{"contents": "write", "pull_requests": "write", "issues": "write", "metadata": "read"}
	}
	if s.ttl == 0 {
		s.ttl = time.Hour
	}
	if s.now == nil {
		s.now = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /app", s.getApp)
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", s.createToken)
	mux.HandleFunc("DELETE /installation/token", s.revokeToken)
	mux.HandleFunc("GET /installation/repositories", s.listRepositories)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "Not Found")
	})
	s.handler = mux
	s.httpSrv = httptest.NewUnstartedServer(mux)
	if o.TLS {
		s.httpSrv.EnableHTTP2 = true
		s.httpSrv.StartTLS()
	} else {
		s.httpSrv.Start()
	}
	t.Cleanup(s.httpSrv.Close)
	return s
}

// URL is the API root to configure clients with (no trailing slash).
func (s *Server) URL() string { return s.httpSrv.URL }

// Client is an HTTP client that trusts the fake's certificate when it serves TLS.
func (s *Server) Client() *http.Client { return s.httpSrv.Client() }

// Handler serves the API at the root; mount it under a prefix to play GitHub Enterprise ("/api/v3").
func (s *Server) Handler() http.Handler { return s.handler }

// Tokens returns copies of all tokens issued so far, oldest first.
func (s *Server) Tokens() []Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Token, len(s.tokens))
	for i, t := range s.tokens {
		out[i] = *t
		out[i].Repositories = slices.Clone(t.Repositories)
		out[i].Permissions = maps.Clone(t.Permissions)
	}
	return out
}

// JWTs returns the app JWTs the fake accepted, oldest first.
func (s *Server) JWTs() []JWT {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jwts)
}

// Revoked reports whether tok was issued and then revoked.
func (s *Server) Revoked(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.lookup(tok)
	return t != nil && t.Revoked
}

// Valid reports whether tok was issued, is not revoked and has not expired: whether GitHub would
// accept it now.
func (s *Server) Valid(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validLocked(tok) != nil
}

// Authorize reports whether tok may read (or, with write, push to) the repository "owner/name" (a
// ".git" suffix is ignored), judged as GitHub judges git over HTTPS: the token is valid, covers the
// repository, and has contents:read, or contents:write to write.
func (s *Server) Authorize(tok, repo string, write bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.validLocked(tok)
	if t == nil {
		return false
	}
	repo = strings.TrimSuffix(repo, ".git")
	if !slices.ContainsFunc(t.Repositories, func(r string) bool { return strings.EqualFold(r, repo) }) {
		return false
	}
	switch t.Permissions["contents"] {
	case "write", "admin":
		return true
	case "read":
		return !write
	}
	return false
}

func (s *Server) lookup(tok string) *Token {
	for _, t := range s.tokens {
		if t.Value == tok {
			return t
		}
	}
	return nil
}

func (s *Server) validLocked(tok string) *Token {
	t := s.lookup(tok)
	if t == nil || t.Revoked || !s.now().Before(t.ExpiresAt) {
		return nil
	}
	return t
}

// checkJWT authenticates the app as GitHub does. It returns GitHub's message for a 401 on failure.
func (s *Server) checkJWT(r *http.Request) (string, bool) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || raw == "" {
		return "A JSON web token could not be decoded (fake: no Bearer authorization)", false
	}
	now := s.now()
	claims := jwt.MapClaims{}
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256"}), // not "none", not HS256 keyed with the public key
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithIssuedAt(),
		jwt.WithExpirationRequired(),
	)
	if _, err := parser.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return s.pub, nil }); err != nil {
		return "A JSON web token could not be decoded (fake: " + err.Error() + ")", false
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil {
		return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued", false
	}
	exp, _ := claims.GetExpirationTime() // required and parsed by the parser above
	if exp.Sub(now) > maxJWTLifetime || exp.Sub(iat.Time) > maxJWTLifetime {
		return "'Expiration time' claim ('exp') is too far in the future", false
	}
	var iss string
	switch v := claims["iss"].(type) {
	case string:
		iss = v
	case float64: // GitHub accepts the app id as a JSON number too
		iss = strconv.FormatFloat(v, 'f', -1, 64)
	}
	if iss != strconv.FormatInt(s.appID, 10) {
		return "Integration not found (fake: iss does not name this app)", false
	}
	s.mu.Lock()
	s.jwts = append(s.jwts, JWT{Issuer: iss, IssuedAt: iat.Time, ExpiresAt: exp.Time})
	s.mu.Unlock()
	return "", true
}

// installationToken returns the valid token the request authenticates with ("Bearer" or "token").
func (s *Server) installationToken(r *http.Request) *Token {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		tok, ok = strings.CutPrefix(h, "token ")
	}
	if !ok || tok == "" {
		return nil
	}
	return s.validLocked(tok)
}

type repoJSON struct {
	ID       int64     `json:"id"`
	Name     string    `json:"name"`
	FullName string    `json:"full_name"`
	Private  bool      `json:"private"`
	Owner    loginJSON `json:"owner"`
}

type loginJSON struct {
	Login string `json:"login"`
}

func (s *Server) repoJSON(name string) repoJSON {
	id := int64(slices.Index(s.inst.repos, name) + 1)
	return repoJSON{ID: id, Name: name, FullName: s.inst.owner + "/" + name, Private: true, Owner: loginJSON{s.inst.owner}}
}

func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	if msg, ok := s.checkJWT(r); !ok {
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":          s.appID,
		"slug":        "cordon-test",
		"name":        "cordon test app",
		"owner":       loginJSON{s.inst.owner},
		"permissions": s.inst.permissions,
	})
}

// levels orders permission levels for "within the app's grant".
var levels = map[string]int{"read": 1, "write": 2, "admin": 3}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	if msg, ok := s.checkJWT(r); !ok {
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	if id, err := strconv.ParseInt(r.PathValue("id"), 10, 64); err != nil || id != s.inst.id {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	var req struct {
		Repositories  []string          `json:"repositories"`
		RepositoryIDs []int64           `json:"repository_ids"`
		Permissions   map[string]string `json:"permissions"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "Problems parsing JSON")
			return
		}
	}

	var repos []string // names within the installation, canonical case
	for _, name := range req.Repositories {
		i := slices.IndexFunc(s.inst.repos, func(r string) bool { return strings.EqualFold(r, name) })
		if i < 0 {
			writeError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
		repos = appendUnique(repos, s.inst.repos[i])
	}
	for _, id := range req.RepositoryIDs {
		if id < 1 || id > int64(len(s.inst.repos)) {
			writeError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
		repos = appendUnique(repos, s.inst.repos[id-1])
	}
	selection := "selected"
	if len(repos) == 0 { // GitHub: no list means every repository of the installation
		selection = "all"
		repos = slices.Clone(s.inst.repos)
	}

	perms := map[string]string{}
	for p, level := range req.Permissions {
		have, ok := s.inst.permissions[p]
		if _, known := levels[level]; !known || !ok || levels[level] > levels[have] {
			writeError(w, http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation.")
			return
		}
		perms[p] = level
	}
	if len(req.Permissions) == 0 { // no list means all of the app's permissions
		perms = maps.Clone(s.inst.permissions)
	}
	if lvl, ok := s.inst.permissions["metadata"]; ok && perms["metadata"] == "" {
		perms["metadata"] = lvl // mandatory for every app; GitHub lists it on every token
	}
	if s.overGrant {
		selection, repos, perms = "all", slices.Clone(s.inst.repos), maps.Clone(s.inst.permissions)
	}

	now := s.now()
	tok := &Token{
		Value:       "ghs_" + rand.Text(),
		Permissions: perms,
		IssuedAt:    now,
		ExpiresAt:   now.Add(s.ttl).Truncate(time.Second),
	}
	out := make([]repoJSON, len(repos))
	for i, name := range repos {
		out[i] = s.repoJSON(name)
		tok.Repositories = append(tok.Repositories, out[i].FullName)
	}
	s.mu.Lock()
	s.tokens = append(s.tokens, tok)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"token":                tok.Value,
		"expires_at":           tok.ExpiresAt.UTC().Format(time.RFC3339),
		"permissions":          perms,
		"repository_selection": selection,
		"repositories":         out,
	})
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	t := s.installationToken(r)
	if t != nil {
		t.Revoked = true
	}
	s.mu.Unlock()
	if t == nil {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listRepositories is GET /installation/repositories: what a token can see, a cheap authenticated call
// for end-to-end tests of token injection.
func (s *Server) listRepositories(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	t := s.installationToken(r)
	var names []string
	if t != nil {
		names = slices.Clone(t.Repositories)
	}
	s.mu.Unlock()
	if t == nil {
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	out := make([]repoJSON, 0, len(names))
	for _, full := range names {
		out = append(out, s.repoJSON(full[len(s.inst.owner)+1:]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(out), "repositories": out})
}

func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, fmt.Sprintf("fakegithub: encode response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

// Clock is a settable time source for tests that share one clock between the fake (Options.Now) and
// the client under test: token expiry and JWT windows are then tested without waiting.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
