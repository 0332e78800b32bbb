package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzParseRequest from the table tests")

// requestCases are heads that must parse as described, or fail.
var requestCases = []struct {
	name    string
	in      string
	bad     bool
	method  string
	form    string
	uri     string // uri.String()
	host    string // host.String()
	cl      int64
	chunked bool
	upgrade bool
	path    string
}{
	{name: "origin form", in: "GET /a/b?q=1 HTTP/1.1\r\nHost: API.Test:8080\r\n\r\n", method: "GET", form: "origin", host: "api.test:8080", cl: -1, path: "/a/b"},
	{name: "absolute form", in: "POST http://api.test/x HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n\r\n", method: "POST", form: "absolute", uri: "api.test", host: "api.test", cl: 3, path: "/x"},
	{name: "absolute form, no path", in: "GET http://api.test:81?x HTTP/1.1\r\nHost: api.test:81\r\n\r\n", method: "GET", form: "absolute", uri: "api.test:81", host: "api.test:81", cl: -1, path: "/"},
	{name: "CONNECT", in: "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n", method: "CONNECT", form: "authority", uri: "api.test:443", host: "api.test:443", cl: -1},
	{name: "CONNECT HTTP/1.0 without Host (openssl)", in: "CONNECT api.test:443 HTTP/1.0\r\n\r\n", method: "CONNECT", form: "authority", uri: "api.test:443", cl: -1},
	{name: "CONNECT IPv6", in: "CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n", method: "CONNECT", form: "authority", uri: "[2001:db8::1]:443", host: "[2001:db8::1]:443", cl: -1},
	{name: "chunked", in: "PUT / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: Chunked\r\n\r\n", method: "PUT", form: "origin", host: "a.test", cl: -1, chunked: true, path: "/"},
	{name: "upgrade", in: "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive, Upgrade\r\n\r\n", method: "GET", form: "origin", host: "a.test", cl: -1, upgrade: true, path: "/"},
	{name: "trailing dot in Host", in: "GET / HTTP/1.1\r\nHost: a.test.\r\n\r\n", method: "GET", form: "origin", host: "a.test", cl: -1, path: "/"},
	{name: "OPTIONS *", in: "OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", method: "OPTIONS", form: "asterisk", host: "a.test", cl: -1, path: "*"},
	{name: "HTTP/1.0 without Host", in: "GET / HTTP/1.0\r\n\r\n", method: "GET", form: "origin", cl: -1, path: "/"},

	{name: "no Host", in: "GET / HTTP/1.1\r\n\r\n", bad: true},
	{name: "two Hosts", in: "GET / HTTP/1.1\r\nHost: a.test\r\nhost: b.test\r\n\r\n", bad: true},
	{name: "Content-Length and Transfer-Encoding", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", bad: true},
	{name: "two Content-Lengths", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", bad: true},
	{name: "signed Content-Length", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +1\r\n\r\n", bad: true},
	{name: "gzip, chunked", in: "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", bad: true},
	{name: "chunked on HTTP/1.0", in: "POST / HTTP/1.0\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n", bad: true},
	{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : evil.test\r\n\r\n", bad: true},
	{name: "folded header", in: "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\r\n b\r\n\r\n", bad: true},
	{name: "bare LF", in: "GET / HTTP/1.1\nHost: a.test\n\n", bad: true},
	{name: "bare CR in a value", in: "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\rHost: evil.test\r\n\r\n", bad: true},
	{name: "NUL in a value", in: "GET / HTTP/1.1\r\nHost: a.test\x00.evil.test\r\n\r\n", bad: true},
	{name: "two spaces", in: "GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "tab separator", in: "GET\t/ HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "HTTP/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", bad: true},
	{name: "lower-case version", in: "GET / http/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "HTTP/0.9", in: "GET /\r\n\r\n", bad: true},
	{name: "leading blank line", in: "\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "userinfo", in: "GET http://a.test@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", bad: true},
	{name: "percent-encoded host", in: "GET http://evil%2etest/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", bad: true},
	{name: "fragment", in: "GET http://a.test/#x HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "CONNECT without port", in: "CONNECT a.test HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "CONNECT port 0", in: "CONNECT a.test:0 HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "CONNECT port too large", in: "CONNECT a.test:65536 HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "IPv6 zone", in: "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "unbracketed IPv6", in: "CONNECT ::1:443 HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "asterisk with GET", in: "GET * HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "non-ASCII target", in: "GET /\xff HTTP/1.1\r\nHost: a.test\r\n\r\n", bad: true},
	{name: "empty port in Host", in: "GET / HTTP/1.1\r\nHost: a.test:\r\n\r\n", bad: true},
}

func TestParseRequest(t *testing.T) {
	for _, tt := range requestCases {
		t.Run(tt.name, func(t *testing.T) {
			writeSeed(t, "FuzzParseRequest", tt.name, []byte(tt.in))
			raw, err := readHead(bufio.NewReader(strings.NewReader(tt.in)), maxHead)
			var r *http1.Request
			if err == nil {
				r, err = parseRequest(raw)
			}
			if tt.bad {
				if err == nil {
					t.Fatalf("accepted: %+v", r)
				}
				if !errors.Is(err, errMalformed) {
					t.Errorf("error %v does not wrap errMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%s %s uri=%s host=%s cl=%d chunked=%v upgrade=%v path=%s",
				r.Method, r.Form, r.URI, r.Host, r.ContentLength, r.Chunked, r.Upgrade, r.Path)
			uri, host := "", ""
			if tt.uri != "" {
				uri = tt.uri
			}
			if tt.host != "" {
				host = tt.host
			}
			want := fmt.Sprintf("%s %s uri=%s host=%s cl=%d chunked=%v upgrade=%v path=%s",
				tt.method, tt.form, uri, host, tt.cl, tt.chunked, tt.upgrade, tt.path)
			if got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestAuthorityIPShapes(t *testing.T) {
	for _, tt := range []struct {
		in string
		ip bool
	}{
		{"api.test", false}, {"127.0.0.1", true}, {"[::1]", true}, {"2130706433", true}, {"0x7f.1", true},
		{"127.1", true}, {"10.0.0.1.", true}, {"1.2.3.example", false}, {"x-1.test", false},
	} {
		a, err := parseAuthority(tt.in, false)
		if err != nil || a.IP != tt.ip {
			t.Errorf("%q: ip=%v err=%v, want ip=%v", tt.in, a.IP, err, tt.ip)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want kind
	}{
		{"GET / HTTP/1.1\r\n", kindHTTP},
		{"get / HTTP/1.1\r\n", kindHTTP},
		{"GET /\r\n", kindHTTP},
		{"FOO http://evil/\r\n", kindHTTP},
		{"\r\nGET / HTTP/1.1\r\n", kindHTTP},
		{" GET / HTTP/1.1\r\n", kindHTTP},
		{"GET / HTTP/1.1\x00\r\n", kindHTTP},
		{"x HTTP/1.1", kindHTTP}, // then EOF
		{"SSH-2.0-OpenSSH_9.2\r\n", kindTCP},
		{"EHLO mail.test\r\n", kindTCP},
		{"NICK cordon\r\n", kindTCP},
		{"a001 LOGIN x y\r\n", kindTCP},
		{"*1\r\n$4\r\nPING\r\n", kindTCP},
		{"\x00\x00\x00\x08\x04\xd2\x16\x2f", kindTCP}, // PostgreSQL SSLRequest
		{"0032git-upload-pack /p.git\x00host=x\x00", kindTCP},
		{"", kindTCP},
		{strings.Repeat("A", sniffBuffer+10), kindHTTP},
	} {
		got, err := classify(bufio.NewReaderSize(strings.NewReader(tt.in), sniffBuffer))
		if err != nil || got != tt.want {
			t.Errorf("%q: %v %v, want %v", truncate(tt.in, 30), got, err, tt.want)
		}
	}
}

func TestCopyChunked(t *testing.T) {
	good := "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n"
	var out bytes.Buffer
	br := bufio.NewReader(strings.NewReader(good + "NEXT"))
	n, err := copyChunked(&out, br)
	if err != nil || out.String() != good || n != int64(len(good)) {
		t.Fatalf("copied %q (%d), %v", out.String(), n, err)
	}
	if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
		t.Errorf("read past the body: %q left", rest)
	}
	for _, bad := range []string{
		"x\r\nhello\r\n0\r\n\r\n",
		"5\r\nhelloXX0\r\n\r\n",
		"5\nhello\r\n0\r\n\r\n",
		"-1\r\n\r\n",
		"5\r\nhel",
		"fffffffffffffffffff\r\n",
		"0\r\nTrailer: x\n\r\n",
	} {
		if _, err := copyChunked(io.Discard, bufio.NewReader(strings.NewReader(bad))); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// writeSeed stores one input in a fuzz target's seed corpus (only with -update-seeds).
func writeSeed(t *testing.T, target, name string, data []byte) {
	t.Helper()
	if !*updateSeeds {
		return
	}
	slug := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(name))
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, slug), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseRequest checks that the request-line, Host and CONNECT parsing never panics, that the
// first-line classifier never calls a request the parser accepts anything but HTTP, and that whatever
// the gateway accepts, Go's net/http (a real server's parser) also accepts and reads as the same
// method, host, target and body framing: a request the two read differently is how a check on one
// host becomes a request to another.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := readHead(bufio.NewReader(bytes.NewReader(data)), maxHead)
		if err != nil {
			return
		}
		r, err := parseRequest(raw)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			return
		}
		if k, err := classify(bufio.NewReaderSize(bytes.NewReader(raw), sniffBuffer)); err != nil || k != kindHTTP {
			t.Fatalf("classify calls an accepted request %v (%v)", k, err)
		}
		goReq, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("gateway accepts what net/http refuses (%v):\n%q", err, raw)
		}
		if goReq.Method != r.Method {
			t.Fatalf("method %q vs net/http %q", r.Method, goReq.Method)
		}
		norm := func(h string) string {
			if ip, err := netip.ParseAddr(h); err == nil {
				return ip.String()
			}
			return strings.TrimSuffix(strings.ToLower(h), ".")
		}
		switch r.Form {
		case "absolute", "authority":
			if host := goReq.URL.Hostname(); norm(host) != r.URI.Host {
				t.Fatalf("URI host %q vs net/http %q", r.URI.Host, host)
			}
		}
		if r.HasHost && r.Form == "origin" {
			host := goReq.Host
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			if norm(strings.Trim(host, "[]")) != r.Host.Host {
				t.Fatalf("Host %q vs net/http %q", r.Host.Host, goReq.Host)
			}
		}
		chunked := len(goReq.TransferEncoding) == 1 && goReq.TransferEncoding[0] == "chunked"
		if chunked != r.Chunked || !r.Chunked && max(r.ContentLength, 0) != goReq.ContentLength {
			t.Fatalf("framing chunked=%v cl=%d vs net/http %v %d", r.Chunked, r.ContentLength, goReq.TransferEncoding, goReq.ContentLength)
		}
	})
}
