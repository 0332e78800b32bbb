// Package awssig lets an agent use AWS without holding AWS keys: the agent
// gets placeholder keys, signs its requests with them as any SDK does
// (Signature Version 4), and cordon's gateway checks that a request was
// signed with the placeholder access key id and signs it again, for the same
// region, service and signed headers, with the real keys. The signing itself
// is done by the AWS SDK for Go's v4 signer.
package awssig

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"
)

const redacted = "[redacted]"

// Keys is an AWS key pair and, for temporary credentials, a session token.
// Printing Keys (String, GoString, any fmt verb) shows the access key id
// only: the secret key and the session token never leave cordon's process
// through a log line or an error.
type Keys struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Expires is when temporary keys stop working; zero for keys that do not expire.
	Expires time.Time
}

// String shows the access key id and redacts the rest.
func (k Keys) String() string {
	s := "AWS keys " + k.AccessKeyID + " (secret " + redacted
	if k.SessionToken != "" {
		s += ", session token " + redacted
	}
	return s + ")"
}

// GoString redacts like String, for %#v.
func (k Keys) GoString() string { return "awssig.Keys{" + k.String() + "}" }

// Format redacts for every verb (%x and %q would otherwise print fields).
func (k Keys) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// MarshalJSON redacts like String.
func (k Keys) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", k.String())), nil }

func (k Keys) check() error {
	switch {
	case k.AccessKeyID == "":
		return errors.New("no access key id")
	case k.SecretAccessKey == "":
		return errors.New("no secret access key")
	case strings.ContainsAny(k.AccessKeyID, "/ ,="):
		return errors.New("access key id is malformed")
	}
	return nil
}

// KeySource yields AWS keys. Sources are read once, when the run prepares
// its credentials.
type KeySource interface {
	Keys(ctx context.Context) (Keys, error)
}

// EnvKeys reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and (if set)
// AWS_SESSION_TOKEN from an environment such as os.Environ().
type EnvKeys struct{ Environ []string }

// Keys returns the keys from the environment.
func (e EnvKeys) Keys(context.Context) (Keys, error) {
	get := func(name string) string {
		v := ""
		for _, kv := range e.Environ {
			if k, val, ok := strings.Cut(kv, "="); ok && k == name {
				v = val
			}
		}
		return v
	}
	k := Keys{AccessKeyID: get("AWS_ACCESS_KEY_ID"), SecretAccessKey: get("AWS_SECRET_ACCESS_KEY"), SessionToken: get("AWS_SESSION_TOKEN")}
	if err := k.check(); err != nil {
		return Keys{}, fmt.Errorf("AWS keys from the environment: %w", err)
	}
	return k, nil
}

// Format does not print Environ, which holds the keys (and likely other
// secrets).
func (EnvKeys) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("AWS keys from the environment")) }

// ProfileKeys reads a profile's static keys from an AWS shared credentials
// file (~/.aws/credentials: sections named after profiles, keys
// aws_access_key_id, aws_secret_access_key, aws_session_token). Profiles that
// delegate (credential_process, SSO, role assumption) are refused: their keys
// are not in the file.
type ProfileKeys struct {
	// Path is the credentials file; empty means $AWS_SHARED_CREDENTIALS_FILE
	// or ~/.aws/credentials.
	Path string
	// Profile is the section's name; empty means "default".
	Profile string
}

// Keys parses the file and returns the profile's keys.
func (p ProfileKeys) Keys(context.Context) (Keys, error) {
	path, profile := p.Path, p.Profile
	if profile == "" {
		profile = "default"
	}
	if path == "" {
		path = os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return Keys{}, fmt.Errorf("AWS shared credentials file: %w", err)
		}
		path = home + "/.aws/credentials"
	}
	f, err := os.Open(path)
	if err != nil {
		return Keys{}, fmt.Errorf("AWS shared credentials file: %w", err)
	}
	defer f.Close()
	k, found, delegated, err := parseProfile(bufio.NewScanner(f), profile)
	switch {
	case err != nil:
		return Keys{}, fmt.Errorf("AWS shared credentials file %s: %w", path, err)
	case !found:
		return Keys{}, fmt.Errorf("AWS shared credentials file %s: no profile %q", path, profile)
	case delegated != "" && k.AccessKeyID == "":
		return Keys{}, fmt.Errorf("AWS profile %q uses %s: only static keys are supported", profile, delegated)
	}
	if err := k.check(); err != nil {
		return Keys{}, fmt.Errorf("AWS profile %q in %s: %w", profile, path, err)
	}
	return k, nil
}

// parseProfile reads an INI file and returns the keys of section profile.
// Errors never quote a line: lines hold secrets.
func parseProfile(sc *bufio.Scanner, profile string) (k Keys, found bool, delegated string, err error) {
	in := false
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") {
				return Keys{}, false, "", fmt.Errorf("line %d: malformed section header", n)
			}
			name := strings.TrimSpace(line[1 : len(line)-1])
			in = name == profile || name == "profile "+profile
			found = found || in
			continue
		}
		if !in {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			continue // a continuation line of a nested setting: not one of ours
		}
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "aws_access_key_id":
			k.AccessKeyID = strings.TrimSpace(val)
		case "aws_secret_access_key":
			k.SecretAccessKey = strings.TrimSpace(val)
		case "aws_session_token", "aws_security_token":
			k.SessionToken = strings.TrimSpace(val)
		case "credential_process", "sso_session", "sso_start_url", "role_arn", "web_identity_token_file":
			delegated = strings.TrimSpace(key)
		}
	}
	return k, found, delegated, sc.Err()
}

const (
	upperDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" // AWS key ids use base32's alphabet
	secretChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// NewPlaceholder returns random keys in the format of real AWS keys: an
// access key id "AKIA" + 16 characters ("ASIA" when real has a session
// token, as temporary keys do), a 40-character secret, and a session token
// when real has one. Nothing in them is derived from real.
func NewPlaceholder(real Keys) (Keys, error) {
	prefix := "AKIA"
	if real.SessionToken != "" {
		prefix = "ASIA"
	}
	id, err := randomString(upperDigits, 16)
	if err != nil {
		return Keys{}, err
	}
	secret, err := randomString(secretChars, 40)
	if err != nil {
		return Keys{}, err
	}
	k := Keys{AccessKeyID: prefix + id, SecretAccessKey: secret}
	if real.SessionToken != "" {
		n := len(real.SessionToken)
		if n < 64 {
			n = 64
		}
		if k.SessionToken, err = randomString(secretChars, n); err != nil {
			return Keys{}, err
		}
	}
	return k, nil
}

func randomString(alphabet string, n int) (string, error) {
	b := make([]byte, n)
	for i := range b {
		r, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", fmt.Errorf("placeholder: %w", err)
		}
		b[i] = alphabet[r.Int64()]
	}
	return string(b), nil
}
