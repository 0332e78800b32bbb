package origdst

import (
	"net"
	"testing"
)

// TestOrigDstRejectsNonTCP: only a TCP connection has an original destination to ask for.
func TestOrigDstRejectsNonTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := Of(a); err == nil {
		t.Error("origDst of a pipe succeeded")
	}
}

// TestOrigDstOfDirectConnection: a connection no rule redirected was going to the listener itself;
// where connection tracking is not running there is nothing to ask and origDst says so. (The
// redirected case needs a sandbox's rules: the end-to-end tests of cmd/cordon cover it.)
func TestOrigDstOfDirectConnection(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dst, err := Of(s)
	if err != nil {
		t.Logf("no connection tracking here: %v", err)
		return
	}
	if got, want := dst.String(), ln.Addr().String(); got != want {
		t.Errorf("origDst = %s, want the listener's own %s", got, want)
	}
}
