package policy

import (
	"slices"
	"strings"
	"testing"
)

// TestParseEndpoint: the one-line form accepts what network.allow accepts, with an optional port, and
// refuses what it refuses with the same message.
func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in   string
		host string
		port uint16
		err  string
	}{
		{in: "api.example.com", host: "api.example.com", port: 443},
		{in: "API.Example.com.", host: "api.example.com", port: 443},
		{in: "api.example.com:8443", host: "api.example.com", port: 8443},
		{in: "*.example.com", host: "*.example.com", port: 443},
		{in: "*.example.com:22", host: "*.example.com", port: 22},
		{in: "https://api.example.com", err: "not a URL"},
		{in: "https://api.example.com:443/v1", err: "not a URL"},
		{in: "api.example.com/v1", err: "no path"},
		{in: "api.example.com:0", err: "the port must be a number from 1 to 65535"},
		{in: "api.example.com:65536", err: "the port must be a number from 1 to 65535"},
		{in: "api.example.com:https", err: "the port must be a number from 1 to 65535"},
		{in: "10.0.0.5", err: "is an IP address"},
		{in: "10.0.0.5:22", err: "is an IP address"},
		{in: "[::1]:22", err: "is an IP address"},
		{in: "::1", err: "is an IP address"},
		{in: "*.com", err: "too broad"},
		{in: "a.*.example.com", err: "wildcard is only allowed as a leading"},
		{in: "", err: "empty host name"},
		{in: ":443", err: "empty host name"},
		{in: "bad_name.example.com", err: "not a valid host name"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			ep, err := ParseEndpoint(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want an error containing %q, got %v (%+v)", tc.err, err, ep)
				}
				return
			}
			if err != nil || ep.Host != tc.host || !slices.Equal(ep.Ports, []uint16{tc.port}) {
				t.Fatalf("want %s port %d, got %+v, %v", tc.host, tc.port, ep, err)
			}
		})
	}
}

// TestParseEndpointMatchesTheFile: every host ParseEndpoint refuses, network.allow refuses with the
// same message, and the reverse.
func TestParseEndpointMatchesTheFile(t *testing.T) {
	for _, host := range []string{"api.example.com", "*.example.com", "https://x.example.com", "10.0.0.5", "*.com", "a..b", "x.example.com/p"} {
		_, lineErr := ParseEndpoint(host)
		_, fileErr := Parse("p.yaml", []byte("version: 1\nnetwork:\n  allow: ["+`"`+host+`"`+"]\n"), Options{})
		if (lineErr == nil) != (fileErr == nil) || lineErr != nil && !strings.HasSuffix(fileErr.Error(), lineErr.Error()) {
			t.Errorf("%q: --allow says %v, the file says %v", host, lineErr, fileErr)
		}
	}
}
