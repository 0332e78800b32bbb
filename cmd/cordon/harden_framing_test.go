//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Request smuggling from inside a real sandbox (issue 11, item 5): requests whose framing a lenient
// server reads differently from the gateway, a GET whose body is itself a request, a second request
// on a kept-alive connection for another host. Each asserts on the bytes the upstream received, which
// must never hold the smuggled request, beside controls that show keep-alive, Content-Length and
// chunked requests still go through.

// framingUpstream is an HTTP server on the host's loopback as naive as the servers smuggling aims at:
// it never reads the body of a GET (so a body that is a request is, to it, the next request), reads
// other bodies by their framing, and answers each request with its method, Host and path. It keeps
// every byte it receives, and which connection each request came on.
type framingUpstream struct {
	port int
	mu   sync.Mutex
	raw  bytes.Buffer
	reqs []string // "conn METHOD host path body=n"
}

func newFramingUpstream(t *testing.T) *framingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &framingUpstream{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for id := 1; ; id++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c, id)
		}
	}()
	return u
}

type framingTap struct {
	u *framingUpstream
	c net.Conn
}

func (r framingTap) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	r.u.mu.Lock()
	r.u.raw.Write(p[:n])
	r.u.mu.Unlock()
	return n, err
}

func (u *framingUpstream) serve(c net.Conn, id int) {
	defer c.Close()
	br := bufio.NewReader(framingTap{u, c})
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		n := 0
		if req.Method != "GET" {
			b, _ := io.ReadAll(req.Body)
			n = len(b)
		} else if req.ContentLength > 0 {
			// Not read: to this server the body is the next request.
			req.Body = http.NoBody
			req.ContentLength = 0
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, fmt.Sprintf("%d %s %s %s body=%d", id, req.Method, req.Host, req.URL.Path, n))
		u.mu.Unlock()
		msg := fmt.Sprintf("UPSTREAM %s %s %s body=%d\n", req.Method, req.Host, req.URL.Path, n)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		if req.Close {
			return
		}
	}
}

func (u *framingUpstream) received() (string, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.raw.String(), append([]string(nil), u.reqs...)
}

// rawClient runs cases given as JSON: for each, a connection (straight to host:port, to the explicit
// proxy, or through the proxy's CONNECT), the bytes sent, and every byte read back until the other
// side closes, printed after a "=== name" line.
const rawClient = `import json, os, socket, sys, urllib.parse
cases = json.load(open(sys.argv[1]))
proxy = urllib.parse.urlsplit(os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY") or "http://0.0.0.0:1")
for c in cases:
    out = b""
    try:
        if c["via"] == "direct":
            s = socket.create_connection((c["host"], c["port"]), 10)
        else:
            s = socket.create_connection((proxy.hostname, proxy.port), 10)
        s.settimeout(10)
        if c["via"] == "connect":
            s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (c["host"], c["port"], c["host"], c["port"])).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                b = s.recv(1)
                if not b:
                    break
                head += b
            out += head
        s.sendall(c["send"].encode("latin-1"))
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except Exception as e:
        out += ("\nclient error: %r" % e).encode()
    sys.stdout.write("=== %s\n%s\n" % (c["name"], out.decode("latin-1")))
    sys.stdout.flush()
`

// framingCase is one raw exchange: its bytes (HOST stands for the upstream's host:port), the way it
// goes, and the status lines its answer must hold, in order.
type framingCase struct {
	Name string `json:"name"`
	Via  string `json:"via"`
	Host string `json:"host"`
	Port int    `json:"port"`
	Send string `json:"send"`
	want []string
}

// results splits rawClient's output by case.
func framingResults(out string) map[string]string {
	res := map[string]string{}
	for _, part := range strings.Split(out, "=== ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		res[name] = body
	}
	return res
}

// statusLines lists the status codes of the HTTP/1.1 answers in out, in order.
func statusLines(out string) []string {
	var codes []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "HTTP/1.1 ") && len(line) >= 12 {
			codes = append(codes, line[9:12])
		}
	}
	return codes
}

func TestFramingSmuggling(t *testing.T) {
	requireTool(t, "python3")
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		up := newFramingUpstream(t)
		pol := fmt.Sprintf(`network:
  allow:
    - {host: plain.test, ports: [%[1]d]}
    - {host: rules.test, ports: [%[1]d]}
  hosts: {plain.test: 127.0.0.1, rules.test: 127.0.0.1, evil.test: 127.0.0.1}
  http:
    - host: rules.test
      allow: [{methods: [GET, POST], paths: ["/ok/*"]}]
`, up.port)
		// Every smuggled request names evil.test (which the policy does not allow) and a path with
		// "smuggled" in it: neither may ever reach the upstream.
		inner := "GET /smuggled HTTP/1.1\r\nHost: evil.test\r\n\r\n"
		okGet := "GET /ok/first HTTP/1.1\r\nHost: HOST\r\n\r\n"
		cases := []framingCase{
			// Plain HTTP to a host that is not intercepted: the gateway's own per-request forwarder.
			{Name: "CL.0", Via: "direct", Host: "plain.test", Send: fmt.Sprintf("GET / HTTP/1.1\r\nHost: HOST\r\nContent-Length: %d\r\n\r\n%s", len(inner), inner), want: []string{"400"}},
			{Name: "second request for another host", Via: "direct", Host: "plain.test", Send: okGet + inner, want: []string{"200", "403"}},
			{Name: "CL and TE", Via: "direct", Host: "plain.test", Send: fmt.Sprintf("POST / HTTP/1.1\r\nHost: HOST\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", inner), want: []string{"400"}},
			{Name: "duplicate CL", Via: "direct", Host: "plain.test", Send: "POST / HTTP/1.1\r\nHost: HOST\r\nContent-Length: 0\r\nContent-Length: 41\r\n\r\n" + inner, want: []string{"400"}},
			{Name: "xchunked", Via: "direct", Host: "plain.test", Send: "POST / HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + inner, want: []string{"400"}},
			{Name: "chunked, identity", Via: "direct", Host: "plain.test", Send: "POST / HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + inner, want: []string{"400"}},
			{Name: "bare LF", Via: "direct", Host: "plain.test", Send: okGet + "GET /smuggled HTTP/1.1\nHost: evil.test\n\n", want: []string{"200", "400"}},
			{Name: "obs-fold", Via: "direct", Host: "plain.test", Send: okGet + "GET /smuggled HTTP/1.1\r\nHost: HOST\r\nX-A: 1\r\n Host: evil.test\r\n\r\n", want: []string{"200", "400"}},
			{Name: "bad chunk size", Via: "direct", Host: "plain.test", Send: "POST / HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked\r\n\r\n0x29\r\n" + inner + "\r\n0\r\n\r\n", want: []string{"400"}},
			// The explicit proxy: an absolute-form request, and plain HTTP inside a CONNECT.
			{Name: "proxy CL.0", Via: "proxy", Host: "plain.test", Send: fmt.Sprintf("GET http://HOST/ HTTP/1.1\r\nHost: HOST\r\nContent-Length: %d\r\n\r\n%s", len(inner), inner), want: []string{"400"}},
			{Name: "CONNECT CL.0", Via: "connect", Host: "plain.test", Send: fmt.Sprintf("GET / HTTP/1.1\r\nHost: HOST\r\nContent-Length: %d\r\n\r\n%s", len(inner), inner), want: []string{"200", "400"}},
			{Name: "CONNECT second request for another host", Via: "connect", Host: "plain.test", Send: okGet + inner, want: []string{"200", "200", "403"}},
			// A rule-limited host, intercepted: the framing gate in front of the HTTP server.
			{Name: "rules CL and TE", Via: "direct", Host: "rules.test", Send: "POST /ok/smuggled HTTP/1.1\r\nHost: HOST\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: []string{"400"}},
			{Name: "rules duplicate CL", Via: "direct", Host: "rules.test", Send: "POST /ok/smuggled HTTP/1.1\r\nHost: HOST\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", want: []string{"400"}},
			{Name: "rules chunked, identity", Via: "direct", Host: "rules.test", Send: "POST /ok/smuggled HTTP/1.1\r\nHost: HOST\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", want: []string{"400"}},
			{Name: "rules bare LF", Via: "direct", Host: "rules.test", Send: okGet + "GET /ok/smuggled HTTP/1.1\nHost: HOST\n\n", want: []string{"200", "400"}},
			{Name: "rules obs-fold", Via: "direct", Host: "rules.test", Send: okGet + "GET /ok/smuggled HTTP/1.1\r\nHost: HOST\r\nX-A: 1\r\n 2\r\n\r\n", want: []string{"200", "400"}},
		}
		for i := range cases {
			c := &cases[i]
			c.Port = up.port
			c.Send = strings.ReplaceAll(c.Send, "HOST", fmt.Sprintf("%s:%d", c.Host, up.port))
		}
		js, err := json.Marshal(cases)
		if err != nil {
			t.Fatal(err)
		}
		h.writeFile(filepath.Join(h.ws, "cases.json"), string(js), 0o644)
		h.writeFile(filepath.Join(h.ws, "raw.py"), rawClient, 0o644)
		u := func(host, path string) string { return fmt.Sprintf("http://%s:%d%s", host, up.port, path) }
		// Controls in the same run: two requests on one kept-alive connection (curl reuses it), POST
		// with Content-Length and chunked, through the transparent path, the explicit proxy and the
		// intercepting server.
		controls := strings.Join([]string{
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' %s %s", u("plain.test", "/keep1"), u("plain.test", "/keep2")),
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' -d hello %s", u("plain.test", "/post-cl")),
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' -H 'Transfer-Encoding: chunked' -d chunky %s", u("plain.test", "/post-chunked")),
			fmt.Sprintf("curl -sS -m 10 -H 'Transfer-Encoding: chunked' -d viaproxy %s", u("plain.test", "/proxy-chunked")),
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' %s %s", u("rules.test", "/ok/keep1"), u("rules.test", "/ok/keep2")),
			fmt.Sprintf("curl -sS -m 10 --noproxy '*' -H 'Transfer-Encoding: chunked' -d chunky %s", u("rules.test", "/ok/post-chunked")),
		}, "; ")
		r := h.sandboxed(pol, "python3 raw.py cases.json; "+controls)
		res := framingResults(r.stdout)
		for _, c := range cases {
			got, ok := res[c.Name]
			if !ok {
				t.Errorf("%s: no output:\n%s", c.Name, r)
				continue
			}
			if codes := statusLines(got); strings.Join(codes, " ") != strings.Join(c.want, " ") {
				t.Errorf("%s: answers %v, want %v:\n%s", c.Name, codes, c.want, got)
			}
		}
		raw, reqs := up.received()
		if strings.Contains(raw, "evil.test") || strings.Contains(raw, "smuggled") {
			t.Errorf("the upstream received a smuggled request:\n%q", raw)
		}
		for _, want := range []string{
			"UPSTREAM GET plain.test:%d /keep1 body=0", "UPSTREAM GET plain.test:%d /keep2 body=0",
			"UPSTREAM POST plain.test:%d /post-cl body=5", "UPSTREAM POST plain.test:%d /post-chunked body=6",
			"UPSTREAM POST plain.test:%d /proxy-chunked body=8",
			"UPSTREAM GET rules.test:%d /ok/keep1 body=0", "UPSTREAM GET rules.test:%d /ok/keep2 body=0",
			"UPSTREAM POST rules.test:%d /ok/post-chunked body=6",
		} {
			if w := fmt.Sprintf(want, up.port); !strings.Contains(r.stdout, w) {
				t.Errorf("control %q failed:\n%s", w, r)
			}
		}
		// curl's two requests went over one connection, upstream as well.
		conn := map[string]string{}
		for _, q := range reqs {
			id, rest, _ := strings.Cut(q, " ")
			conn[rest] = id
		}
		k1, k2 := fmt.Sprintf("GET plain.test:%d /keep1 body=0", up.port), fmt.Sprintf("GET plain.test:%d /keep2 body=0", up.port)
		if conn[k1] == "" || conn[k1] != conn[k2] {
			t.Errorf("the kept-alive requests did not share an upstream connection: %v", reqs)
		}
	})
}
