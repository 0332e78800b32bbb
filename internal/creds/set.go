package creds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"slices"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// This file is a Set's lifecycle: Prepare (read or mint every value, fail closed), what the agent is
// given (Env, Hosts) and Close (revoke what sources minted). Injection into requests is in inject.go,
// host matching in hosts.go.

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
	shape       string // Spec.Shape, kept for Export
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
	claim := newEnvClaims()
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
		s.add(e)
	}
	return s.checkCollisions(used)
}

// checkCollisions guards substitution's premise that no placeholder occurs inside another
// placeholder or a real value: used holds every placeholder and real value of the Set. Placeholders
// made here are random with at least 128 bits, so for Prepare this never fires unless randomness is
// broken; for Restore it also refuses placeholders made elsewhere that do not keep the premise.
func (s *Set) checkCollisions(used []string) error {
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

// newEnvClaims returns the function that records which credential sets an environment variable,
// refusing a second one: the agent could find only one of them.
func newEnvClaims() func(env, cred string) error {
	envNames := map[string]string{}
	return func(env, cred string) error {
		if other, dup := envNames[env]; dup {
			return fmt.Errorf("credentials %s and %s both set %s", other, cred, env)
		}
		envNames[env] = cred
		return nil
	}
}

// add appends e, its placeholders known, to the Set.
func (s *Set) add(e *entry) {
	for _, t := range e.tokens() {
		e.lowerTokens = append(e.lowerTokens, strings.ToLower(t))
	}
	s.entries = append(s.entries, e)
}

func newEntry(sp Spec) (*entry, error) {
	if !validEnvName(sp.Name) {
		return nil, errors.New("name must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
	}
	e := &entry{name: sp.Name, source: sp.Source, inject: sp.Inject, shape: sp.Shape}
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
