// Package httpoverride is the one list of the HTTP headers that servers and frameworks read as a
// request's "real" method or path: method-override middleware, IIS/ASP.NET URL rewriting, proxies'
// original-URI headers. On a host whose requests the policy limits by method and path, the gateway
// refuses a request carrying one (a GET-only rule would otherwise pass a DELETE, a path rule a request
// for another path) unless a rule allows that header, and the policy accepts only these names in a
// rule's headers. Both read this list, so they cannot drift apart; it is a leaf so that the policy,
// which is data, need not import the gateway to know it.
package httpoverride

import "strings"

// Key is the form in which header names are compared: lower case, and "_" as "-" (CGI-style servers
// map both to the same variable, HTTP_X_HTTP_METHOD_OVERRIDE).
func Key(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// IsKey reports whether key, already in the form of Key, is one of the override headers. It is the
// check for a request's every header, which has its key at hand.
func IsKey(key string) bool {
	switch key {
	case "x-http-method-override", "x-http-method", "x-method-override", "x-original-method",
		"x-forwarded-method", "x-original-url", "x-original-uri", "x-rewrite-url", "x-override-url",
		"x-forwarded-uri", "x-forwarded-url", "x-forwarded-path", "x-forwarded-prefix",
		"x-envoy-original-path":
		return true
	}
	return false
}

// Is reports whether name, in any spelling, is one of the override headers.
func Is(name string) bool { return IsKey(Key(name)) }
