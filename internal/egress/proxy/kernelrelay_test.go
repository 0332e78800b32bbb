package proxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy/kernelrelay"
)

// relayModes are the gateway's two ways of relaying a passed-through connection: its user-space
// relay, and the kernel relay (root only: rootless, the kernel mode is skipped, and a kernel relay
// that will not load as root fails the test, since CI runs as root).
var relayModes = []struct {
	name   string
	kernel bool
}{{"user", false}, {"kernel", true}}

// relayHarness returns a harness whose gateway relays in the given mode.
func relayHarness(t *testing.T, kernel bool) *harness {
	t.Helper()
	if !kernel {
		return newHarness(t)
	}
	if os.Geteuid() != 0 {
		t.Skip("the kernel relay needs root (CAP_BPF, CAP_NET_ADMIN); rootless, the gateway relays in user space")
	}
	kr, err := kernelrelay.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kr.Close() })
	return newHarness(t, func(c *Config) { c.KernelRelay = kr })
}

// checkMode fails unless the event says the connection was relayed the way the mode says: a kernel
// test that silently fell back to user space would prove nothing.
func checkMode(t *testing.T, e audit.Event, kernel bool) {
	t.Helper()
	if got := e.Detail["relay"] == "kernel"; got != kernel {
		t.Errorf("relay detail %q, kernel mode %v", e.Detail["relay"], kernel)
	}
}

// TestRelayModesHalfClose: each direction's end is passed on as a half-close after every byte before
// it, while the other direction still flows, both ways round; the audit counts every byte.
func TestRelayModesHalfClose(t *testing.T) {
	for _, m := range relayModes {
		t.Run(m.name, func(t *testing.T) {
			h := relayHarness(t, m.kernel)
			// The client ends first: the upstream reads to EOF, then answers. A round trip first, so
			// that the FIN comes after the handover (a socket that has its peer's FIN already cannot
			// enter a sockmap, and stays in user space).
			ln := listen(t)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				io.ReadFull(c, make([]byte, 3))
				io.WriteString(c, "ok")
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "got %d bytes", n)
			}()
			port := portOf(ln.Addr())
			h.pol.allow("api.test", port, loopback)
			c, err := h.dialMapped("api.test", port)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "\x00hi")
			if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			out, err := rawExchange(c, string(bytes.Repeat([]byte{1}, 200000)))
			if err != nil || out != "got 200000 bytes" {
				t.Fatalf("got %q, %v", out, err)
			}
			e := h.rec.waitFor(t, 0, "allow", isAllow("api.test", port))
			if e.BytesOut != 200003 || e.BytesIn != int64(2+len(out)) || e.Detail["error"] != "" {
				t.Errorf("bytes out %d in %d, error %q", e.BytesOut, e.BytesIn, e.Detail["error"])
			}
			checkMode(t, e, m.kernel)

			// The upstream ends first, then keeps reading: the client's bytes still reach it.
			ln2 := listen(t)
			got := make(chan string, 1)
			go func() {
				c, err := ln2.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				first := make([]byte, 6)
				_, _ = io.ReadFull(c, first)
				io.WriteString(c, "ok")
				_, _ = io.ReadFull(c, make([]byte, 1)) // the "!" after the round trip
				io.WriteString(c, "bye")
				c.(*net.TCPConn).CloseWrite()
				rest, _ := io.ReadAll(c)
				got <- string(first) + string(rest)
			}()
			port2 := portOf(ln2.Addr())
			h.pol.allow("api.test", port2, loopback)
			c2, err := h.dialMapped("api.test", port2)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			c2.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c2, "\x00hello")
			if _, err := io.ReadFull(c2, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			io.WriteString(c2, "!")
			bye, err := io.ReadAll(c2) // to the upstream's FIN
			if err != nil || string(bye) != "bye" {
				t.Fatalf("client read %q, %v", bye, err)
			}
			io.WriteString(c2, " after the FIN")
			c2.(*net.TCPConn).CloseWrite()
			if s := <-got; s != "\x00hello after the FIN" {
				t.Errorf("upstream got %q", s)
			}
			e = h.rec.waitFor(t, 1, "allow", isAllow("api.test", port2))
			if e.BytesOut != 21 || e.BytesIn != 5 {
				t.Errorf("bytes out %d in %d, want 21, 5", e.BytesOut, e.BytesIn)
			}
			checkMode(t, e, m.kernel)
		})
	}
}

// TestRelayModesLarge sends 32 MiB each way at once, after a greeting the upstream sends before the
// client's first byte, and checks both by hash and the audit's counts. The bulk starts after a round
// trip, so that in the kernel mode it is the kernel relay's (a connection whose bytes keep arriving
// during the handover stays in user space, which the relay detail would show).
func TestRelayModesLarge(t *testing.T) {
	const size = 32 << 20
	for _, m := range relayModes {
		t.Run(m.name, func(t *testing.T) {
			h := relayHarness(t, m.kernel)
			ln := listen(t)
			upGot := make(chan [32]byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				io.WriteString(c, "banner\n")
				hello := make([]byte, 3)
				io.ReadFull(c, hello)
				io.WriteString(c, "ready")
				io.ReadFull(c, hello[:2])
				wrote := make(chan struct{})
				go func() {
					writeRandom(c, size, 2)
					c.(*net.TCPConn).CloseWrite()
					close(wrote)
				}()
				upGot <- hashAll(c)
				<-wrote
			}()
			port := portOf(ln.Addr())
			h.pol.allow("api.test", port, loopback)
			c, err := h.dialMapped("api.test", port)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			greeting := make([]byte, 12)
			if _, err := io.ReadFull(c, greeting[:7]); err != nil || string(greeting[:7]) != "banner\n" {
				t.Fatalf("banner %q, %v", greeting, err)
			}
			io.WriteString(c, "\x00hi")
			if _, err := io.ReadFull(c, greeting[7:]); err != nil || string(greeting[7:]) != "ready" {
				t.Fatalf("ready %q, %v", greeting, err)
			}
			io.WriteString(c, "go")
			sent := make(chan [32]byte, 1)
			go func() {
				sent <- writeRandom(c, size, 1)
				c.(*net.TCPConn).CloseWrite()
			}()
			down := hashAll(c)
			if want := randomHash(size, 2); down != want {
				t.Error("the client did not get the upstream's bytes whole")
			}
			if <-upGot != <-sent {
				t.Error("the upstream did not get the client's bytes whole")
			}
			e := h.rec.waitFor(t, 0, "allow", isAllow("api.test", port))
			if e.BytesOut != size+5 || e.BytesIn != size+12 || e.Detail["error"] != "" {
				t.Errorf("bytes out %d in %d (want %d, %d), error %q", e.BytesOut, e.BytesIn, size+5, size+12, e.Detail["error"])
			}
			checkMode(t, e, m.kernel)
		})
	}
}

// TestRelayModesReset: an upstream that resets mid-stream resets the client (not a clean end it
// could take for a complete answer), and the audit records the error; a client that resets resets
// the upstream (a FIN would tell it a cut upload was whole). Each reset comes after a round trip
// through the relay, so in the kernel mode it is the kernel relay's to pass on.
func TestRelayModesReset(t *testing.T) {
	for _, m := range relayModes {
		t.Run(m.name, func(t *testing.T) {
			h := relayHarness(t, m.kernel)
			ln := listen(t)
			upEnd := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					first := make([]byte, 3)
					io.ReadFull(c, first)
					io.WriteString(c, "ok")
					if i == 0 { // resets after the client's second message
						io.ReadFull(c, first[:1])
						c.(*net.TCPConn).SetLinger(0)
						c.Close()
						continue
					}
					io.ReadFull(c, first[:1])
					io.WriteString(c, "k")
					_, err = io.ReadAll(c) // the client resets
					upEnd <- err
					c.Close()
				}
			}()
			port := portOf(ln.Addr())
			h.pol.allow("api.test", port, loopback)
			c, err := h.dialMapped("api.test", port)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "\x00ab")
			if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "x")
			b, err := io.ReadAll(c)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("client read %q, %v; want a reset", b, err)
			}
			c.Close()
			e := h.rec.waitFor(t, 0, "allow", isAllow("api.test", port))
			if e.Detail["error"] == "" {
				t.Error("no error recorded for the upstream's reset")
			}
			checkMode(t, e, m.kernel)

			c2, err := h.dialMapped("api.test", port)
			if err != nil {
				t.Fatal(err)
			}
			c2.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c2, "\x00ab")
			if _, err := io.ReadFull(c2, make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			io.WriteString(c2, "y")
			if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			reset(c2)
			select {
			case err := <-upEnd:
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("the upstream's read ended with %v after the client's reset, want a reset", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream's connection stayed open after the client's reset")
			}
			e = h.rec.waitFor(t, 1, "allow", isAllow("api.test", port))
			checkMode(t, e, m.kernel)
		})
	}
}

// TestRelayModesTLS passes TLS to a host that is not inspected through both modes: the handshake
// and an HTTPS exchange work end to end through the relay.
func TestRelayModesTLS(t *testing.T) {
	for _, m := range relayModes {
		t.Run(m.name, func(t *testing.T) {
			h := relayHarness(t, m.kernel)
			u := h.httpsUpstream()
			h.pol.allow("api.test", u.port, loopback)
			cl := h.transparentClient(nil)
			resp, err := cl.Get(fmt.Sprintf("https://api.test:%d/hello", u.port))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %q", resp.StatusCode, body)
			}
			cl.CloseIdleConnections()
			// The client closes with the server's close_notify on its way, so the connection may
			// end with a reset either way; the exchange above is what must work.
			e := h.rec.waitFor(t, 0, "allow", isAllow("api.test", u.port))
			if e.BytesIn == 0 || e.BytesOut == 0 {
				t.Errorf("bytes out %d in %d", e.BytesOut, e.BytesIn)
			}
			checkMode(t, e, m.kernel)
		})
	}
}

// writeRandom writes n pseudo-random bytes from seed to w and returns their hash.
func writeRandom(w io.Writer, n int64, seed byte) [32]byte {
	h := sha256.New()
	src := rand.NewChaCha8([32]byte{seed})
	buf := make([]byte, 1<<20)
	for left := n; left > 0; {
		k := int(min(left, int64(len(buf))))
		src.Read(buf[:k])
		h.Write(buf[:k])
		if _, err := w.Write(buf[:k]); err != nil {
			break
		}
		left -= int64(k)
	}
	return [32]byte(h.Sum(nil))
}

func randomHash(n int64, seed byte) [32]byte { return writeRandom(io.Discard, n, seed) }

func hashAll(r io.Reader) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, r)
	return [32]byte(h.Sum(nil))
}
