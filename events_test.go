package cordon_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// TestOnEventIsTheLiveLog: a run that reaches an allowed upstream and is refused another gets
// both decisions through Config.OnEvent as they are logged, in the log's order and as the finished
// run reads them back, and nothing once Wait has returned.
func TestOnEventIsTheLiveLog(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "UPSTREAM") })}
	go srv.Serve(ln)
	defer srv.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)

	pol := cordon.DefaultPolicy()
	loopback := netip.MustParseAddr("127.0.0.1")
	pol.Network = &policy.Network{
		Allow: []policy.Endpoint{{Host: "pkg.test", Ports: []uint16{port}}},
		Hosts: map[string]netip.Addr{"pkg.test": loopback, "other.test": loopback},
	}
	cfg := config(t, pol, "sh", "-c", fmt.Sprintf(
		"curl -sS -m 10 --noproxy '*' http://pkg.test:%[1]d/; curl -sS -m 10 http://other.test:%[1]d/; true", port))
	var (
		mu       sync.Mutex
		live     []cordon.Event
		returned atomic.Bool
		late     atomic.Int64
	)
	cfg.OnEvent = func(e cordon.Event) {
		if returned.Load() {
			late.Add(1)
			return
		}
		mu.Lock()
		live = append(live, e)
		mu.Unlock()
	}
	r := startOrSkip(t, context.Background(), cfg)
	exit, err := r.Wait(context.Background())
	returned.Store(true)
	if err != nil || exit.Network == nil {
		t.Fatalf("Wait = %+v, %v", exit, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("%d events arrived after Wait returned", n)
	}

	f, err := r.Finished()
	if err != nil {
		t.Fatal(err)
	}
	logged, err := f.Events()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(live, logged) {
		t.Fatalf("OnEvent received\n%+v\nthe log holds\n%+v", live, logged)
	}
	has := func(kind cordon.EventKind, name string, d cordon.Decision) bool {
		return slices.ContainsFunc(live, func(e cordon.Event) bool { return e.Kind == kind && e.Name == name && e.Decision == d })
	}
	for _, want := range []struct {
		kind cordon.EventKind
		name string
		d    cordon.Decision
	}{
		{cordon.EventDNS, "pkg.test", cordon.Allow},
		{cordon.EventConnect, "pkg.test", cordon.Allow},
		{cordon.EventConnect, "other.test", cordon.Deny},
	} {
		if !has(want.kind, want.name, want.d) {
			t.Errorf("OnEvent received no %s %s %s: %+v", want.kind, want.d, want.name, live)
		}
	}
}
