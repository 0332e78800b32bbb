package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseEndpoint reads an endpoint written on one line, as cordon run --allow takes it: a host or a
// "*.domain" wildcard exactly as network.allow accepts it, optionally followed by ":PORT" (443 when
// omitted). The host is checked by the same rules as the file's, so a URL, an IP address or a bad
// wildcard is refused with the same message.
func ParseEndpoint(s string) (Endpoint, error) {
	host, port := s, uint16(443)
	// A URL's "scheme://" and a bare IPv6 address's colons are not a port: leave those whole for the
	// host check, which names the mistake.
	if i := strings.LastIndexByte(s, ':'); i >= 0 && !strings.Contains(s, "://") && (!strings.Contains(s[:i], ":") || strings.HasPrefix(s, "[")) {
		n, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || n == 0 {
			return Endpoint{}, fmt.Errorf("%q: the port must be a number from 1 to 65535", s)
		}
		host, port = s[:i], uint16(n)
	}
	h, err := checkHostPattern(host)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Host: h, Ports: []uint16{port}}, nil
}
