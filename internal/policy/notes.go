package policy

import (
	"fmt"
	"strings"
)

// Notes are one-line remarks on what a policy lets through that its lines do not make obvious, for
// `cordon policy check`: each names the policy line it is about. They are not errors; the policy is
// what the user asked for.
func (p *Policy) Notes() []string {
	if p.Network == nil {
		return nil
	}
	var out []string
	for i, ep := range p.Network.Allow {
		zone, ok := strings.CutPrefix(ep.Host, "*.")
		if !ok {
			continue
		}
		// The sandbox picks the names under a wildcard. The gateway resolves each name the sandbox
		// connects to (never one it only looks up), and the query reaches the zone's servers: whoever
		// runs them reads what the sandbox put in the name.
		out = append(out, fmt.Sprintf("network.allow[%d] %q: the sandbox chooses the names under it, and each one it connects to is resolved through %s's DNS servers, which see that name (a channel out, one name per connection); list exact hosts to close it", i, ep.Host, zone))
	}
	return out
}
