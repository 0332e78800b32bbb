package cordon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
)

// TestPublishRefusesGatewayPorts: a published port that is one of the gateway's inside is refused
// before anything listens (it would hand the sandbox's egress, credentials included, to whoever on
// the host reaches the address); the control, another port, is opened.
func TestPublishRefusesGatewayPorts(t *testing.T) {
	host := netip.MustParseAddrPort("127.0.0.1:0")
	gp := gateway.Ports()
	for _, port := range []uint16{gp.Proxy, gp.Transparent, gp.DNS} {
		p, err := listenPublished([]Publish{{Host: host, Port: port}}, true)
		if err == nil || !strings.Contains(err.Error(), "gateway") {
			p.close()
			t.Errorf("port %d: %v, want refused", port, err)
		}
	}
	p, err := listenPublished([]Publish{{Host: host, Port: 8080}}, true)
	if err != nil {
		t.Fatalf("the control: %v", err)
	}
	p.close()
}
