package creds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
)

// This file is a Set crossing to a gateway that runs elsewhere (the Kubernetes backend's pod, whose
// gateway reads the run's Secret): Export on the side that prepared it, Restore on the other.

// Exported is one prepared credential as it crosses to a gateway that runs elsewhere (the Kubernetes
// backend's pod): what the sandbox was given in its place and the value the gateway puts there. It
// holds a real value: it goes into a Secret, never into a log or a rendering (fmt prints its name
// only).
type Exported struct {
	Name        string `json:"name"`
	Inject      Inject `json:"inject"`
	Shape       string `json:"shape,omitempty"`
	Placeholder string `json:"placeholder"`
	Value       string `json:"value"`
}

// Format prints the credential's name for every verb: the value (and the placeholder, which is as
// good as the value to whoever holds the gateway) is never printed.
func (x Exported) Format(f fmt.State, _ rune) {
	_, _ = io.WriteString(f, "creds.Exported{"+x.Name+"}")
}

// Export returns every credential of the Set with its placeholder and its value as its source gives
// it now, for a gateway elsewhere to Restore. A minting source's value is taken once: the gateway
// that restores it has that token until it expires, and no way to mint another. An AWS credential is
// refused: its keys are re-signed with a Resigner that stays in this process.
func (s *Set) Export() ([]Exported, error) {
	out := make([]Exported, 0, len(s.entries))
	for _, e := range s.entries {
		if e.aws != nil {
			return nil, fmt.Errorf("credential %s: the Kubernetes backend does not carry AWS keys yet", e.name)
		}
		// The sources a Set holds ignore the context or mint under their own timeouts.
		sec, err := e.source.Secret(context.Background())
		if err != nil {
			return nil, fmt.Errorf("credential %s: %w", e.name, err)
		}
		if sec.Empty() {
			return nil, fmt.Errorf("credential %s: the source gave an empty value", e.name)
		}
		inj := e.inject
		inj.Hosts = slices.Clone(inj.Hosts)
		out = append(out, Exported{Name: e.name, Inject: inj, Shape: e.shape, Placeholder: e.placeholder, Value: sec.Reveal()})
	}
	return out, nil
}

// Restore builds the Set that Export described: each credential with the placeholder the sandbox
// was given and a static value, checked as Prepare checks a Spec (the name, where the value may go,
// one credential per variable) and refused if any placeholder occurs inside another placeholder or
// a value. A placeholder must be printable ASCII without spaces, of at least the length Prepare
// makes, and start with the credential's Shape when it names one. Closing the Set revokes nothing:
// whoever minted a value revokes it.
func Restore(ctx context.Context, ex []Exported) (*Set, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("restoring credentials: %w", err)
	}
	s := &Set{}
	claim := newEnvClaims()
	var used []string
	for i, x := range ex {
		e, err := newEntry(Spec{Name: x.Name, Source: valueSource{NewSecret(x.Value)}, Inject: x.Inject, Shape: x.Shape})
		if err != nil {
			return nil, fmt.Errorf("credential %d (%q): %w", i, x.Name, err)
		}
		if err := claim(x.Name, x.Name); err != nil {
			return nil, err
		}
		if x.Value == "" {
			return nil, fmt.Errorf("credential %s: no value", x.Name)
		}
		if err := checkPlaceholder(x.Placeholder, x.Shape); err != nil {
			return nil, fmt.Errorf("credential %s: %w", x.Name, err)
		}
		e.placeholder = x.Placeholder
		used = append(used, x.Placeholder, x.Value)
		s.add(e)
	}
	if err := s.checkCollisions(used); err != nil {
		return nil, err
	}
	return s, nil
}

// checkPlaceholder refuses a placeholder that placeholderFor could not have made: too short to be
// unguessable, with characters a header or an environment variable would mangle, or without the
// shape it must start with.
func checkPlaceholder(p, shape string) error {
	switch {
	case len(p) < minRandomChars:
		return fmt.Errorf("placeholder shorter than %d characters", minRandomChars)
	case shape != "" && (len(p) < len(shape)+minRandomChars || p[:len(shape)] != shape):
		return errors.New("placeholder does not have the credential's shape")
	}
	for _, c := range []byte(p) {
		if c <= ' ' || c >= 0x7f {
			return errors.New("placeholder holds a space or a character that is not printable ASCII")
		}
	}
	return nil
}

// valueSource is a value read elsewhere and restored here: static, and nothing to revoke.
type valueSource struct{ value Secret }

// Secret returns the restored value.
func (v valueSource) Secret(context.Context) (Secret, error) { return v.value, nil }

// Close does nothing: the value was minted (if at all) where it was exported.
func (valueSource) Close(context.Context) error { return nil }
