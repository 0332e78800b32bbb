package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// naiveUpstream is a loopback HTTP server as lenient as the ones smuggling attacks aim at: it ignores
// the body of a GET (so a body that is a request is, to it, the next request), reads other bodies by
// Content-Length or chunked, and answers each request with its Host and path. It records every byte it
// receives, which is what the tests assert on.
type naiveUpstream struct {
	port uint16
	mu   sync.Mutex
	got  bytes.Buffer
}

func (u *naiveUpstream) received() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got.String()
}

type recordingReader struct {
	u *naiveUpstream
	r io.Reader
}

func (r recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.u.mu.Lock()
	r.u.got.Write(p[:n])
	r.u.mu.Unlock()
	return n, err
}

func (h *harness) naiveUpstream(names ...string) *naiveUpstream {
	u := &naiveUpstream{}
	ln := listen(h.t)
	u.port = portOf(ln.Addr())
	for _, n := range names {
		h.pol.allow(n, u.port, loopback)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *naiveUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(recordingReader{u, c})
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		n := 0
		if req.Method != "GET" {
			b, _ := io.ReadAll(req.Body)
			n = len(b)
		} else {
			req.Body = http.NoBody // ignored, not read: what follows is "the next request"
			if req.ContentLength > 0 {
				// net/http's reader would skip it; a naive server does not even know it is there.
				req.ContentLength = 0
			}
		}
		msg := fmt.Sprintf("%s %s %s body=%d", req.Method, req.Host, req.URL.Path, n)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		if req.Close {
			return
		}
	}
}

// exchangeAll writes raw on a connection to name:port through the transparent path and reads the
// responses until the connection closes.
func exchangeAll(t *testing.T, h *harness, name string, port uint16, raw string, n int) []string {
	t.Helper()
	c, err := h.dialMapped(name, port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, strings.ReplaceAll(raw, "PORT", strconv.Itoa(int(port)))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []string
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, fmt.Sprintf("%d %s", resp.StatusCode, b))
	}
	return out
}

// TestForwardSmuggling sends what smuggling attacks send and checks what the upstream received: never
// a request the gateway did not judge, nor the client's bytes for the framing.
func TestForwardSmuggling(t *testing.T) {
	inner := "GET /admin HTTP/1.1\r\nHost: evil.test\r\n\r\n"
	for _, tt := range []struct {
		name   string
		raw    string
		status int // of the last answer
		reason string
	}{
		{"CL.0: a GET whose body is a request", fmt.Sprintf("GET / HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: %d\r\n\r\n%s", len(inner), inner), 400, reasonBodyOnSafe},
		{"chunked body on HEAD", "HEAD / HTTP/1.1\r\nHost: api.test:PORT\r\nTransfer-Encoding: chunked\r\n\r\n29\r\n" + inner + "\r\n0\r\n\r\n", 400, reasonBodyOnSafe},
		{"CL.0 on the second request", fmt.Sprintf("GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\nDELETE /x HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: %d\r\n\r\n%s", len(inner), inner), 400, reasonBodyOnSafe},
		{"second request for another host, pipelined", "GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\n" + inner, 403, reasonHostMismatch},
		{"CONNECT on a kept-alive connection", "GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\nCONNECT evil.test:80 HTTP/1.1\r\nHost: evil.test:80\r\n\r\n", 403, reasonNestedProxy},
		{"CL and TE on the second request", "GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\nPOST / HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + inner, 400, reasonBadRequest},
		{"obfuscated chunked", "POST / HTTP/1.1\r\nHost: api.test:PORT\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + inner, 400, reasonBadRequest},
		{"bare LF in the second request", "GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\nGET /admin HTTP/1.1\nHost: evil.test\n\n", 400, reasonBadRequest},
		{"obs-fold in the second request", "GET / HTTP/1.1\r\nHost: api.test:PORT\r\n\r\nGET /admin HTTP/1.1\r\nHost: api.test:PORT\r\nX: y\r\n Host: evil.test\r\n\r\n", 400, reasonBadRequest},
		{"bad chunk size hiding a request", "POST / HTTP/1.1\r\nHost: api.test:PORT\r\nTransfer-Encoding: chunked\r\n\r\n0x29\r\n" + inner + "\r\n0\r\n\r\n", 400, reasonBadRequest},
		{"trailer fields", "POST / HTTP/1.1\r\nHost: api.test:PORT\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nHost: evil.test\r\n\r\n", 400, reasonBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			u := h.naiveUpstream("api.test")
			from := h.rec.count()
			out := exchangeAll(t, h, "api.test", u.port, tt.raw, 3)
			if len(out) == 0 || !strings.HasPrefix(out[len(out)-1], strconv.Itoa(tt.status)+" cordon:") {
				t.Errorf("answers %q, want the last to be the gateway's %d", out, tt.status)
			}
			h.rec.waitFor(t, from, "the refusal", func(e audit.Event) bool {
				return e.Kind == audit.KindConnect && e.Decision == audit.Deny && e.Reason == tt.reason
			})
			if got := u.received(); strings.Contains(got, "evil.test") || strings.Contains(got, "/admin") {
				t.Errorf("the upstream received the smuggled request:\n%q", got)
			}
		})
	}
}

// TestForwardReserialises checks that the upstream gets the gateway's writing of each request, not
// the client's bytes: the Host as judged, fields trimmed, its own chunk lines, and two requests on one
// kept-alive connection, each answered.
func TestForwardReserialises(t *testing.T) {
	h := newHarness(t)
	u := h.naiveUpstream("api.test")
	raw := "POST /a HTTP/1.1\r\nHost: API.test.:PORT\r\nX-Pad:   v  \r\nTransfer-Encoding: Chunked\r\n\r\n" +
		"5;ext=\"1\"\r\nhello\r\n0006\r\n world\r\n0\r\n\r\n" +
		"PUT /b HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: 3\r\n\r\nabc" +
		"GET /c HTTP/1.1\r\nHost: api.test:PORT\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	out := exchangeAll(t, h, "api.test", u.port, raw, 4)
	want := []string{
		fmt.Sprintf("200 POST api.test:%d /a body=11", u.port),
		fmt.Sprintf("200 PUT api.test:%d /b body=3", u.port),
		fmt.Sprintf("200 GET api.test:%d /c body=0", u.port),
	}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("answers %q, want %q", out, want)
	}
	got := u.received()
	for _, bad := range []string{"API.test.", "   v", "ext", "0006", "Chunked"} {
		if strings.Contains(got, bad) {
			t.Errorf("the client's %q reached the upstream:\n%q", bad, got)
		}
	}
	for _, good := range []string{fmt.Sprintf("Host: api.test:%d\r\n", u.port), "X-Pad: v\r\n", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"} {
		if !strings.Contains(got, good) {
			t.Errorf("the upstream did not get %q:\n%q", good, got)
		}
	}
	e := h.rec.waitFor(t, 0, "the connection", func(e audit.Event) bool { return e.Kind == audit.KindConnect && e.Decision == audit.Allow })
	if e.Detail["requests"] != "3" {
		t.Errorf("event counts %q requests, want 3", e.Detail["requests"])
	}
}

func TestUpstreamHead(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"GET http://a.test/x?y HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, x-hop\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\n\r\n",
			"GET /x?y HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
		{"POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
			"POST / HTTP/1.0\r\nHost: a.test\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n"},
		{"PUT / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n",
			"PUT / HTTP/1.1\r\nHost: a.test\r\nX-A: b\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		raw, err := readHead(bufio.NewReader(strings.NewReader(tt.in)), maxHead)
		if err != nil {
			t.Fatal(err)
		}
		req, err := parseRequest(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := upstreamHead(req, "a.test", req.Close); got != tt.want {
			t.Errorf("%q:\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}
