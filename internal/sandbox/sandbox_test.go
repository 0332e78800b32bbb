package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestUnsupported: a platform without a backend refuses to launch anything, with ErrUnsupported.
func TestUnsupported(t *testing.T) {
	var b Backend = Unsupported{}
	l, err := b.Launch(context.Background(), &LaunchSpec{User: User{UID: 1000, GID: 1000}})
	if l != nil || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Launch = %v, %v; want ErrUnsupported", l, err)
	}
	if _, err := Start(context.Background(), b, &LaunchSpec{}, &Spec{Args: []string{"true"}}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Start = %v; want ErrUnsupported", err)
	}
}

// TestNoOverlay: the mark reads as the kernel's reason, and is both ErrNoOverlay and the reason,
// through a SetupError too.
func TestNoOverlay(t *testing.T) {
	cause := errors.New("create overlay: invalid argument")
	err := error(&SetupError{Step: "mounting", Err: NoOverlay(cause)})
	if !errors.Is(err, ErrNoOverlay) || !errors.Is(err, cause) {
		t.Errorf("%v: Is(ErrNoOverlay) %v, Is(cause) %v; want both", err, errors.Is(err, ErrNoOverlay), errors.Is(err, cause))
	}
	if got := NoOverlay(cause).Error(); got != cause.Error() {
		t.Errorf("NoOverlay reads %q, want %q", got, cause.Error())
	}
	if errors.Is(&SetupError{Step: "mounting", Err: cause}, ErrNoOverlay) {
		t.Error("an unmarked setup error is ErrNoOverlay")
	}
}

func TestEgressPortsValidate(t *testing.T) {
	for _, tc := range []struct {
		p  EgressPorts
		ok bool
	}{
		{EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 53}, true},
		{EgressPorts{}, false},
		{EgressPorts{Transparent: 15001, Proxy: 3128}, false},
		{EgressPorts{Transparent: 1, Proxy: 1, DNS: 53}, false},
		{EgressPorts{Transparent: 1, Proxy: 2, DNS: 2}, false},
		{EgressPorts{Transparent: 53, Proxy: 2, DNS: 53}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}

// TestListenersClose closes every socket of the set, TCP and UDP.
func TestListenersClose(t *testing.T) {
	var l Listeners
	for _, group := range []*[]net.Listener{&l.Transparent, &l.Proxy, &l.DNSTCP} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		*group = append(*group, ln)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.DNSUDP = append(l.DNSUDP, pc)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ln := range append(append(l.Transparent, l.Proxy...), l.DNSTCP...) {
		if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			t.Errorf("%v still accepts after Close", ln.Addr())
		}
	}
	if _, _, err := pc.ReadFrom(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the UDP socket after Close: %v", err)
	}
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "closing") {
		t.Errorf("a second Close = %v, want the sockets' errors", err)
	}
}

func ExampleNoOverlay() {
	err := &SetupError{Step: "mounting the copy-on-write workspace (overlayfs)", Err: NoOverlay(errors.New("create overlay: invalid argument"))}
	fmt.Println(errors.Is(err, ErrNoOverlay))
	fmt.Println(err)
	// Output:
	// true
	// sandbox setup failed at mounting the copy-on-write workspace (overlayfs): create overlay: invalid argument
}
