package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
)

type allowAll struct{}

func (allowAll) Decide(string, uint16) egress.Decision {
	return egress.Decision{Allow: true, Rule: "test"}
}
func (allowAll) Known(string) bool { return true }

type nopRecorder struct{}

func (nopRecorder) Record(audit.Event) {}

// TestServiceDialsTheSocket: a name and port Config.Services knows is dialled at its unix socket and
// never resolved (the resolver here fails the test), and the relay's raw copy carries it.
func TestServiceDialsTheSocket(t *testing.T) {
	resolved := 0
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	g, err := New(Config{Policy: allowAll{}, Recorder: nopRecorder{},
		LookupNetIP: func(_ context.Context, host string) ([]netip.Addr, error) {
			resolved++
			return nil, nil
		},
		Services: func(name string, port uint16) (string, bool) {
			return sock, name == "db.cordon.internal" && port == 5432
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.DialUpstream(context.Background(), "db.cordon.internal", 5432)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resolved != 0 {
		t.Errorf("the service's name was resolved")
	}
	if _, ok := rawSocket(c); !ok {
		t.Errorf("a service connection (%T) is not relayed raw", c)
	}
	io.WriteString(c, "ping")
	c.(*net.UnixConn).CloseWrite()
	got, _ := io.ReadAll(c)
	if string(got) != "ping" {
		t.Errorf("echo %q", got)
	}
	// Control: another port of the same name is no service, so it is resolved (and refused here).
	if _, err := g.DialUpstream(context.Background(), "db.cordon.internal", 22); err == nil || !strings.Contains(err.Error(), "no address") {
		t.Errorf("port 22: %v", err)
	}
	if resolved != 1 {
		t.Errorf("control: port 22 was not resolved")
	}
}
