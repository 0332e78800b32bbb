package intercept

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// recorder keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (r *recorder) Record(e audit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
}

func (r *recorder) events() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Event(nil), r.evs...)
}

// last returns the last event for a method and path (without query), waiting a moment for it: the
// interceptor records after the response has gone out.
func (r *recorder) last(t testing.TB, method, path string) audit.Event {
	t.Helper()
	return r.wait(t, func(e audit.Event) bool { return e.Detail["method"] == method && e.Detail["path"] == path })
}

// wait returns the last event that satisfies ok, waiting up to 5 s for one.
func (r *recorder) wait(t testing.TB, ok func(audit.Event) bool) audit.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs := r.events()
		for i := len(evs) - 1; i >= 0; i-- {
			if ok(evs[i]) {
				return evs[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such audit event in %+v", evs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// seenRequest is what the upstream received.
type seenRequest struct {
	Method, URI, Host, Proto, SNI string
	Header                        http.Header
}

// upstream is the "real" server behind the gateway: TLS with certificates from its own CA (which
// the sandbox never sees), for whatever name the client asks for, HTTP/2 and HTTP/1.1.
type upstream struct {
	ca   *CA
	addr string
	mu   sync.Mutex
	seen []seenRequest
}

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *upstream) sawURI(uri string) bool {
	for _, r := range u.requests() {
		if r.URI == uri {
			return true
		}
	}
	return false
}

func (u *upstream) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(u.ca.Certificate())
	return p
}

// newUpstream serves h (defaultUpstream if nil), over TLS unless plain.
func newUpstream(t testing.TB, h http.Handler, plain bool) *upstream {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{ca: ca}
	if h == nil {
		h = defaultUpstream()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := seenRequest{Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto, Header: r.Header.Clone()}
			if r.TLS != nil {
				s.SNI = r.TLS.ServerName
			}
			u.mu.Lock()
			u.seen = append(u.seen, s)
			u.mu.Unlock()
			h.ServeHTTP(w, r)
		}),
		ErrorLog: log.New(io.Discard, "", 0), // refused handshakes are what some tests are about
		TLSConfig: &tls.Config{
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(hello.ServerName) },
			NextProtos:     []string{"h2", "http/1.1"},
		},
	}
	go func() {
		if plain {
			_ = srv.Serve(ln)
		} else {
			_ = srv.ServeTLS(ln, "", "")
		}
	}()
	t.Cleanup(func() { srv.Close() })
	return u
}

// defaultUpstream: /ws is a websocket echo, /big?n=N sends N bytes, anything else describes the
// request it got.
func defaultUpstream() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", wsEcho)
	big := make([]byte, 1<<20)
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k, err := w.Write(big[:min(n, len(big))])
			if err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "upstream saw %s %s host=%s proto=%s body=%q\n", r.Method, r.RequestURI, r.Host, r.Proto, body)
	})
	return mux
}

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsEcho is a minimal RFC 6455 server: it completes the handshake and echoes each (small, masked)
// client frame back unmasked.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	c, brw, ok := wsHandshake(w, r)
	if !ok {
		return
	}
	defer c.Close()
	for {
		op, payload, err := wsRead(brw.Reader)
		if err != nil || op == 8 {
			return
		}
		if _, err := c.Write(wsFrame(op, payload, false)); err != nil {
			return
		}
	}
}

// wsHandshake answers a websocket upgrade with 101 and hands over the connection; ok is false (and
// the answer sent) when the request is not one.
func wsHandshake(w http.ResponseWriter, r *http.Request) (net.Conn, *bufio.ReadWriter, bool) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "want a websocket upgrade", http.StatusBadRequest)
		return nil, nil, false
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if brw.Flush() != nil {
		c.Close()
		return nil, nil, false
	}
	return c, brw, true
}

// wsFrame encodes one final frame with a payload under 126 bytes, masked as a client must.
func wsFrame(op byte, payload []byte, mask bool) []byte {
	b := []byte{0x80 | op, byte(len(payload))}
	if !mask {
		return append(b, payload...)
	}
	b[1] |= 0x80
	var key [4]byte
	_, _ = rand.Read(key[:])
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

func wsRead(r *bufio.Reader) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	if n >= 126 {
		return 0, nil, errors.New("frame too long for this test")
	}
	var key [4]byte
	if h[1]&0x80 != 0 {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	for i := range payload {
		payload[i] ^= key[i%4]
	}
	return h[0] & 0x0f, payload, nil
}

// setup is an Interceptor serving one listener whose every connection is for name.
type setup struct {
	i      *Interceptor
	ca     *CA
	caFile string
	rec    *recorder
	up     *upstream
	name   string
	addr   string
	port   uint16

	mu     sync.Mutex
	dialed []string
	errs   []error
}

type option func(*Config)

// newSetup intercepts connections to name (TLS unless plain) with cfg built by the options; the
// Dial sends every upstream connection to up.
func newSetup(t testing.TB, up *upstream, name string, plain bool, opts ...option) *setup {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	s := &setup{ca: ca, rec: &recorder{}, up: up, name: name}
	cfg := Config{
		CA:       ca,
		Roots:    up.pool(),
		Recorder: s.rec,
		Dial: func(ctx context.Context, name string, port uint16) (net.Conn, error) {
			s.mu.Lock()
			s.dialed = append(s.dialed, fmt.Sprintf("%s:%d", name, port))
			s.mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.addr)
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if s.i, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	s.caFile = filepath.Join(t.TempDir(), "run-ca.pem")
	if err := os.WriteFile(s.caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.port = uint16(ln.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve := s.i.ServeTLS
				if plain {
					serve = s.i.ServePlain
				}
				if err := serve(ctx, c, name, s.port); err != nil && !errors.Is(err, context.Canceled) {
					s.mu.Lock()
					s.errs = append(s.errs, err)
					s.mu.Unlock()
				}
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait() // every ServeTLS returned once its context ended
		s.i.Close()
	})
	return s
}

func withRules(rs ...Rule) option { return func(c *Config) { c.Rules = rs } }

// pool trusts the run's CA, as the sandbox does.
func (s *setup) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.ca.Certificate())
	return p
}

func (s *setup) url(p string) string {
	return fmt.Sprintf("https://%s:%d%s", s.name, s.port, p)
}

// client is Go's HTTP client as the sandbox would use it: the run CA trusted, every connection to
// the interceptor, HTTP/2 only if h2.
func (s *setup) client(h2 bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: s.pool()},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", s.addr)
		},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr}
}

// raw opens a TLS connection to the interceptor speaking HTTP/1.1, for requests Go's client would
// not send.
func (s *setup) raw(t testing.TB) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: s.pool(), ServerName: s.name, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// rawRequest sends one request line and headers as given, and reads the answer.
func (s *setup) rawRequest(t testing.TB, method, target, host string) (int, string) {
	t.Helper()
	c, br := s.raw(t)
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, target, host)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *setup) hostPort() string { return fmt.Sprintf("%s:%d", s.name, s.port) }

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// cgiHandler runs git http-backend for each request.
type cgiHandler struct{ path, root string }

func (h *cgiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(&cgi.Handler{Path: h.path, Env: []string{"GIT_PROJECT_ROOT=" + h.root, "GIT_HTTP_EXPORT_ALL=1"}}).ServeHTTP(w, r)
}
