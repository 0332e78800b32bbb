package creds

import (
	"fmt"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// This file is host matching: the patterns a credential is bound to, normalised once at Prepare, and
// the check of a request's host against them.

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

// matchHost reports whether host (lower-case) matches pattern as normalizePattern returned it: a
// wildcard matches subdomains only, never the apex.
func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return pattern == host
}

func (e *entry) boundTo(host string) bool {
	for _, p := range e.inject.Hosts {
		if matchHost(p, host) {
			return true
		}
	}
	return false
}
