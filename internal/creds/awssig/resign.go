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
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// MaxHashedBody bounds the body the gateway reads to hash when a request does
// not state its payload hash (X-Amz-Content-Sha256, which S3 clients send and
// most other services' clients do not). Those services' requests are API
// calls, small; a larger body is refused rather than buffered.
const MaxHashedBody = 16 << 20

const (
	algorithm       = "AWS4-HMAC-SHA256"
	amzDate         = "X-Amz-Date"
	amzContentHash  = "X-Amz-Content-Sha256"
	amzSecurityTok  = "X-Amz-Security-Token"
	timeFormat      = "20060102T150405Z"
	unsignedPayload = "UNSIGNED-PAYLOAD"
	// streamingUnsignedTrailer is the body of an aws-chunked upload whose
	// chunks are not signed (only the headers are): S3 clients use it for
	// uploads with checksums. It re-signs like UNSIGNED-PAYLOAD.
	streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

// refreshBefore is how long before temporary keys expire a Resigner gets new
// ones, so that a request signed now is not refused for an expired token on
// its way.
const refreshBefore = 5 * time.Minute

// Resigner re-signs requests signed with the placeholder keys. It holds the
// real keys; it is safe for concurrent use.
type Resigner struct {
	placeholder Keys
	signer      *v4.Signer
	now         func() time.Time

	mu      sync.Mutex
	real    Keys
	refresh KeySource // for keys that expire (see RefreshFrom)
}

// NewResigner returns a Resigner that accepts requests signed with
// placeholder and signs them with real.
func NewResigner(placeholder, real Keys) (*Resigner, error) {
	if err := placeholder.check(); err != nil {
		return nil, fmt.Errorf("placeholder AWS keys: %w", err)
	}
	if err := real.check(); err != nil {
		return nil, fmt.Errorf("AWS keys: %w", err)
	}
	return &Resigner{placeholder: placeholder, real: real, signer: v4.NewSigner(), now: time.Now}, nil
}

// RefreshFrom has the Resigner get new keys from src when the real keys are
// about to expire (Keys.Expires), as an assumed role's session keys do; the
// placeholder stays the same for the whole run. Keys without an expiry are
// never refreshed.
func (s *Resigner) RefreshFrom(src KeySource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh = src
}

// Current returns the real keys requests are signed with now (for the
// caller to recognise them if an upstream echoes them back).
func (s *Resigner) Current() Keys {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.real
}

// keys returns the real keys to sign with, refreshed first when they expire
// within refreshBefore. A failed refresh keeps the old keys while they are
// still valid and is an error once they are not: a request is not sent with
// keys AWS will refuse.
func (s *Resigner) keys(ctx context.Context) (Keys, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.real.Expires
	if s.refresh == nil || exp.IsZero() || s.now().Before(exp.Add(-refreshBefore)) {
		return s.real, nil
	}
	k, err := s.refresh.Keys(ctx)
	if err == nil {
		err = k.check()
	}
	if err != nil {
		if s.now().Before(exp) {
			return s.real, nil // try again on the next request
		}
		return Keys{}, fmt.Errorf("the AWS keys expired and new ones could not be had: %w", err)
	}
	s.real = k
	return k, nil
}

// Format prints the access key ids only. (fmt prints unexported fields raw,
// without their own Format, so Resigner must redact itself.)
func (s *Resigner) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "awssig.Resigner{placeholder %s, real %s}", s.placeholder.AccessKeyID, s.Current().AccessKeyID)
}

// Auth is a parsed SigV4 Authorization header.
type Auth struct {
	AccessKeyID, Date, Region, Service string
	SignedHeaders                      []string
	Signature                          string
}

// ParseAuthorization parses "AWS4-HMAC-SHA256 Credential=ID/DATE/REGION/
// SERVICE/aws4_request, SignedHeaders=a;b, Signature=HEX". ok is false when
// the value is not of that algorithm at all; err is set when it claims to be
// and is malformed.
func ParseAuthorization(v string) (a Auth, ok bool, err error) {
	rest, found := strings.CutPrefix(v, algorithm+" ")
	if !found {
		return Auth{}, false, nil
	}
	var cred, signed, sig string
	for _, part := range strings.Split(rest, ",") {
		k, val, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return Auth{}, true, errors.New("SigV4 authorization: malformed parameter")
		}
		var dst *string
		switch k {
		case "Credential":
			dst = &cred
		case "SignedHeaders":
			dst = &signed
		case "Signature":
			dst = &sig
		default:
			return Auth{}, true, fmt.Errorf("SigV4 authorization: unknown parameter %q", k)
		}
		if *dst != "" {
			return Auth{}, true, fmt.Errorf("SigV4 authorization: %s given twice", k)
		}
		*dst = val
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" || scope[0] == "" || scope[2] == "" || scope[3] == "" {
		return Auth{}, true, errors.New("SigV4 authorization: malformed credential scope")
	}
	if _, err := time.Parse("20060102", scope[1]); err != nil {
		return Auth{}, true, errors.New("SigV4 authorization: malformed credential date")
	}
	if _, err := hex.DecodeString(sig); err != nil || len(sig) != 64 {
		return Auth{}, true, errors.New("SigV4 authorization: malformed signature")
	}
	a = Auth{AccessKeyID: scope[0], Date: scope[1], Region: scope[2], Service: scope[3], Signature: sig}
	for _, h := range strings.Split(signed, ";") {
		if h == "" || h != strings.ToLower(h) || !validHeaderName(h) {
			return Auth{}, true, errors.New("SigV4 authorization: malformed signed headers")
		}
		a.SignedHeaders = append(a.SignedHeaders, h)
	}
	return a, true, nil
}

func validHeaderName(h string) bool {
	for _, c := range []byte(h) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// ErrNotResigned wraps the reasons a request signed with the placeholder
// keys cannot be re-signed; the request must then be refused, not sent.
var ErrNotResigned = errors.New("request signed with the placeholder AWS keys cannot be re-signed")

// Resign signs r again with the real keys if r carries a SigV4 Authorization
// header naming the placeholder access key id, keeping its time, region,
// service, signed headers and payload hash; r's Authorization, X-Amz-Date
// and X-Amz-Security-Token headers are replaced. r's Host (or URL.Host when
// Host is empty) must be the Host header that will be sent upstream.
//
// It returns false and no error when r is not signed with the placeholder
// (no SigV4 header, or another access key id): such a request is left alone.
// It returns an error wrapping ErrNotResigned when r is signed with the
// placeholder but cannot be re-signed faithfully: signed aws-chunked bodies
// (each chunk's signature chains from the header's), a malformed header, a
// session token that is not the placeholder's.
//
// Presigned URLs (X-Amz-Credential naming the placeholder in the query) are
// re-signed the same way, in the query; their X-Amz-Expires is kept.
func (s *Resigner) Resign(r *http.Request) (bool, error) {
	var auth Auth
	ours := false
	for _, v := range r.Header.Values("Authorization") {
		a, ok, err := ParseAuthorization(v)
		if !ok && strings.Contains(v, s.placeholder.AccessKeyID) {
			// SigV4a (AWS4-ECDSA-P256-SHA256) or another scheme: cordon
			// cannot sign it with the real keys; say so rather than let the
			// placeholder go out.
			return false, fmt.Errorf("%w: only AWS4-HMAC-SHA256 signatures are re-signed", ErrNotResigned)
		}
		if ok && strings.Contains(v, s.placeholder.AccessKeyID) {
			if err != nil {
				return false, fmt.Errorf("%w: %w", ErrNotResigned, err)
			}
			if ours {
				return false, fmt.Errorf("%w: more than one Authorization header", ErrNotResigned)
			}
			auth, ours = a, a.AccessKeyID == s.placeholder.AccessKeyID
		}
	}
	if !ours {
		if !strings.Contains(r.URL.RawQuery, s.placeholder.AccessKeyID) {
			return false, nil
		}
		q := r.URL.Query()
		cred := q.Get("X-Amz-Credential")
		if !strings.HasPrefix(cred, s.placeholder.AccessKeyID+"/") {
			if strings.HasPrefix(cred, s.placeholder.AccessKeyID) {
				return false, nil // a longer key id: someone else's
			}
			if strings.HasPrefix(q.Get("AWSAccessKeyId"), s.placeholder.AccessKeyID) {
				return false, fmt.Errorf("%w: Signature Version 2 presigned URLs are not re-signed (have the client use SigV4, e.g. s3 signature_version = s3v4)", ErrNotResigned)
			}
			return false, fmt.Errorf("%w: the placeholder key id is in the query but not as X-Amz-Credential", ErrNotResigned)
		}
		if err := s.represign(r, q); err != nil {
			return false, fmt.Errorf("%w: presigned URL: %w", ErrNotResigned, err)
		}
		return true, nil
	}
	if err := s.resign(r, auth); err != nil {
		return false, fmt.Errorf("%w: %w", ErrNotResigned, err)
	}
	return true, nil
}

func (s *Resigner) resign(r *http.Request, auth Auth) error {
	if len(r.Header.Values("Authorization")) != 1 {
		return errors.New("more than one Authorization header")
	}
	dates := r.Header.Values(amzDate)
	if len(dates) != 1 {
		return errors.New("no single X-Amz-Date header")
	}
	when, err := time.Parse(timeFormat, dates[0])
	if err != nil {
		return errors.New("malformed X-Amz-Date")
	}
	if when.Format("20060102") != auth.Date {
		return errors.New("X-Amz-Date is not the credential scope's date")
	}
	switch toks := r.Header.Values(amzSecurityTok); {
	case len(toks) > 1:
		return errors.New("more than one X-Amz-Security-Token")
	case len(toks) == 1 && (s.placeholder.SessionToken == "" || toks[0] != s.placeholder.SessionToken):
		return errors.New("X-Amz-Security-Token is not the placeholder session token")
	}
	payload, err := payloadHash(r)
	if err != nil {
		return err
	}
	real, err := s.keys(r.Context())
	if err != nil {
		return err
	}
	c := signingCopy(r, auth.SignedHeaders)
	if err := s.signer.SignHTTP(context.Background(), creds(real), c, payload, auth.Service, auth.Region, when, signerOptions(auth.Service)); err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	r.Header["Authorization"] = c.Header["Authorization"]
	r.Header[amzDate] = c.Header[amzDate]
	if real.SessionToken != "" {
		r.Header[amzSecurityTok] = []string{real.SessionToken}
	} else {
		r.Header.Del(amzSecurityTok)
	}
	return nil
}

// signingCopy returns a copy of r holding only the headers the client
// signed: the signer signs every header it is given (but a few it always
// ignores), so the new signature covers the same headers as the client's.
func signingCopy(r *http.Request, signed []string) *http.Request {
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	u := *r.URL
	u.Scheme, u.Host = "", host // no scheme: the signer keeps the Host as it will be sent
	c := &http.Request{Method: r.Method, URL: &u, Host: host, Header: http.Header{}}
	for _, h := range signed {
		switch h {
		case "host", "authorization", "x-amz-security-token":
		case "content-length":
			c.ContentLength = r.ContentLength
		default:
			k := textproto.CanonicalMIMEHeaderKey(h)
			if v := r.Header.Values(k); len(v) > 0 {
				c.Header[k] = v
			}
		}
	}
	return c
}

func signerOptions(service string) func(*v4.SignerOptions) {
	return func(o *v4.SignerOptions) {
		// S3 signs the path as sent; other services escape it once more.
		o.DisableURIPathEscaping = strings.HasPrefix(service, "s3")
		// Presigning: headers the client signed stay headers.
		o.DisableHeaderHoisting = true
	}
}

func creds(k Keys) aws.Credentials {
	return aws.Credentials{AccessKeyID: k.AccessKeyID, SecretAccessKey: k.SecretAccessKey, SessionToken: k.SessionToken}
}

// represign signs a presigned URL (X-Amz-Credential and friends in the
// query) again with the real keys, keeping its time, expiry, scope and
// signed headers.
func (s *Resigner) represign(r *http.Request, q url.Values) error {
	if r.Header.Get("Authorization") != "" {
		return errors.New("both an Authorization header and a presigned query")
	}
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature"} {
		if len(q[k]) != 1 {
			return fmt.Errorf("no single %s", k)
		}
	}
	if q.Get("X-Amz-Algorithm") != algorithm {
		return errors.New("unknown X-Amz-Algorithm")
	}
	// Reuse the header parser for the parameters' syntax.
	auth, _, err := ParseAuthorization(algorithm + " Credential=" + q.Get("X-Amz-Credential") +
		", SignedHeaders=" + q.Get("X-Amz-SignedHeaders") + ", Signature=" + q.Get("X-Amz-Signature"))
	if err != nil {
		return err
	}
	when, err := time.Parse(timeFormat, q.Get("X-Amz-Date"))
	if err != nil || when.Format("20060102") != auth.Date {
		return errors.New("X-Amz-Date is malformed or not the credential scope's date")
	}
	switch toks := q["X-Amz-Security-Token"]; {
	case len(toks) > 1:
		return errors.New("more than one X-Amz-Security-Token")
	case len(toks) == 1 && (s.placeholder.SessionToken == "" || toks[0] != s.placeholder.SessionToken):
		return errors.New("X-Amz-Security-Token is not the placeholder session token")
	}
	payload := q.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = r.Header.Get(amzContentHash)
	}
	if payload == "" && strings.HasPrefix(auth.Service, "s3") {
		payload = unsignedPayload // what S3 presigned URLs sign
	}
	if payload == "" || payload != unsignedPayload && (len(payload) != 64 || !isLowerHex(payload)) {
		if payload, err = payloadHash(r); err != nil {
			return err
		}
	}
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"} {
		q.Del(k) // the signer sets these afresh
	}
	real, err := s.keys(r.Context())
	if err != nil {
		return err
	}
	c := signingCopy(r, auth.SignedHeaders)
	c.URL.RawQuery = q.Encode()
	signed, _, err := s.signer.PresignHTTP(context.Background(), creds(real), c, payload, auth.Service, auth.Region, when, signerOptions(auth.Service))
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}
	r.URL.RawQuery = u.RawQuery
	if r.RequestURI != "" { // a server-side request: keep RequestURI in step
		r.RequestURI = r.URL.RequestURI()
	}
	return nil
}

// payloadHash returns what the client signed as the payload's hash: the
// X-Amz-Content-Sha256 header when present (a hex digest, or a sentinel
// meaning the payload is not signed), else the SHA-256 of the body, which is
// read (bounded) and put back.
func payloadHash(r *http.Request) (string, error) {
	if vs := r.Header.Values(amzContentHash); len(vs) > 0 {
		if len(vs) > 1 {
			return "", errors.New("more than one X-Amz-Content-Sha256")
		}
		v := vs[0]
		switch {
		case v == unsignedPayload || v == streamingUnsignedTrailer:
			return v, nil
		case strings.HasPrefix(v, "STREAMING-"):
			return "", fmt.Errorf("payload %s has per-chunk signatures", v)
		case len(v) == 64 && isLowerHex(v):
			return v, nil
		}
		return "", errors.New("malformed X-Amz-Content-Sha256")
	}
	if r.Body == nil || r.Body == http.NoBody {
		return hex.EncodeToString(sha256.New().Sum(nil)), nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxHashedBody+1))
	if err != nil {
		return "", fmt.Errorf("reading the body to hash it: %w", err)
	}
	if len(b) > MaxHashedBody {
		return "", fmt.Errorf("body larger than %d bytes and no X-Amz-Content-Sha256", MaxHashedBody)
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func isLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
