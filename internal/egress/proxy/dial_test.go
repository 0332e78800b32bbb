package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
)

func TestAddressClass(t *testing.T) {
	for _, tt := range []struct {
		addr, want string
	}{
		{"93.184.216.34", ""},
		{"2606:2800:220:1:248:1893:25c8:1946", ""},
		{"192.0.2.1", ""}, // documentation, but routable as far as the gateway can tell
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"fd00:ec2::254", "private"}, // AWS's IPv6 metadata address
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fc00::1", "private"},
		{"224.0.0.1", "link-local"},
		{"239.1.2.3", "multicast"},
		{"ff02::1", "link-local"},
		{"ff0e::1", "multicast"},
		{"0.1.2.3", "reserved"},
		{"100.100.100.100", "reserved"},
		{"198.18.0.1", "reserved"},
		{"255.255.255.255", "reserved"},
		{"240.0.0.1", "reserved"},
		{"::7f00:1", "loopback (embedded IPv4)"},
		{"64:ff9b::a9fe:a9fe", "link-local (embedded IPv4)"},
		{"64:ff9b::5db8:d822", ""},
		{"2002:7f00:1::", "loopback (6to4)"},
		{"2002:a9fe:a9fe::1", "link-local (6to4)"},
		{"fec0::1", "reserved"},
	} {
		if got := addressClass(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.addr, got, tt.want)
		}
	}
	if got := addressClass(netip.Addr{}); got != "invalid" {
		t.Errorf("zero address: %q", got)
	}
}

// TestDialSkipsForbiddenAnswers checks that a resolver answering a mix of forbidden and public
// addresses gets only the public one dialed.
func TestDialSkipsForbiddenAnswers(t *testing.T) {
	h := newHarness(t)
	u := h.httpUpstream()
	h.pol.allow("public.test", u.port, netip.Addr{})
	h.setResolve("public.test", loopback, netip.MustParseAddr("169.254.169.254"), ownAddr, publicAddr)
	h.publicRoute(u.port)
	if _, body, err := get(h.transparentClient(nil), fmt.Sprintf("http://public.test:%d/", u.port), ""); err != nil || body == "" {
		t.Fatalf("%q %v", body, err)
	}
	if got, want := h.dialedAddrs(), []string{netip.AddrPortFrom(publicAddr, u.port).String()}; !slices.Equal(got, want) {
		t.Errorf("dialed %q, want %q", got, want)
	}
}

// TestDialFailsClosed checks that when this host's addresses cannot be listed, nothing is dialed by
// resolution (any answer could be the host itself), while a pinned upstream still works.
func TestDialFailsClosed(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.LocalAddrs = func() ([]netip.Addr, error) { return nil, errors.New("netlink says no") }
	})
	u := h.httpUpstream()
	h.pol.allow("public.test", u.port, netip.Addr{})
	h.pol.allow("api.test", u.port, loopback)
	h.setResolve("public.test", publicAddr)
	h.publicRoute(u.port)
	code, body, err := get(h.proxyClient(nil), fmt.Sprintf("http://public.test:%d/", u.port), "")
	if err != nil || code != 502 || len(h.dialedAddrs()) != 0 {
		t.Fatalf("%d %q %v, dialed %q; want 502 and nothing dialed", code, body, err, h.dialedAddrs())
	}
	if code, _, err := get(h.proxyClient(nil), fmt.Sprintf("http://api.test:%d/", u.port), ""); err != nil || code != 200 {
		t.Fatalf("pinned upstream: %d %v", code, err)
	}
}

func TestNewRequiresConfig(t *testing.T) {
	h := newHarness(t)
	full := h.g.cfg
	for name, drop := range map[string]func(*Config){
		"Policy":      func(c *Config) { c.Policy = nil },
		"Recorder":    func(c *Config) { c.Recorder = nil },
		"LookupNetIP": func(c *Config) { c.LookupNetIP = nil },
	} {
		c := full
		drop(&c)
		if _, err := New(c); err == nil {
			t.Errorf("New without %s succeeded", name)
		}
	}
	c := full
	c.Names = nil
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Transparent(h.ctx, listen(t)); err == nil {
		t.Error("Transparent without Names succeeded")
	}
}

// pinnedPolicy allows every name, pinned to one address, as network.hosts does.
type pinnedPolicy struct{ to netip.Addr }

func (p pinnedPolicy) Decide(string, uint16) egress.Decision {
	return egress.Decision{Allow: true, Rule: "test", Upstream: p.to}
}
func (pinnedPolicy) Known(string) bool { return true }

// TestDialWithoutDialContext: without Config.DialContext (as the gateway runs) the upstream is a
// *net.TCPConn to the checked address, so the relay copies it raw; a port nobody listens on is an
// error that names the address and goes to Config.Unreachable; and an address the gateway refuses
// stays refused before any dial. (net.Dialer.DialTCP, which would skip formatting the address and
// parsing it back, binds the socket before connecting, taking an ephemeral port for itself whatever
// the destination: the gateway keeps DialContext.)
func TestDialWithoutDialContext(t *testing.T) {
	ln := listen(t)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(c, c)
			c.Close()
		}
	}()
	var unreachable []string
	g, err := New(Config{Policy: pinnedPolicy{loopback}, Recorder: nopRecorder{},
		LookupNetIP: func(context.Context, string) ([]netip.Addr, error) { return nil, nil },
		Unreachable: func(name string, port uint16, err error) {
			unreachable = append(unreachable, fmt.Sprintf("%s:%d %v", name, port, err))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(ln.Addr())
	s := &session{g: g, ev: audit.Event{Detail: map[string]string{}}}
	c, err := s.dial(context.Background(), "a.test", port, g.cfg.Policy.Decide("a.test", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("the upstream is a %T, not a *net.TCPConn", c)
	}
	if want := netip.AddrPortFrom(loopback, port).String(); tc.RemoteAddr().String() != want || s.ev.Detail["upstream"] != want {
		t.Errorf("dialed %s, recorded %q; want %s", tc.RemoteAddr(), s.ev.Detail["upstream"], want)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	_ = tc.CloseWrite()
	if got, _ := io.ReadAll(c); string(got) != "ping" {
		t.Errorf("echo %q", got)
	}

	// A closed port: the error names the address, and the human hears of it.
	dead := listen(t)
	deadPort := portOf(dead.Addr())
	dead.Close()
	if _, err := s.dial(context.Background(), "b.test", deadPort, g.cfg.Policy.Decide("b.test", deadPort)); err == nil ||
		!strings.Contains(err.Error(), netip.AddrPortFrom(loopback, deadPort).String()) {
		t.Errorf("dial to a closed port: %v", err)
	}
	if len(unreachable) != 1 || !strings.HasPrefix(unreachable[0], fmt.Sprintf("b.test:%d ", deadPort)) {
		t.Errorf("Unreachable got %q", unreachable)
	}

	// Unpinned, a name that resolves to loopback is refused, and nothing is dialed: a connection
	// that had been made would wait in the listener's backlog (a dial returns after the handshake).
	idle := listen(t).(*net.TCPListener)
	defer idle.Close()
	idlePort := portOf(idle.Addr())
	g.cfg.Policy = allowAll{}
	g.cfg.LookupNetIP = func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{loopback}, nil }
	var r *refusal
	if _, err := s.dial(context.Background(), "c.test", idlePort, g.cfg.Policy.Decide("c.test", idlePort)); !errors.As(err, &r) {
		t.Errorf("a name resolving to loopback: %v, want a refusal", err)
	}
	_ = idle.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := idle.Accept(); err == nil {
		c.Close()
		t.Error("the refused name's loopback address was dialed")
	}
}
