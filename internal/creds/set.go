package creds

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
	"github.com/cordon-sandbox/cordon/internal/hostname"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// MaxBodyBytes bounds the request body searched for placeholders where a
// credential allows the body (Inject.Body). A larger body is sent unchanged
// and the audit details say it was not searched.
const MaxBodyBytes = 1 << 20

// Audit detail keys Modify returns. Values name credentials and places,
// never values.
const (
	// DetailInjected lists the credentials whose real value was put into
	// the request (comma-separated names).
	DetailInjected = audit.DetailCredentials
	// DetailMisuse lists placeholders found where their credential is not
	// allowed ("NAME in header X-Foo; NAME in URL"): the request went out
	// with the placeholder unchanged. The caller should log it as attempted
	// misuse (an agent sending a credential somewhere it was not meant for).
	DetailMisuse = audit.DetailCredentialMisuse
	// DetailBodySkipped says a body that may hold a placeholder was too
	// large (or encoded) to search, and went out unchanged.
	DetailBodySkipped = "credential_body_skipped"
	// DetailCleartext lists the credentials whose placeholder a request to
	// their host carried where the value would go, on a request that would
	// have gone out in cleartext: it was refused (values go only over TLS).
	DetailCleartext = "credential_cleartext"
	// DetailRange lists the credentials a request with Range or If-Range
	// would have carried: it was refused (see Inject.Ranges).
	DetailRange = "credential_range"
)

// Schemes for Inject.Scheme.
const (
	// SchemeBearer allows the placeholder as the token of
	// "Authorization: Bearer TOKEN" (or "token TOKEN", GitHub's form), and in
	// the Basic form too: git over HTTPS sends the same token as a Basic
	// password (or user name), and forges accept it there.
	SchemeBearer = "bearer"
	// SchemeBasic allows the placeholder as the user name or password of
	// "Authorization: Basic base64(user:password)", which git over HTTPS
	// sends.
	SchemeBasic = "basic"
)

// Inject says where a credential's real value may be put: on requests to
// Hosts only, and there only in the named places. At least one place must
// be given (AWS credentials take none: they are re-signed).
type Inject struct {
	// Hosts are exact host names or "*.example.com" (any subdomain of
	// example.com, not example.com itself). A wildcard hands the value to
	// every subdomain: use one only where the credential's issuer controls
	// them all (not under a domain where anyone may own a subdomain).
	Hosts []string
	// Header is a request header whose values may hold the placeholder.
	Header string
	// Scheme is SchemeBearer, SchemeBasic or empty.
	Scheme string
	// Body allows the placeholder in request bodies up to MaxBodyBytes.
	Body bool
	// Ranges allows the value into requests that ask for part of an answer
	// (Range, If-Range, Request-Range). Without it they are refused: a host
	// that echoes the request would return the value in pieces, each too
	// short to be recognised and put back, which the agent joins.
	Ranges bool
}

// Spec is one credential. Exactly one of Source and AWS is set.
type Spec struct {
	// Name is the environment variable the agent finds the placeholder in
	// (for AWS it only names the credential in messages and audit details).
	Name string
	// Source yields the real value.
	Source Source
	// AWS, if set, makes this an AWS key pair: the agent gets placeholder
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN when
	// the real keys have one), and requests signed with them to Inject.Hosts
	// are signed again with the real keys.
	AWS awssig.KeySource
	// Inject says where the value may go.
	Inject Inject
	// Shape optionally names the prefix the placeholder must start with
	// (e.g. "sk-ant-api03-"), for a format the built-in list does not know.
	Shape string
}

type entry struct {
	name        string
	source      Source
	inject      Inject
	header      string // canonical form of inject.Header
	placeholder string

	aws       *awssig.Resigner
	awsPH     awssig.Keys
	awsTokens []string // placeholders to look for: key id, secret, session token

	lowerTokens []string // tokens(), lower-cased, for header names

	mu       sync.Mutex
	revealed []redact.Pair // values sent upstream, most recent last (see reveal)
}

// maxRevealed bounds the values a credential remembers having sent: a minting source's token
// changes every hour or so, and only recent ones can still be echoed.
const maxRevealed = 16

// reveal records values put into a request with what the sandbox had in their place, so that the
// same values in the upstream's answers can be put back (Redactions).
func (e *entry) reveal(ps ...redact.Pair) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range ps {
		if p.Secret == "" || slices.Contains(e.revealed, p) {
			continue
		}
		e.revealed = append(e.revealed, p)
		if len(e.revealed) > maxRevealed {
			e.revealed = slices.Delete(e.revealed, 0, 1)
		}
	}
}

// Set is a run's credentials: placeholders for the sandbox, real values kept
// here, and the rules that put them into requests. It is safe for
// concurrent use.
type Set struct {
	entries   []*entry
	closeOnce sync.Once
	closeErr  error
}

// Prepare reads every credential once (a source that fails stops the run:
// an agent must not start without a credential it was promised, nor with a
// source cordon could not check) and makes a placeholder for each. When it
// fails, the sources of specs are closed (revoking what they minted).
func Prepare(ctx context.Context, specs []Spec) (*Set, error) {
	s := &Set{}
	if err := s.prepare(ctx, specs); err != nil {
		var closeErr error
		for _, sp := range specs {
			if sp.Source != nil {
				closeErr = errors.Join(closeErr, sp.Source.Close(ctx))
			}
		}
		if closeErr != nil {
			err = errors.Join(err, fmt.Errorf("closing credential sources: %w", closeErr))
		}
		return nil, err
	}
	return s, nil
}

func (s *Set) prepare(ctx context.Context, specs []Spec) error {
	envNames := map[string]string{}
	claim := func(env, cred string) error {
		if other, dup := envNames[env]; dup {
			return fmt.Errorf("credentials %s and %s both set %s", other, cred, env)
		}
		envNames[env] = cred
		return nil
	}
	var used []string // every placeholder and real value, to check none contains another
	for i, sp := range specs {
		e, err := newEntry(sp)
		if err != nil {
			return fmt.Errorf("credential %d (%q): %w", i, sp.Name, err)
		}
		if sp.AWS != nil {
			real, err := sp.AWS.Keys(ctx)
			if err != nil {
				return fmt.Errorf("credential %s: %w", sp.Name, err)
			}
			if e.awsPH, err = awssig.NewPlaceholder(real); err != nil {
				return fmt.Errorf("credential %s: %w", sp.Name, err)
			}
			if e.aws, err = awssig.NewResigner(e.awsPH, real); err != nil {
				return fmt.Errorf("credential %s: %w", sp.Name, err)
			}
			e.awsTokens = []string{e.awsPH.AccessKeyID, e.awsPH.SecretAccessKey}
			e.aws.RefreshFrom(sp.AWS) // temporary keys (an assumed role's) are renewed before they expire
			if e.awsPH.SessionToken != "" {
				e.awsTokens = append(e.awsTokens, e.awsPH.SessionToken)
			}
			for _, env := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
				if err := claim(env, sp.Name); err != nil {
					return err
				}
			}
			used = append(used, e.awsTokens...)
			used = append(used, real.AccessKeyID, real.SecretAccessKey, real.SessionToken)
		} else {
			if err := claim(sp.Name, sp.Name); err != nil {
				return err
			}
			real, err := sp.Source.Secret(ctx)
			if err != nil {
				return fmt.Errorf("credential %s: %w", sp.Name, err)
			}
			if real.Empty() {
				return fmt.Errorf("credential %s: the source gave an empty value", sp.Name)
			}
			if e.placeholder, err = placeholderFor(real.Reveal(), sp.Shape); err != nil {
				return fmt.Errorf("credential %s: %w", sp.Name, err)
			}
			used = append(used, e.placeholder, real.Reveal())
		}
		for _, t := range e.tokens() {
			e.lowerTokens = append(e.lowerTokens, strings.ToLower(t))
		}
		s.entries = append(s.entries, e)
	}
	// Placeholders are random with at least 128 bits, so this never fires
	// unless randomness is broken; it guards substitution's premise that no
	// placeholder occurs inside another placeholder or a real value.
	for _, e := range s.entries {
		for _, p := range e.tokens() {
			n := 0
			for _, u := range used {
				if u != "" && strings.Contains(u, p) {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("credential %s: placeholder collides with another value", e.name)
			}
		}
	}
	return nil
}

func newEntry(sp Spec) (*entry, error) {
	if !validEnvName(sp.Name) {
		return nil, errors.New("name must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
	}
	e := &entry{name: sp.Name, source: sp.Source, inject: sp.Inject}
	if len(sp.Inject.Hosts) == 0 {
		return nil, errors.New("inject: no hosts")
	}
	e.inject.Hosts = nil
	for _, h := range sp.Inject.Hosts {
		p, err := normalizePattern(h)
		if err != nil {
			return nil, fmt.Errorf("inject: %w", err)
		}
		e.inject.Hosts = append(e.inject.Hosts, p)
	}
	switch sp.Inject.Scheme {
	case "", SchemeBearer, SchemeBasic:
	default:
		return nil, fmt.Errorf("inject: unknown scheme %q (want %q or %q)", sp.Inject.Scheme, SchemeBearer, SchemeBasic)
	}
	if sp.Inject.Header != "" {
		if !validToken(sp.Inject.Header) {
			return nil, fmt.Errorf("inject: %q is not a header name", sp.Inject.Header)
		}
		e.header = textproto.CanonicalMIMEHeaderKey(sp.Inject.Header)
	}
	places := sp.Inject.Header != "" || sp.Inject.Scheme != "" || sp.Inject.Body
	switch {
	case sp.AWS != nil && sp.Source != nil:
		return nil, errors.New("both a source and AWS keys")
	case sp.AWS != nil && (places || sp.Shape != ""):
		return nil, errors.New("AWS keys are re-signed: header, scheme, body and shape do not apply")
	case sp.AWS == nil && sp.Source == nil:
		return nil, errors.New("no source")
	case sp.AWS == nil && !places:
		return nil, errors.New("inject: no place for the value (header, scheme or body)")
	}
	return e, nil
}

// normalizePattern accepts "name" or "*.name" and returns it lower-case.
func normalizePattern(p string) (string, error) {
	rest, wild := strings.CutPrefix(p, "*.")
	n, err := hostname.Normalize(rest)
	if err != nil {
		return "", fmt.Errorf("host pattern %q: %w", p, err)
	}
	if wild {
		return "*." + n, nil
	}
	return n, nil
}

func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return pattern == host
}

func validEnvName(s string) bool {
	for i, c := range []byte(s) {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func validToken(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// tokens are the strings that identify this credential on the wire.
func (e *entry) tokens() []string {
	if e.aws != nil {
		return e.awsTokens
	}
	return []string{e.placeholder}
}

func (e *entry) boundTo(host string) bool {
	for _, p := range e.inject.Hosts {
		if matchHost(p, host) {
			return true
		}
	}
	return false
}

// Env returns NAME=placeholder for every credential, for the sandbox's
// environment (AWS credentials give AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
// and, for temporary keys, AWS_SESSION_TOKEN).
func (s *Set) Env() []string {
	var env []string
	for _, e := range s.entries {
		if e.aws == nil {
			env = append(env, e.name+"="+e.placeholder)
			continue
		}
		env = append(env, "AWS_ACCESS_KEY_ID="+e.awsPH.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+e.awsPH.SecretAccessKey)
		if e.awsPH.SessionToken != "" {
			env = append(env, "AWS_SESSION_TOKEN="+e.awsPH.SessionToken)
		}
	}
	return env
}

// Hosts returns every host pattern a credential is bound to, sorted and
// without repeats: the gateway must intercept these, or it cannot inject.
// Placeholders sent to hosts it does not intercept go out unseen (as
// worthless strings) and are not reported.
func (s *Set) Hosts() []string {
	var hosts []string
	for _, e := range s.entries {
		hosts = append(hosts, e.inject.Hosts...)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// Modify is the interception hook: it runs on every intercepted request to
// name (the connection's host name, already checked against the request's
// Host) before it goes upstream. For each credential bound to name it puts
// the real value in place of the placeholder where the credential allows,
// and re-signs AWS requests signed with placeholder keys. Placeholders left
// anywhere else in the request (other headers, the URL, a body it read) are
// sent unchanged and reported under DetailMisuse.
//
// Values go only over TLS: r.URL.Scheme must be "https" (the interceptor
// sets it when the request goes to an upstream whose certificate it
// verifies). A request that would carry a value any other way is refused,
// and so is one asking for part of an answer (Range) unless the credential
// allows it (Inject.Ranges); DetailCleartext and DetailRange say which.
//
// The returned details name credentials, never values. An error means the
// request must be refused: it is one of the above, a source failed, or an
// AWS request signed with the placeholder keys cannot be re-signed. Errors
// never hold values.
func (s *Set) Modify(r *http.Request, name string) (map[string]string, error) {
	host, err := hostname.Normalize(name)
	if err != nil {
		return nil, fmt.Errorf("credential injection: %w", err)
	}
	var injected, misuse []string
	details := map[string]string{}
	var body []byte // read when a bound credential allows the body
	for _, e := range s.entries {
		if e.boundTo(host) && e.inject.Body {
			var skipped string
			body, skipped, err = readBody(r)
			if err != nil {
				return nil, fmt.Errorf("credential %s: %w", e.name, err)
			}
			if skipped != "" {
				details[DetailBodySkipped] = skipped
			}
			break
		}
	}
	if err := s.refusal(r, host, body, details); err != nil {
		if body != nil {
			setBody(r, body)
		}
		return details, err
	}
	for _, e := range s.entries {
		if !e.boundTo(host) || e.aws != nil {
			continue
		}
		ok, err := e.inject1(r, &body)
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w", e.name, err)
		}
		if ok {
			injected = append(injected, e.name)
		}
	}
	if body != nil {
		setBody(r, body)
	}
	// AWS requests are re-signed last, over the request as it will be sent.
	for _, e := range s.entries {
		if !e.boundTo(host) || e.aws == nil {
			continue
		}
		ok, err := e.aws.Resign(r)
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w", e.name, err)
		}
		if ok {
			injected = append(injected, e.name)
			// The key id and session token went out in the request (the keys may have been renewed).
			real := e.aws.Current()
			e.reveal(redact.Pair{Secret: real.AccessKeyID, Replacement: e.awsPH.AccessKeyID},
				redact.Pair{Secret: real.SecretAccessKey, Replacement: e.awsPH.SecretAccessKey},
				redact.Pair{Secret: real.SessionToken, Replacement: e.awsPH.SessionToken})
		}
	}
	ps := places(r, body)
	for _, e := range s.entries {
		for _, where := range e.find(ps) {
			misuse = append(misuse, e.name+" in "+where)
		}
	}
	if len(injected) > 0 {
		details[DetailInjected] = strings.Join(injected, ",")
	}
	if len(misuse) > 0 {
		details[DetailMisuse] = strings.Join(misuse, "; ")
	}
	if len(details) == 0 {
		return nil, nil
	}
	return details, nil
}

// inject1 replaces e's placeholder in the places e allows. *body, if not
// nil, is the request's body read by readBody; the caller puts it back with
// setBody. It fetches the real value only when a placeholder is there.
func (e *entry) inject1(r *http.Request, body *[]byte) (bool, error) {
	var real string
	get := func() (string, error) {
		if real != "" {
			return real, nil
		}
		sec, err := e.source.Secret(r.Context())
		if err != nil {
			return "", err
		}
		if sec.Empty() {
			return "", errors.New("the source gave an empty value")
		}
		real = sec.Reveal()
		return real, nil
	}
	done := false
	if e.header != "" {
		vs := r.Header[e.header]
		for i, v := range vs {
			if strings.Contains(v, e.placeholder) {
				val, err := get()
				if err != nil {
					return false, err
				}
				vs[i], done = strings.ReplaceAll(v, e.placeholder, val), true
			}
		}
	}
	if e.inject.Scheme != "" {
		vs := r.Header["Authorization"]
		for i, v := range vs {
			nv, ok, err := replaceAuthorization(v, e.inject.Scheme, e.placeholder, get)
			if err != nil {
				return false, err
			}
			if ok {
				vs[i], done = nv, true
				// Basic credentials go out encoded: an echo of the header carries them so.
				_, sent, _ := strings.Cut(nv, " ")
				_, had, _ := strings.Cut(v, " ")
				e.reveal(redact.Pair{Secret: sent, Replacement: strings.TrimSpace(had)})
			}
		}
	}
	if e.inject.Body && *body != nil && bytes.Contains(*body, []byte(e.placeholder)) {
		val, err := get()
		if err != nil {
			return false, err
		}
		*body, done = bytes.ReplaceAll(*body, []byte(e.placeholder), []byte(val)), true
	}
	if done {
		e.reveal(redact.Pair{Secret: real, Replacement: e.placeholder})
	}
	return done, nil
}

// Redactions returns, for the answers of name (a connection's host), every credential value the
// gateway has sent to it with what the sandbox holds in its place: a host that echoes a request's
// credential (an error quoting the Authorization header, an API returning the key it was called
// with) must not hand the real value to the agent. Only values already sent are listed; a host
// cannot echo what it never received. Nil when there is nothing to put back.
func (s *Set) Redactions(name string) []redact.Pair {
	host, err := hostname.Normalize(name)
	if err != nil {
		return nil
	}
	var out []redact.Pair
	for _, e := range s.entries {
		if !e.boundTo(host) {
			continue
		}
		e.mu.Lock()
		out = append(out, e.revealed...)
		e.mu.Unlock()
	}
	return out
}

// replaceAuthorization puts the real value in place of placeholder in one
// Authorization value of the given scheme. ok is false (and v is returned)
// when the value is of another scheme or does not hold the placeholder.
func replaceAuthorization(v, scheme, placeholder string, get func() (string, error)) (string, bool, error) {
	kind, cred, found := strings.Cut(v, " ")
	if !found {
		return v, false, nil
	}
	switch strings.ToLower(kind) {
	case "bearer", "token":
		if scheme != SchemeBearer || !strings.Contains(cred, placeholder) {
			return v, false, nil
		}
		val, err := get()
		if err != nil {
			return "", false, err
		}
		return kind + " " + strings.ReplaceAll(cred, placeholder, val), true, nil
	case "basic":
		if scheme != SchemeBasic && scheme != SchemeBearer {
			return v, false, nil
		}
		user, pass, ok := decodeBasic(cred)
		if !ok || !strings.Contains(user, placeholder) && !strings.Contains(pass, placeholder) {
			return v, false, nil
		}
		val, err := get()
		if err != nil {
			return "", false, err
		}
		if strings.Contains(user, placeholder) && strings.Contains(val, ":") {
			return "", false, errors.New("the value holds ':' and cannot be a Basic user name")
		}
		user, pass = strings.ReplaceAll(user, placeholder, val), strings.ReplaceAll(pass, placeholder, val)
		return kind + " " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)), true, nil
	}
	return v, false, nil
}

// decodeBasic decodes the credentials of a Basic Authorization value,
// padded or not (clients differ).
func decodeBasic(cred string) (user, pass string, ok bool) {
	cred = strings.TrimSpace(cred)
	b, err := base64.StdEncoding.DecodeString(cred)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(cred); err != nil {
			return "", "", false
		}
	}
	user, pass, ok = strings.Cut(string(b), ":")
	return user, pass, ok
}

// readBody reads up to MaxBodyBytes of r's body. When the body is larger or
// content-encoded it is put back untouched, nil is returned, and skipped
// says why.
func readBody(r *http.Request) (body []byte, skipped string, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, "", nil
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, "content-encoded body not searched", nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading the request body: %w", err)
	}
	if len(b) > MaxBodyBytes {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		return nil, "body larger than " + strconv.Itoa(MaxBodyBytes) + " bytes not searched", nil
	}
	_ = r.Body.Close()
	if b == nil {
		b = []byte{}
	}
	return b, "", nil
}

func setBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	if r.Header.Get("Content-Length") != "" {
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
}

// place is a part of a request searched for placeholders; text is what it
// holds, decoded where an encoding could hide a placeholder.
type place struct {
	name string
	text []string
}

// places gathers, once per request, every part of r (and body, when read)
// a placeholder could be sent in: the URL (as sent, and decoded), the Host,
// each header's values with Basic credentials decoded, each header's name
// (lower-cased: names are case-insensitive and canonicalised on the way
// in), and the body.
func places(r *http.Request, body []byte) []place {
	query, _ := url.QueryUnescape(r.URL.RawQuery)
	ps := []place{{"URL", []string{r.URL.String(), r.URL.Path, query, r.Host}}}
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		text := append([]string{strings.ToLower(k)}, r.Header[k]...)
		for _, v := range r.Header[k] {
			if kind, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(kind, "basic") {
				if u, p, ok := decodeBasic(cred); ok {
					text = append(text, u, p)
				}
			}
		}
		ps = append(ps, place{"header " + k, text})
	}
	if body != nil {
		ps = append(ps, place{"body", []string{string(body)}})
	}
	return ps
}

// find lists the places that hold one of e's placeholders.
func (e *entry) find(ps []place) []string {
	var where []string
	for _, p := range ps {
	search:
		for _, text := range p.text {
			for i, t := range e.tokens() {
				if strings.Contains(text, t) || strings.Contains(text, e.lowerTokens[i]) {
					where = append(where, p.name)
					break search
				}
			}
		}
	}
	return where
}

// Close closes every source (revoking what minting sources minted). It is
// safe to call more than once; later calls return the first result.
func (s *Set) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		for _, e := range s.entries {
			if e.source != nil {
				if err := e.source.Close(ctx); err != nil {
					s.closeErr = errors.Join(s.closeErr, fmt.Errorf("credential %s: %w", e.name, err))
				}
			}
		}
	})
	return s.closeErr
}

// String names the credentials; values and placeholders are not printed.
func (s *Set) String() string {
	names := make([]string, len(s.entries))
	for i, e := range s.entries {
		names[i] = e.name
	}
	return "credentials [" + strings.Join(names, " ") + "]"
}

// Format prints String for every verb, so %#v and %+v do not walk into the
// sources and keys the Set holds.
func (s *Set) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }
