package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/httpoverride"
)

// The checks below validate one value each. They return the value normalized (lower-cased host names,
// expanded paths) and an error that reads well after "field.path: ".

// The character-class checks are plain functions rather than package-level regular expressions:
// every start of cordon (the sandbox's init included) would otherwise pay for compiling them.

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// matchAll reports whether s is non-empty, its first byte satisfies first, and the rest satisfy rest.
func matchAll(s string, first, rest func(byte) bool) bool {
	if s == "" || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	return matchAll(s, func(c byte) bool { return isLower(c) || isUpper(c) || c == '_' },
		func(c byte) bool { return isLower(c) || isUpper(c) || isDigit(c) || c == '_' })
}

func validMethod(s string) bool {
	return matchAll(s, isUpper, func(c byte) bool { return isUpper(c) || c == '_' || c == '-' })
}

// validHeaderName accepts an RFC 9110 token.
func validHeaderName(s string) bool {
	tok := func(c byte) bool {
		return isLower(c) || isUpper(c) || isDigit(c) || strings.IndexByte("!#$%&'*+.^_`|~-", c) >= 0
	}
	return matchAll(s, tok, tok)
}

func validRepo(s string) bool {
	owner, name, ok := strings.Cut(s, "/")
	part := func(c byte) bool { return isLower(c) || isUpper(c) || isDigit(c) || c == '_' || c == '.' || c == '-' }
	return ok && matchAll(owner, part, part) && matchAll(name, part, part)
}

func validPermission(s string) bool {
	return matchAll(s, isLower, func(c byte) bool { return isLower(c) || c == '_' })
}

func checkEnvName(s string) (string, error) {
	if !validEnvName(s) {
		return "", fmt.Errorf("%q is not a valid variable name (expected letters, digits and _, not starting with a digit)", s)
	}
	return s, nil
}

// expandPath expands a leading ~ to home and requires the result to be absolute, so that a policy
// never depends on the directory cordon happens to be started from.
func expandPath(s, home string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("must not be empty")
	case s == "~" || strings.HasPrefix(s, "~/"):
		if !filepath.IsAbs(home) {
			return "", fmt.Errorf("cannot expand %q: the caller's home directory is unknown", s)
		}
		return filepath.Join(home, s[1:]), nil
	case strings.HasPrefix(s, "~"):
		return "", fmt.Errorf("%q: ~user is not supported (expected an absolute path or one starting with ~/)", s)
	case !filepath.IsAbs(s):
		return "", fmt.Errorf("%q is relative (expected an absolute path or one starting with ~/)", s)
	}
	return filepath.Clean(s), nil
}

// expandMount is expandPath for paths mounted into the sandbox, refusing the host's whole root.
func expandMount(s, home string) (string, error) {
	p, err := expandPath(s, home)
	if err == nil && p == "/" {
		return "", fmt.Errorf("%q would expose the host's whole file system", s)
	}
	return p, err
}

// checkHostName validates an exact DNS name (no wildcard) and returns it lower-cased without a
// trailing dot.
func checkHostName(s string) (string, error) {
	h := strings.TrimSuffix(strings.ToLower(s), ".")
	switch {
	case h == "":
		return "", errors.New("empty host name")
	case strings.Contains(h, "://"):
		return "", fmt.Errorf("%q must be a host name, not a URL (no scheme)", s)
	case strings.Contains(h, "/"):
		return "", fmt.Errorf("%q must be a host name (no path)", s)
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return "", fmt.Errorf("%q is an IP address, not a host name", s)
	}
	if strings.Contains(h, ":") {
		return "", fmt.Errorf("%q must be a host name (no port; list ports separately)", s)
	}
	if strings.Contains(h, "*") {
		return "", fmt.Errorf("%q: a wildcard is only allowed as a leading \"*.\"", s)
	}
	if len(h) > 253 {
		return "", fmt.Errorf("%q is longer than 253 characters", s)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", fmt.Errorf("%q is not a valid host name (expected letters, digits, - and dots)", s)
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("%q is not a valid host name (numeric top-level label)", s)
	}
	return h, nil
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range []byte(l) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// checkHostPattern validates a host name or a "*.domain" wildcard, which matches subdomains only.
func checkHostPattern(s string) (string, error) {
	base, wild := strings.CutPrefix(s, "*.")
	h, err := checkHostName(base)
	if err != nil {
		if wild {
			return "", fmt.Errorf("%q: %w", s, err)
		}
		return "", err
	}
	if !wild {
		return h, nil
	}
	if !strings.Contains(h, ".") {
		return "", fmt.Errorf("wildcard %q is too broad (expected at least two labels after \"*.\")", s)
	}
	return "*." + h, nil
}

// checkExactHost is checkHostName with a message that says why a wildcard is refused.
func checkExactHost(s string) (string, error) {
	if strings.Contains(s, "*") {
		return "", fmt.Errorf("%q: a wildcard is not allowed here (expected an exact host name)", s)
	}
	return checkHostName(s)
}

func checkPreset(s string) (string, error) {
	if known := KnownPresets(); !slices.Contains(known, s) {
		return "", fmt.Errorf("unknown preset %q (expected one of %s)", s, strings.Join(known, ", "))
	}
	return s, nil
}

func checkMethod(s string) (string, error) {
	if !validMethod(s) {
		return "", fmt.Errorf("%q is not an HTTP method (expected an upper-case token such as GET or POST)", s)
	}
	return s, nil
}

// CheckHTTPPath says what the policy would refuse in s as a network.http path, or nil, and
// ValidMethod whether it takes m as a method: for a program that writes policy lines (cordon policy
// suggest) to know before writing what the file would refuse.
func CheckHTTPPath(s string) error {
	_, err := checkHTTPPath(s)
	return err
}

// ValidMethod: see CheckHTTPPath.
func ValidMethod(m string) bool { return validMethod(m) }

// checkHTTPPath validates a request path pattern: absolute, no query or fragment, no dot segments.
func checkHTTPPath(s string) (string, error) {
	if !strings.HasPrefix(s, "/") {
		return "", fmt.Errorf("%q must start with /", s)
	}
	if strings.ContainsAny(s, "?#") {
		return "", fmt.Errorf("%q must be a path only (no query or fragment)", s)
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f {
			return "", fmt.Errorf("%q must not contain spaces or control characters", s)
		}
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%q must not contain . or .. segments", s)
		}
	}
	return s, nil
}

func checkUpstream(s string) (string, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Port() != 0 {
		return ap.String(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	return "", fmt.Errorf("%q is not a resolver address (expected an IP with an optional port, e.g. 127.0.0.53:53)", s)
}

func checkHeader(s string) (string, error) {
	if !validHeaderName(s) {
		return "", fmt.Errorf("%q is not a valid HTTP header name", s)
	}
	return s, nil
}

// checkOverrideHeader validates a header an HTTP rule allows (network.http[].allow[].headers): only
// method-override and URL-rewrite headers are refused to begin with, so any other name is a mistake.
// The list is internal/httpoverride's, the one the gateway refuses by.
func checkOverrideHeader(s string) (string, error) {
	if !validHeaderName(s) {
		return "", fmt.Errorf("%q is not a valid HTTP header name", s)
	}
	if !httpoverride.Is(s) {
		return "", fmt.Errorf("%q is not a method-override or URL-rewrite header (only those are refused, so only those need allowing)", s)
	}
	return s, nil
}

func checkRepository(s string) (string, error) {
	if !validRepo(s) {
		return "", fmt.Errorf("%q is not a repository (expected owner/name)", s)
	}
	return s, nil
}

// checkAPIURL accepts an https URL, or http to a loopback host (a test server).
func checkAPIURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		!(u.Scheme == "https" || u.Scheme == "http" && isLoopback(u.Hostname())) {
		return "", fmt.Errorf("%q is not an API URL (expected https://host[/path])", s)
	}
	return s, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func allLabels(h string) bool {
	for _, l := range strings.Split(h, ".") {
		if !validLabel(strings.ToLower(l)) {
			return false
		}
	}
	return true
}

// isRoleARN checks arn:PARTITION:iam::ACCOUNT:role/NAME, with IAM's characters for names and paths.
// (Written out rather than as a regexp: a package-level regexp is compiled by every start of the
// binary, the sandbox's init included.)
func isRoleARN(s string) bool {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || !strings.HasPrefix(parts[1], "aws") || parts[2] != "iam" || parts[3] != "" {
		return false
	}
	if len(parts[4]) != 12 || strings.Trim(parts[4], "0123456789") != "" {
		return false
	}
	name, ok := strings.CutPrefix(parts[5], "role/")
	return ok && name != "" && len(name) <= 512 && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+=,.@/-") == ""
}

// isAWSRegion checks the shape of a region name: letters, then dash-separated words, then a number
// (eu-west-3, us-gov-west-1).
func isAWSRegion(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) < 3 || strings.Trim(parts[len(parts)-1], "0123456789") != "" || parts[len(parts)-1] == "" {
		return false
	}
	for _, p := range parts[:len(parts)-1] {
		if p == "" || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz") != "" {
			return false
		}
	}
	return true
}

// hostMatches reports whether the exact host name host matches pattern: the same name, or a proper
// subdomain of a "*.domain" wildcard (never its apex).
func hostMatches(pattern, host string) bool {
	if base, wild := strings.CutPrefix(pattern, "*."); wild {
		return strings.HasSuffix(host, "."+base)
	}
	return pattern == host
}
