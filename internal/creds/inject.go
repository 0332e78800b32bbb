package creds

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/hostname"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// This file is the HTTP side of a Set: putting real values into a request bound for a credential's
// host (Modify), refusing the requests that would leak one, and the pairs the answer is redacted with.

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

// InMessages reports whether a credential bound to name may go into the websocket messages the
// sandbox sends it: one that allows the body (Inject.Body). Not AWS keys, which sign requests.
func (s *Set) InMessages(name string) bool {
	host, err := hostname.Normalize(name)
	if err != nil {
		return false
	}
	for _, e := range s.entries {
		if e.aws == nil && e.inject.Body && e.boundTo(host) {
			return true
		}
	}
	return false
}

// ModifyMessage puts real values into one websocket message the sandbox sends to name (the
// connection's host) after the upgrade: for each credential bound to name that allows the body
// (Inject.Body; a message is the websocket's body), its placeholder becomes the real value, and the
// value joins Redactions. It returns the message (msg itself when nothing changed) and the names of
// the credentials put in and of those whose placeholder stayed because their credential does not
// allow it there (misuse). Values go only over TLS: the caller relays messages with a value only on
// an upstream it verified. Errors never hold values.
func (s *Set) ModifyMessage(ctx context.Context, name string, msg []byte) (out []byte, injected, misuse []string, err error) {
	host, err := hostname.Normalize(name)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("credential injection: %w", err)
	}
	out = msg
	for _, e := range s.entries {
		if e.aws != nil || !bytes.Contains(out, []byte(e.placeholder)) {
			continue
		}
		if !e.boundTo(host) || !e.inject.Body {
			misuse = append(misuse, e.name)
			continue
		}
		sec, err := e.source.Secret(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("credential %s: %w", e.name, err)
		}
		if sec.Empty() {
			return nil, nil, nil, fmt.Errorf("credential %s: the source gave an empty value", e.name)
		}
		real := sec.Reveal()
		out = bytes.ReplaceAll(out, []byte(e.placeholder), []byte(real))
		e.reveal(redact.Pair{Secret: real, Replacement: e.placeholder})
		injected = append(injected, e.name)
	}
	return out, injected, misuse, nil
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
