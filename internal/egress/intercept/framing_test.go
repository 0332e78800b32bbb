package intercept

import (
	"bufio"
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
