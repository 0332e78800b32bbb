package creds

import (
	"context"
	"fmt"
)

const redacted = "[redacted]"

// Secret holds a credential's real value. Its zero value is empty. Every way
// of printing it (String, GoString, fmt verbs, JSON, text marshalling) yields
// "[redacted]", so that a secret logged or wrapped into an error by mistake
// does not leave cordon's process. Only [Secret.Reveal] returns the value,
// which makes every use of the real value easy to find in review.
//
// The value sits behind a pointer: fmt does not call the methods of a
// struct's unexported fields but prints them raw, and a pointer inside a
// struct prints as an address, so a Secret held in another type's
// unexported field stays hidden too.
type Secret struct {
	p *string
}

// NewSecret wraps a value read from a source.
func NewSecret(value string) Secret { return Secret{p: &value} }

// Reveal returns the real value. Call it only where the value is about to be
// sent to the host the credential is bound to.
func (s Secret) Reveal() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// Empty reports whether the secret has no value; a source that yields an
// empty secret is an error (fail closed).
func (s Secret) Empty() bool { return s.Reveal() == "" }

// String redacts the value.
func (Secret) String() string { return redacted }

// GoString redacts the value for %#v.
func (Secret) GoString() string { return "creds.Secret{" + redacted + "}" }

// Format redacts the value for every fmt verb, including %x and %q, which
// would otherwise bypass String.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(s.GoString()))
		return
	}
	_, _ = f.Write([]byte(redacted))
}

// MarshalJSON redacts the value.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText redacts the value (used by encoding/json map keys, slog, yaml).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Source yields a credential's real value. Static sources (environment,
// file, command) read once; minting sources (a GitHub App installation
// token) return a fresh value whenever the previous one is near expiry. The
// gateway calls Secret on every request it injects into, so implementations
// must be safe for concurrent use and cheap when nothing changed.
type Source interface {
	// Secret returns the current value; sources whose tokens refresh return
	// the fresh one. An empty value is an error.
	Secret(ctx context.Context) (Secret, error)
	// Close revokes what the source minted (a no-op for static sources). It
	// is called once, at the end of the run.
	Close(ctx context.Context) error
}
