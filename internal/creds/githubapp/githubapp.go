// Package githubapp mints the GitHub token a sandboxed agent works with: a GitHub App installation
// token, scoped to the repositories and permissions the run's policy grants, refreshed before its hour
// runs out, and revoked when the run ends.
//
// The token never enters the sandbox (the agent sees a placeholder that cordon's gateway swaps for the
// real value on requests to GitHub), but it is still a bearer credential, so it is made as small as it
// can be: one installation, named repositories, named permissions, an expiry GitHub enforces, and an
// explicit revocation so that it dies with the run rather than an hour later. Anything GitHub grants
// beyond what was asked is refused and revoked on the spot: the policy, not the app's installation, is
// what decides the agent's authority.
package githubapp

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	defaultBaseURL = "https://api.github.com"
	// apiVersion pins the REST API version the request and response shapes here were written against.
	apiVersion = "2022-11-28"
	// refreshMargin: a token with less than this left is replaced, so a request the gateway is about to
	// authorize (a long git push, say) never starts with a token about to expire.
	refreshMargin = 10 * time.Minute
	// minUsable: when a refresh fails, the token being replaced is still handed out while it has at
	// least this long to live, so that a GitHub hiccup inside the refresh margin costs the agent nothing.
	minUsable = time.Minute
	// retryBackoff spaces refresh attempts after a failure while the old token is still usable, so that
	// an outage is not met with a mint attempt per proxied request.
	retryBackoff = 30 * time.Second
	// requestTimeout bounds one call to the API, whether or not the caller's context has a deadline.
	requestTimeout = 30 * time.Second
	// maxResponse bounds what is read from the API, so a broken or hostile server cannot exhaust memory.
	maxResponse = 1 << 20
)

// ErrRevoked is returned by Token after Revoke: the run is over, and a source that minted again would
// leave a live token nobody revokes.
var ErrRevoked = errors.New("githubapp: token source already revoked")

// Config describes the app, the installation and the scope of the token. It holds the app's private key,
// so it formats and logs without it.
type Config struct {
	// AppID is the GitHub App's numeric id, the JWT's issuer.
	AppID int64
	// PrivateKeyPEM is the app's RSA private key, PKCS#1 or PKCS#8 PEM; the caller reads the file, so
	// that where keys live stays the caller's decision.
	PrivateKeyPEM []byte
	// InstallationID is the installation (one account's grant of the app) the token acts for.
	InstallationID int64
	// Repositories the token may reach: "owner/name" or "name" (within the installation's owner).
	// Required: GitHub reads no list as all of the installation's repositories.
	Repositories []string
	// Permissions of the token, e.g. {"contents": "write", "pull_requests": "write"}; levels are read,
	// write or admin. Required, for the same reason as Repositories.
	Permissions map[string]string
	// BaseURL is the API root: "https://api.github.com" when empty; GitHub Enterprise Server is
	// "https://HOST/api/v3". Plain http is accepted only for a loopback host (tests).
	BaseURL string
	// HTTPClient makes the API calls; nil means a client with a 30 s timeout. Redirects are never
	// followed, whichever client is used: a credential is sent only where it was configured to go.
	HTTPClient *http.Client
	// Now is the clock, for tests; nil means time.Now.
	Now func() time.Time
}

// Format prints the configuration without its private key, whatever the verb, so that a Config in a
// log line or an error message cannot leak it.
func (c Config) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "githubapp.Config{AppID:%d InstallationID:%d Repositories:%q Permissions:%v BaseURL:%q PrivateKeyPEM:[redacted]}",
		c.AppID, c.InstallationID, c.Repositories, c.Permissions, redactURL(c.BaseURL))
}

// LogValue is what log/slog records for a Config: the same fields as Format, never the key.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("app_id", c.AppID),
		slog.Int64("installation_id", c.InstallationID),
		slog.Any("repositories", c.Repositories),
		slog.Any("permissions", c.Permissions),
		slog.String("base_url", redactURL(c.BaseURL)),
	)
}

// Source hands out an installation token for one run. It mints on first use, replaces the token when
// less than ten minutes of it remain, and revokes every token it minted when Revoke is called. It is
// safe for concurrent use; concurrent callers share one mint.
type Source struct {
	appID          int64
	installationID int64
	key            *rsa.PrivateKey
	scope          scope
	base           string // no trailing slash
	client         *http.Client
	now            func() time.Time

	mu       sync.Mutex
	current  *token    // the token handed out; nil before the first mint
	live     []*token  // minted and not yet known revoked or expired, the current one included
	inflight *mintCall // the mint in progress, shared by everyone waiting for it
	closed   bool      // Revoke was called
	retryAt  time.Time // after a failed refresh: no new attempt before this while current is usable
}

// token is one installation token and when it dies.
type token struct {
	value   string
	minted  time.Time // by the local clock
	expires time.Time // GitHub's expires_at
}

// fresh reports whether the token can still be handed out at now. The margin is ten minutes of a normal
// one-hour token, or half the lifetime of an unusually short one, so that a server issuing short tokens
// does not make every call mint.
func (t *token) fresh(now time.Time) bool {
	margin := refreshMargin
	if life := t.expires.Sub(t.minted); life < 2*margin {
		margin = life / 2
	}
	return now.Before(t.expires.Add(-margin))
}

// usable reports whether the token may still be handed out when its replacement could not be minted.
func (t *token) usable(now time.Time) bool {
	return now.Before(t.expires.Add(-minUsable))
}

// mintCall is one mint in progress; done is closed once tok or err is set.
type mintCall struct {
	done chan struct{}
	tok  *token
	err  error
}

// New checks the configuration and parses the key. It makes no network call, so a misconfiguration is
// found before the sandbox starts and a working one costs nothing until the agent uses GitHub.
func New(cfg Config) (*Source, error) {
	if cfg.AppID <= 0 {
		return nil, errors.New("githubapp: AppID must be a positive app id")
	}
	if cfg.InstallationID <= 0 {
		return nil, errors.New("githubapp: InstallationID must be a positive installation id")
	}
	key, err := parsePrivateKey(cfg.PrivateKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("githubapp: app %d private key: %w", cfg.AppID, err)
	}
	sc, err := parseScope(cfg.Repositories, cfg.Permissions)
	if err != nil {
		return nil, fmt.Errorf("githubapp: installation %d: %w", cfg.InstallationID, err)
	}
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("githubapp: BaseURL: %w", err)
	}
	client := &http.Client{Timeout: requestTimeout}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Source{
		appID:          cfg.AppID,
		installationID: cfg.InstallationID,
		key:            key,
		scope:          sc,
		base:           base,
		client:         client,
		now:            now,
	}, nil
}

func parseBaseURL(s string) (string, error) {
	if s == "" {
		return defaultBaseURL, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", errors.New("does not parse as a URL") // not quoted: it may hold a password
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.Host == "" {
		return "", fmt.Errorf("%q: want scheme://host[:port][/path], nothing else", u.Redacted())
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	default:
		return "", fmt.Errorf("%q: want https (plain http only to a loopback host)", u.Redacted())
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// redactURL shows a URL without a password, for printing a Config that New has not checked yet.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[unparseable]"
	}
	return u.Redacted()
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Format prints which app and installation the source is for, never the key or a token.
func (s *Source) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "githubapp.Source{app %d, installation %d, repositories %q}", s.appID, s.installationID, s.scope.repos)
}

// LogValue is what log/slog records for a Source: the same as Format.
func (s *Source) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("app_id", s.appID),
		slog.Int64("installation_id", s.installationID),
		slog.Any("repositories", s.scope.repos),
	)
}

// Token returns an installation token with at least ten minutes to live, minting one if needed. Callers
// that arrive while a mint is in progress wait for it rather than mint again. The mint itself does not
// stop when the caller's context does (others may be waiting for it) but is bounded by its own timeout.
//
// If a refresh fails while the current token still has a minute or more to live, Token returns that
// token and tries again at most every 30 seconds; past that, the refresh's error is returned.
func (s *Source) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", ErrRevoked
	}
	now := s.now()
	if t := s.current; t != nil && (t.fresh(now) || now.Before(s.retryAt) && t.usable(now)) {
		s.mu.Unlock()
		return t.value, nil
	}
	c := s.inflight
	if c == nil {
		c = &mintCall{done: make(chan struct{})}
		s.inflight = c
		go s.mint(context.WithoutCancel(ctx), c)
	}
	s.mu.Unlock()

	select {
	case <-c.done:
		if c.err == nil {
			return c.tok.value, nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if t := s.current; t != nil && !s.closed && t.usable(s.now()) {
			return t.value, nil
		}
		return "", c.err
	case <-ctx.Done():
		return "", fmt.Errorf("githubapp: waiting for installation token: %w", ctx.Err())
	}
}

// mint runs one mint for everyone waiting on c. A token it replaces stays in live: requests already
// using it finish, and Revoke still kills it.
func (s *Source) mint(ctx context.Context, c *mintCall) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	tok, err := s.requestToken(ctx)

	s.mu.Lock()
	if err == nil {
		now := s.now()
		s.live = slices.DeleteFunc(s.live, func(t *token) bool { return !now.Before(t.expires) })
		s.live = append(s.live, tok)
		s.current = tok
	} else {
		s.retryAt = s.now().Add(retryBackoff)
	}
	s.inflight = nil
	c.tok, c.err = tok, err
	s.mu.Unlock()
	close(c.done)
}

// accessTokenResponse is the body of a successful POST /app/installations/{id}/access_tokens.
type accessTokenResponse struct {
	Token               string              `json:"token"`
	ExpiresAt           string              `json:"expires_at"`
	Permissions         map[string]string   `json:"permissions"`
	RepositorySelection string              `json:"repository_selection"`
	Repositories        []grantedRepository `json:"repositories"`
}

func (s *Source) requestToken(ctx context.Context) (*token, error) {
	const op = "mint installation token"
	now := s.now()
	appJWT, err := signAppJWT(s.key, s.appID, now)
	if err != nil {
		return nil, fmt.Errorf("githubapp: %s: %w", op, err)
	}
	body, err := json.Marshal(struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}{s.scope.repos, s.scope.permissions})
	if err != nil {
		return nil, fmt.Errorf("githubapp: %s: encode request: %w", op, err)
	}
	endpoint := fmt.Sprintf("%s/app/installations/%d/access_tokens", s.base, s.installationID)
	status, data, err := s.call(ctx, op, http.MethodPost, endpoint, appJWT, body)
	if err != nil {
		return nil, err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return nil, apiError(op, status, data, appJWT)
	}
	var resp accessTokenResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		// The body may hold a token; the JSON error would quote none of it, but say nothing more anyway.
		return nil, fmt.Errorf("githubapp: %s: HTTP %d response is not the expected JSON", op, status)
	}
	if !validTokenValue(resp.Token) {
		return nil, fmt.Errorf("githubapp: %s: HTTP %d response has no usable token (empty, or characters not allowed in an HTTP header)", op, status)
	}
	tok := &token{value: resp.Token, minted: now}
	// From here on a token exists on GitHub's side: any refusal revokes it before returning.
	refuse := func(err error) (*token, error) {
		if msg := err.Error(); strings.Contains(msg, tok.value) { // a server echoing the token into a field
			err = errors.New(strings.ReplaceAll(msg, tok.value, "[redacted]"))
		}
		err = fmt.Errorf("githubapp: %s for installation %d: %w", op, s.installationID, err)
		if rerr := s.deleteToken(ctx, tok.value); rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("and revoking the refused token failed: %w", rerr))
		}
		return nil, fmt.Errorf("%w (the token was revoked)", err)
	}
	tok.expires, err = time.Parse(time.RFC3339, resp.ExpiresAt)
	if err != nil {
		return refuse(fmt.Errorf("expires_at %q is not an RFC 3339 time", printable(resp.ExpiresAt)))
	}
	if !tok.expires.After(now) {
		return refuse(fmt.Errorf("token expires at %s, before now (%s)", tok.expires.Format(time.RFC3339), now.Format(time.RFC3339)))
	}
	if err := s.scope.checkGrant(resp.RepositorySelection, resp.Repositories, resp.Permissions); err != nil {
		return refuse(fmt.Errorf("grant differs from the request: %w", err))
	}
	return tok, nil
}

// validTokenValue refuses what could not be sent back safely in an Authorization header. The format is
// otherwise GitHub's business: no length or prefix is assumed.
func validTokenValue(s string) bool {
	if s == "" || len(s) > 4096 {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// Revoke revokes every token this source minted that may still be alive, waiting first for a mint in
// progress. Afterwards Token returns ErrRevoked. It is idempotent and does nothing if no token was ever
// minted. A token GitHub no longer accepts (401) counts as revoked; a token that failed to revoke is kept
// and retried by the next call, and the error says so.
func (s *Source) Revoke(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	c := s.inflight
	s.mu.Unlock()
	if c != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
			return fmt.Errorf("githubapp: revoke: waiting for a mint in progress: %w", ctx.Err())
		}
	}

	s.mu.Lock()
	toks := slices.Clone(s.live)
	s.current = nil
	s.mu.Unlock()

	var errs []error
	for _, t := range toks {
		var err error
		if s.now().Before(t.expires) {
			err = s.deleteToken(ctx, t.value)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.live = slices.DeleteFunc(s.live, func(x *token) bool { return x == t })
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// deleteToken revokes one installation token: DELETE /installation/token authenticated by the token.
func (s *Source) deleteToken(ctx context.Context, tok string) error {
	const op = "revoke installation token"
	status, data, err := s.call(ctx, op, http.MethodDelete, s.base+"/installation/token", tok, nil)
	if err != nil {
		return err
	}
	switch status {
	case http.StatusNoContent, http.StatusUnauthorized: // 401: already revoked or expired
		return nil
	}
	return apiError(op, status, data, tok)
}

// call makes one API request with cred as the bearer credential and returns the status and the body,
// read up to maxResponse. Transport errors name the operation and the URL, which carries no secret.
func (s *Source) call(ctx context.Context, op, method, endpoint, cred string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, endpoint, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("githubapp: %s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", apiVersion)
	req.Header.Set("User-Agent", "cordon-githubapp")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("githubapp: %s: %w", op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return 0, nil, fmt.Errorf("githubapp: %s: HTTP %d, reading the response: %w", op, resp.StatusCode, err)
	}
	if len(data) > maxResponse {
		return 0, nil, fmt.Errorf("githubapp: %s: HTTP %d response larger than %d bytes", op, resp.StatusCode, maxResponse)
	}
	return resp.StatusCode, data, nil
}

// APIError is an unexpected answer from the GitHub API. It carries the status, so that callers can tell
// a wrong key or app id (401) from a missing installation (404) or a scope the installation lacks
// (422), and GitHub's own explanation, but never the credential that was sent.
type APIError struct {
	// Op is what was attempted, e.g. "mint installation token".
	Op string
	// StatusCode is the HTTP status GitHub answered with.
	StatusCode int
	// Message is GitHub's "message" field, made printable and with any credential sent removed.
	Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "no message"
	}
	return fmt.Sprintf("githubapp: %s: HTTP %d %s: %s", e.Op, e.StatusCode, http.StatusText(e.StatusCode), msg)
}

// apiError builds the error for a non-success answer. cred is removed from GitHub's message in case a
// server echoes what it was sent.
func apiError(op string, status int, body []byte, cred string) error {
	var m struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &m) // a body that is not GitHub's JSON leaves the message empty
	msg := m.Message
	if cred != "" {
		msg = strings.ReplaceAll(msg, cred, "[redacted]")
	}
	return &APIError{Op: op, StatusCode: status, Message: printable(msg)}
}
