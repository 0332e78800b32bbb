package intercept

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// TestFramingGate sends the intercepting server, over TLS and plain HTTP, requests whose framing the
// gateway's strict reader refuses but net/http would read (and forward, re-written, as something the
// client did not quite send): each must get the gate's 400, and the upstream must never see them. The
// well-framed controls on the same connections must be served.
func TestFramingGate(t *testing.T) {
	const ok = "GET /acme/app/ok HTTP/1.1\r\nHost: HOST\r\n\r\n"
	for _, tt := range []struct {
		name   string
		raw    string
		served int // requests served before the refusal
	}{
		{"bare LF", "GET /acme/app/smuggled HTTP/1.1\nHost: HOST\n\n", 0},
		{"Content-Length and Transfer-Encoding", "POST /acme/app/smuggled HTTP/1.1\r\nHost: HOST\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0},
		{"duplicate Content-Length", "POST /acme/app/smuggled HTTP/1.1\r\nHost: HOST\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 0},
		{"chunked, identity", "POST /acme/app/smuggled HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 0},
		{"obs-fold", "GET /acme/app/smuggled HTTP/1.1\r\nHost: HOST\r\nX-A: 1\r\n 2\r\n\r\n", 0},
		{"second request with a bare LF", ok + "GET /acme/app/smuggled HTTP/1.1\r\nHost: HOST\n\r\n", 1},
		{"second request with a space before the colon", ok + "GET /acme/app/smuggled HTTP/1.1\r\nHost : HOST\r\n\r\n", 1},
	} {
		for _, plain := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s plain=%v", tt.name, plain), func(t *testing.T) {
				up := newUpstream(t, nil, plain)
				s := newSetup(t, up, "github.com", plain, withRules(gitRules...))
				var c net.Conn
				if plain {
					var err error
					if c, err = net.Dial("tcp", s.addr); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
				} else {
					c, _ = s.raw(t)
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				io.WriteString(c, strings.ReplaceAll(tt.raw, "HOST", s.hostPort()))
				for i := range tt.served {
					resp, err := http.ReadResponse(br, nil)
					if err != nil || resp.StatusCode != 200 {
						t.Fatalf("control request %d: %v %v", i, resp, err)
					}
					io.Copy(io.Discard, resp.Body)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 400 || !strings.HasPrefix(string(body), "cordon: refused the request (malformed HTTP request") {
					t.Errorf("answer %d %q, want the gate's 400", resp.StatusCode, body)
				}
				if up.sawURI("/acme/app/smuggled") {
					t.Errorf("the upstream got the refused request")
				}
				s.rec.wait(t, func(e audit.Event) bool {
					return e.Decision == audit.Deny && e.Reason == reasonBadFraming && e.Detail["status"] == "400"
				})
			})
		}
	}
}

// TestFramingGatePasses checks that well-framed requests get through the gate unchanged: pipelined
// requests with Content-Length and chunked bodies (the chunked one in one-byte writes), answered in
// order on one connection.
func TestFramingGatePasses(t *testing.T) {
	for _, plain := range []bool{false, true} {
		up := newUpstream(t, nil, plain)
		s := newSetup(t, up, "github.com", plain, withRules(gitRules...))
		var c net.Conn
		if plain {
			var err error
			if c, err = net.Dial("tcp", s.addr); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		} else {
			c, _ = s.raw(t)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		hp := s.hostPort()
		first := fmt.Sprintf("POST /acme/app/a HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\nhello", hp)
		second := fmt.Sprintf("POST /acme/app/b HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n", hp)
		third := fmt.Sprintf("GET /acme/app/c HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hp)
		io.WriteString(c, first)
		for i := range len(second) {
			io.WriteString(c, second[i:i+1])
		}
		io.WriteString(c, third)
		br := bufio.NewReader(c)
		for _, want := range []string{`POST /acme/app/a host=` + hp + ` proto=HTTP/1.1 body="hello"`, `POST /acme/app/b host=` + hp + ` proto=HTTP/1.1 body="abc"`, `GET /acme/app/c`} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("plain=%v: %v", plain, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
				t.Errorf("plain=%v: %d %q, want %q", plain, resp.StatusCode, body, want)
			}
		}
	}
}

// TestFramingGateHoldsAfterAnUpgrade is the race of a websocket's first frame with net/http's
// background read: the 101 reaches the client before the hijack, and the frame the client then sends
// must not be framed as a request head (a refusal the gate would answer with a 400 inside the
// websocket). Held, the pending read ends at its deadline with a timeout, as net/http's abort
// expects, and after the hijack the frame is handed on byte for byte; released instead (no switch),
// the next request is framed as any; closed while held, the pending read ends with the connection.
func TestFramingGateHoldsAfterAnUpgrade(t *testing.T) {
	const head = "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
	// A masked text frame whose bytes hold a bare LF, as any frame's may: framed as a request head,
	// the strict reader refuses it ("line without CRLF").
	const frame = "\x81\x85\x01\x02\x03\x04ab\ncd"
	pair := func(t *testing.T) (client net.Conn, g *framingGate) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		client, err = net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		g = newFramingGate(server)
		t.Cleanup(func() { g.Close() })
		io.WriteString(client, head)
		buf := make([]byte, 1024)
		var got string
		for len(got) < len(head) {
			n, err := g.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += string(buf[:n])
		}
		if got != head {
			t.Fatalf("the upgrade request: %q", got)
		}
		return client, g
	}
	// pending is net/http's background read: it starts before the frame arrives.
	pending := func(g *framingGate) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := g.Read(make([]byte, 1))
			done <- err
		}()
		return done
	}

	t.Run("switched", func(t *testing.T) {
		client, g := pair(t)
		g.holdUpgrade()
		done := pending(g)
		io.WriteString(client, frame)
		time.Sleep(20 * time.Millisecond) // the frame is in; the read must still wait
		select {
		case err := <-done:
			t.Fatalf("the pending read returned before its abort: %v", err)
		default:
		}
		g.SetReadDeadline(time.Unix(1, 0)) // net/http's abortPendingRead
		var ne net.Error
		if err := <-done; !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the aborted read: %v, want a timeout", err)
		}
		g.SetReadDeadline(time.Time{})
		g.passThrough()
		got := make([]byte, len(frame))
		if _, err := io.ReadFull(g, got); err != nil || string(got) != frame {
			t.Fatalf("after the hijack: %q %v, want the frame as sent", got, err)
		}
		if err := g.refusal(); err != nil {
			t.Fatalf("the gate refused the websocket's frame: %v", err)
		}
		g.Close()
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rest, _ := io.ReadAll(client); len(rest) > 0 {
			t.Fatalf("the gate wrote %q into the websocket", rest)
		}
	})
	t.Run("closed while held", func(t *testing.T) {
		_, g := pair(t)
		g.holdUpgrade()
		done := pending(g)
		g.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("the pending read after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read waiting in the hold outlived the connection's Close")
		}
	})
	t.Run("not switched", func(t *testing.T) {
		client, g := pair(t)
		g.holdUpgrade()
		done := pending(g)
		g.release() // a switch that failed: the next request is HTTP again
		io.WriteString(client, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
		if err := <-done; err != nil {
			t.Fatalf("the pending read after the release: %v", err)
		}
		io.WriteString(client, "bad\n\n")
		buf := make([]byte, 1024)
		for {
			if _, err := g.Read(buf); err != nil {
				break
			}
		}
		if err := g.refusal(); err == nil {
			t.Fatal("after a release, the gate framed nothing: a malformed request got through")
		}
	})
}
