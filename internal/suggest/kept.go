package suggest

import (
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// What stays refused. A suggestion is an edit the user reviews, and a reviewer skims: so what no
// allow entry should ever open is not offered as one, however often it was refused. Each kept
// refusal is printed apart with the reason below.

// metadataAddrs are the cloud instance metadata services (AWS, GCP, Azure, OpenStack: the
// link-local 169.254.169.254; AWS over IPv6; Alibaba; Oracle's second address).
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true,
	netip.MustParseAddr("169.254.170.2"):   true, // ECS task credentials
	netip.MustParseAddr("fd00:ec2::254"):   true,
	netip.MustParseAddr("100.100.100.200"): true,
	netip.MustParseAddr("192.0.0.192"):     true,
}

// metadataNames are the names the metadata services answer under.
var metadataNames = map[string]bool{
	"metadata":                   true,
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
	"metadata.azure.internal":    true,
	"metadata.tencentyun.com":    true,
}

// hostKept says why a name (or an address written where a name goes) stays refused, or "".
func (a *analyzer) hostKept(name string) string {
	h := strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	if addr, err := netip.ParseAddr(h); err == nil {
		return addrKept(addr)
	}
	switch {
	case h == "":
		return "no name was recorded"
	case metadataNames[h]:
		return "a cloud metadata service's name (it hands out the machine's credentials): never suggested"
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return "a loopback name: the host's own services are never suggested"
	}
	if why := a.tunnel[audit.Domain(h)]; why != "" {
		return why
	}
	if why := dataShaped(h); why != "" {
		return why
	}
	return ""
}

// Labels of real host names are words, abbreviations and short ids; labels that carry data are long
// runs of encoded bytes (hex, base32, base64url). The thresholds leave every name of a registry, a
// CDN or a cloud API seen in the tests' presets alone.
const (
	longLabel    = 32  // no label this long is suggested
	encodedLabel = 20  // from this length a label is judged by its bytes
	longName     = 120 // nor a name this long
	// encodedEntropy is the bits per character above which a label of encodedLabel or more with
	// digits in it reads as encoded data (a word has few digits; a host's id few distinct ones).
	encodedEntropy = 3.0
)

// dataShaped says why name looks like data sent out in a DNS name, or "".
func dataShaped(name string) string {
	if len(name) > longName {
		return fmt.Sprintf("a name of %d characters: the shape of data sent out in DNS names", len(name))
	}
	for _, l := range strings.Split(name, ".") {
		if len(l) >= longLabel {
			return fmt.Sprintf("a label of %d characters (%.12s…): the shape of data sent out in DNS names", len(l), l)
		}
		if len(l) >= encodedLabel && digits(l) >= 3 && entropy(l) > encodedEntropy {
			return fmt.Sprintf("the label %q reads as encoded bytes: the shape of data sent out in DNS names", l)
		}
	}
	return ""
}

func digits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			n++
		}
	}
	return n
}

// entropy is the Shannon entropy of s's bytes, in bits per byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// keptReasons explain the gateway's refusals that are about the traffic's shape, not about what the
// policy lists. The keys are the reasons the gateway records (internal/egress/proxy/session.go,
// explicit.go, intercept/handler.go, policy/netmatch.go).
var keptReasons = map[string]string{
	"an IP address, not a host name":                          "a raw IP address: cordon allows names, never addresses",
	"the target is an IP address, not a name":                 "a raw IP address: cordon allows names, never addresses",
	"address not handed out by the sandbox's DNS":             "a raw IP address (not one the sandbox's DNS handed out): cordon allows names, never addresses",
	"SNI is an IP address":                                    "TLS naming an IP address: cordon allows names, never addresses",
	"SNI does not match the name":                             "the TLS name differs from the name connected to (domain fronting)",
	"Host does not match the name":                            "the Host header differs from the name connected to (domain fronting)",
	"request URI does not match the name":                     "the request's URI names another host than the one connected to (fronting)",
	"Host does not match the request URI":                     "the Host header differs from the request's URI (fronting)",
	"Host does not match the CONNECT target":                  "the Host header differs from the CONNECT target (fronting)",
	"Host does not match the connection's name":               "the Host header differs from the TLS name (domain fronting)",
	"CONNECT through a connection the gateway already judged": "a CONNECT relayed through an allowed host to reach another",
	"CONNECT inside an intercepted connection":                "a CONNECT relayed through an allowed host to reach another",
	"TLS without a server name":                               "TLS that does not say which host it is for",
	"encrypted ClientHello hides the name":                    "TLS that hides which host it is for (ECH)",
	"in network.deny":                                         "network.deny refuses it: that is your own line; remove it by hand if you mean to",
	"not a valid host name":                                   "not a valid host name",
}

// keptReason says why a refusal the policy could not lift stays refused.
func keptReason(reason string) string {
	if why, ok := keptReasons[reason]; ok {
		return why
	}
	if strings.HasPrefix(reason, "resolves to a ") {
		return reason + ": cordon never dials such addresses for a name unless network.hosts pins it (do that by hand if the service is yours)"
	}
	if reason == "" {
		return "refused by the gateway"
	}
	return "not something an allow entry lifts: " + reason
}
