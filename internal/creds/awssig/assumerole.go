package awssig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// DefaultSTSEndpoint is AWS STS's global endpoint, which signs in us-east-1.
const DefaultSTSEndpoint = "https://sts.amazonaws.com"

// Limits of AssumeRole's DurationSeconds (the role's own maximum may be lower).
const (
	MinRoleDuration = 15 * time.Minute
	MaxRoleDuration = 12 * time.Hour
)

// AssumeRole is a KeySource of temporary keys: it calls STS AssumeRole with the keys of Base and
// returns the role's session credentials, limited further by Policy if one is given. A run then
// works with keys that expire on their own (Duration) and can do only what the role and the session
// policy allow, whatever the base keys could do; the base keys never leave cordon's process, and
// are used for this one call.
type AssumeRole struct {
	// Base signs the AssumeRole call.
	Base KeySource
	// RoleARN is the role to assume.
	RoleARN string
	// SessionName names the session in the account's CloudTrail (RoleSessionName).
	SessionName string
	// Policy, if set, is an IAM policy document (JSON) that narrows the session below the role.
	Policy string
	// Duration is how long the keys last; zero means one hour.
	Duration time.Duration
	// Endpoint is the STS endpoint URL; empty means DefaultSTSEndpoint.
	Endpoint string
	// Region is the region the call is signed for; empty means us-east-1 (the global endpoint's).
	Region string
	// Client sends the call; nil means http.DefaultClient.
	Client *http.Client
}

// Format names the role, and the base source only if that prints itself safely (a Formatter):
// otherwise only its type, since a KeySource may hold keys.
func (a AssumeRole) Format(f fmt.State, _ rune) {
	if b, ok := a.Base.(fmt.Formatter); ok {
		_, _ = fmt.Fprintf(f, "AWS role %s assumed with %v", a.RoleARN, b)
		return
	}
	_, _ = fmt.Fprintf(f, "AWS role %s assumed with keys from a %T", a.RoleARN, a.Base)
}

// assumeRoleResponse is STS's answer (query protocol, XML).
type assumeRoleResponse struct {
	Credentials struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		SessionToken    string `xml:"SessionToken"`
		Expiration      string `xml:"Expiration"`
	} `xml:"AssumeRoleResult>Credentials"`
}

// stsError is STS's error answer.
type stsError struct {
	Code    string `xml:"Error>Code"`
	Message string `xml:"Error>Message"`
}

// maxSTSAnswer bounds the answer read from STS.
const maxSTSAnswer = 1 << 20

// Keys calls AssumeRole and returns the session's keys.
func (a AssumeRole) Keys(ctx context.Context) (Keys, error) {
	fail := func(err error) (Keys, error) {
		return Keys{}, fmt.Errorf("assuming AWS role %s: %w", a.RoleARN, err)
	}
	base, err := a.Base.Keys(ctx)
	if err != nil {
		return fail(err)
	}
	dur := a.Duration
	if dur == 0 {
		dur = time.Hour
	}
	if dur < MinRoleDuration || dur > MaxRoleDuration {
		return fail(fmt.Errorf("duration %s is outside AWS's %s to %s", dur, MinRoleDuration, MaxRoleDuration))
	}
	endpoint, region := a.Endpoint, a.Region
	if endpoint == "" {
		endpoint = DefaultSTSEndpoint
	}
	if region == "" {
		region = "us-east-1"
	}
	form := url.Values{
		"Action":          {"AssumeRole"},
		"Version":         {"2011-06-15"},
		"RoleArn":         {a.RoleARN},
		"RoleSessionName": {a.SessionName},
		"DurationSeconds": {strconv.Itoa(int(dur / time.Second))},
	}
	if a.Policy != "" {
		form.Set("Policy", a.Policy)
	}
	body := form.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if base.SessionToken != "" {
		req.Header.Set(amzSecurityTok, base.SessionToken)
	}
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: base.AccessKeyID, SecretAccessKey: base.SecretAccessKey, SessionToken: base.SessionToken}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "sts", region, time.Now()); err != nil {
		return fail(fmt.Errorf("signing: %w", err))
	}
	client := a.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxSTSAnswer))
	if err != nil {
		return fail(fmt.Errorf("reading STS's answer: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		var e stsError
		if xml.Unmarshal(answer, &e) == nil && e.Code != "" {
			return fail(fmt.Errorf("STS refused (%d %s): %s", resp.StatusCode, e.Code, e.Message))
		}
		return fail(fmt.Errorf("STS answered %s", resp.Status))
	}
	var r assumeRoleResponse
	if err := xml.Unmarshal(answer, &r); err != nil {
		return fail(fmt.Errorf("STS's answer: %w", err))
	}
	c := r.Credentials
	k := Keys{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken}
	if err := k.check(); err != nil || k.SessionToken == "" {
		return fail(errors.New("STS's answer holds no complete session credentials"))
	}
	exp, err := time.Parse(time.RFC3339, c.Expiration)
	if err != nil || !exp.After(time.Now()) {
		return fail(fmt.Errorf("STS's credentials expire at %q, not in the future", c.Expiration))
	}
	k.Expires = exp
	return k, nil
}
