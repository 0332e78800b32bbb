package gateway

import (
	"fmt"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// Service is a fixture server of the run (policy services), which the sandbox reaches as
// Name.cordon.internal:Port and the gateway dials at Socket.
type Service struct {
	// Name is the policy's service name.
	Name string
	// Port is the one port the sandbox may connect to.
	Port uint16
	// Socket is the unix socket the server listens on, outside the sandbox.
	Socket string
}

// withServices puts the run's services in front of the policy: their names are known and allowed
// on their port, and every other name under cordon.internal is refused, never resolved or dialled
// whatever network.allow says (a wildcard there must not send a made-up service name upstream).
type withServices struct {
	egress.Policy
	byHost map[string]Service
}

func newWithServices(p egress.Policy, services []Service) *withServices {
	w := &withServices{Policy: p, byHost: map[string]Service{}}
	for _, s := range services {
		w.byHost[s.Name+"."+policy.ServiceDomain] = s
	}
	return w
}

func (w *withServices) Decide(host string, port uint16) egress.Decision {
	s, ok := w.byHost[host]
	switch {
	case ok && port == s.Port:
		return egress.Decision{Allow: true, Rule: "services." + s.Name, Reason: "fixture service"}
	case ok:
		return egress.Decision{Rule: "services." + s.Name, Reason: fmt.Sprintf("the service listens on port %d only", s.Port)}
	case inServiceDomain(host):
		return egress.Decision{Rule: "services", Reason: "no such service in the policy"}
	}
	return w.Policy.Decide(host, port)
}

func (w *withServices) Known(host string) bool {
	if _, ok := w.byHost[host]; ok {
		return true
	}
	return !inServiceDomain(host) && w.Policy.Known(host)
}

// Explain names the rule behind Known for the DNS's audit events, as the policy's matcher does.
func (w *withServices) Explain(host string) (rule, reason string) {
	if s, ok := w.byHost[host]; ok {
		return "services." + s.Name, "fixture service"
	}
	if inServiceDomain(host) {
		return "services", "no such service in the policy"
	}
	if e, ok := w.Policy.(interface{ Explain(string) (string, string) }); ok {
		return e.Explain(host)
	}
	return "default", "not an allowed name"
}

// socket is the unix socket of the service at host:port, if there is one.
func (w *withServices) socket(host string, port uint16) (string, bool) {
	s, ok := w.byHost[host]
	if !ok || s.Port != port {
		return "", false
	}
	return s.Socket, true
}

func inServiceDomain(host string) bool {
	return host == policy.ServiceDomain || strings.HasSuffix(host, "."+policy.ServiceDomain)
}
