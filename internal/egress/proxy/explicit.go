package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
)

// Reasons specific to the explicit proxy.
const (
	reasonHostVsURI     = "Host does not match the request URI"
	reasonHostVsConnect = "Host does not match the CONNECT target"
	reasonConnectBody   = "CONNECT with a request body"
)

// explicit handles one connection to the forward proxy: one CONNECT, or one absolute-form http://
// request (answered with "Connection: close", so that a client's next request, perhaps for another
// host, comes on a new connection and is judged on its own).
func (g *Gateway) explicit(ctx context.Context, c net.Conn) {
	s := g.newSession(ctx, c, "proxy")
	defer s.end()
	br := bufio.NewReaderSize(c, sniffBuffer)
	_ = c.SetReadDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	raw, err := readHead(br, maxHead)
	var req *http1.Request
	if err == nil {
		req, err = parseRequest(raw)
	}
	if err != nil {
		s.detail("error", err.Error())
		if errors.Is(err, io.EOF) {
			s.ev.Reason = "no request"
			return
		}
		s.httpDeny(refuse(reasonBadRequest), 400, "", 0)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	s.detail("method", req.Method)
	switch {
	case req.Method == "CONNECT":
		g.connect(ctx, s, br, req)
	case req.Form == "absolute" && req.Scheme == "http":
		g.forward(ctx, s, br, req)
	default:
		s.detail("path", truncate(req.Path, 200))
		s.httpDeny(refuse(reasonNotProxyReq), 405, "", 0)
	}
}

// connect serves CONNECT host:port: the target must be a name the policy allows; the tunnel's first
// bytes must then name the same host (TLS SNI, or the Host of plain HTTP), like any connection.
func (g *Gateway) connect(ctx context.Context, s *session, br *bufio.Reader, req *http1.Request) {
	a := req.URI
	s.ev.Name, s.ev.Port = a.Host, a.Port
	s.detail("connect", a.String())
	switch {
	case a.IP:
		s.httpDeny(refuse(reasonIPLiteral), 403, a.Host, a.Port)
		return
	case req.HasHost && (req.Host.Host != a.Host || req.Host.Port != 0 && req.Host.Port != a.Port):
		s.httpDeny(refuse(reasonHostVsConnect), 403, a.Host, a.Port)
		return
	case req.ContentLength > 0 || req.Chunked:
		s.httpDeny(refuse(reasonConnectBody), 400, a.Host, a.Port)
		return
	}
	d := g.cfg.Policy.Decide(a.Host, a.Port)
	if !d.Allow {
		s.httpDeny(d, 403, a.Host, a.Port)
		return
	}
	s.decided(d)
	if g.intercepts(a.Host) {
		if _, err := io.WriteString(s.client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			s.detail("error", err.Error())
			return
		}
		g.intercept(ctx, s, br, a.Host, a.Port)
		return
	}
	up, ok := s.dialOrAnswer(ctx, a.Host, a.Port, d)
	if !ok {
		return
	}
	if _, err := io.WriteString(s.client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		s.detail("error", err.Error())
		return
	}
	s.pass(br, up, a.Host, a.Port)
}

// dialOrAnswer dials the upstream, answering the client itself when that fails: 403 for an address
// the gateway refuses, 502 for an upstream that cannot be reached.
func (s *session) dialOrAnswer(ctx context.Context, host string, port uint16, d egress.Decision) (net.Conn, bool) {
	up, err := s.dial(ctx, host, port, d)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			s.httpDeny(r.d, 403, host, port)
			return nil, false
		}
		s.detail("error", err.Error())
		writeStatus(s.client, 502, fmt.Sprintf("cordon: cannot reach %s:%d: %v\n", host, port, err))
		lingeringClose(s.client)
		return nil, false
	}
	if !s.own(up) {
		return nil, false
	}
	return up, true
}

// forward serves one absolute-form http:// request: the Host header must agree with the URI, the
// policy must allow the URI's host, and the request goes upstream in origin form with
// "Connection: close".
func (g *Gateway) forward(ctx context.Context, s *session, br *bufio.Reader, req *http1.Request) {
	a := req.URI
	port := a.Port
	if port == 0 {
		port = 80
	}
	s.ev.Name, s.ev.Port = a.Host, port
	s.detail("path", truncate(req.Path, 200))
	if req.HasHost {
		s.detail("http_host", req.Host.String())
	}
	hostPort := req.Host.Port
	if hostPort == 0 {
		hostPort = 80
	}
	switch {
	case a.IP:
		s.httpDeny(refuse(reasonIPLiteral), 403, a.Host, port)
		return
	case req.HasHost && (req.Host.Host != a.Host || hostPort != port):
		s.httpDeny(refuse(reasonHostVsURI), 403, a.Host, port)
		return
	case req.Upgrade:
		s.httpDeny(refuse(reasonUpgrade), 403, a.Host, port)
		return
	}
	d := g.cfg.Policy.Decide(a.Host, port)
	if !d.Allow {
		s.httpDeny(d, 403, a.Host, port)
		return
	}
	s.decided(d)
	if g.intercepts(a.Host) {
		// The interceptor reads the request itself; it takes the absolute form as well.
		s.detail("intercepted", "true")
		c := &replayConn{Conn: s.client, r: io.MultiReader(bytes.NewReader(req.Raw), br)}
		if err := g.cfg.Intercept.ServePlain(ctx, c, a.Host, port); err != nil {
			s.detail("error", err.Error())
		}
		s.ev.BytesOut, s.ev.BytesIn = c.read.Load(), c.written.Load()
		return
	}
	if bodyRefused(req) {
		s.httpDeny(refuse(reasonBodyOnSafe), 400, a.Host, port)
		return
	}
	up, ok := s.dialOrAnswer(ctx, a.Host, port, d)
	if !ok {
		return
	}

	type result struct {
		n   int64
		err error
	}
	sent := make(chan result, 1)
	go func() {
		n, err := io.WriteString(up, originForm(req))
		total := int64(n)
		if err == nil {
			var m int64
			m, err = s.copyBody(up, br, req)
			total += m
		}
		if err != nil {
			up.Close() // the server never gets the rest; stop waiting for its answer
		}
		sent <- result{total, err}
	}()
	in, err := relayResponse(&s.g.bufs, s.client, up, req.Method)
	s.ev.BytesIn = in
	if err != nil {
		s.detail("error", "response: "+err.Error())
	}
	// The server has answered; a request body still flowing (it answered early) is cut off.
	up.Close()
	_ = s.client.SetReadDeadline(time.Now())
	r := <-sent
	s.ev.BytesOut = r.n
	if errors.Is(r.err, errMalformed) && in == 0 {
		s.detail("error", "request body: "+r.err.Error())
		s.httpDeny(refuse(reasonBadRequest), 400, a.Host, port)
		return
	}
	if err != nil {
		if in == 0 {
			writeStatus(s.client, 502, fmt.Sprintf("cordon: bad response from %s:%d\n", a.Host, port))
			lingeringClose(s.client)
			return
		}
		reset(s.client)
		return
	}
	lingeringClose(s.client)
}

// originForm rewrites an absolute-form request head for the origin server (see upstreamHead): the
// target in origin form, the proxy's hop-by-hop headers dropped, Host from the URI if the client
// left it out, "Connection: close".
func originForm(req *http1.Request) string {
	host := req.URI.String()
	if req.HasHost {
		host = req.Host.String()
	}
	return upstreamHead(req, host, true, "proxy-authorization")
}

// relayResponse copies the upstream's response to a forwarded request to the client: interim 1xx
// responses as they are, then the final head with "Connection: close", then the body by its framing
// (straight from socket to socket through the relay, see bufferPool, once the head is read).
func relayResponse(bufs *bufferPool, c net.Conn, up net.Conn, method string) (int64, error) {
	ubr := bufio.NewReaderSize(up, sniffBuffer)
	var total int64
	for {
		raw, err := readHead(ubr, maxHead)
		if err != nil {
			return total, err
		}
		resp, err := parseResponse(raw)
		if err != nil {
			return total, err
		}
		if resp.status == 101 {
			return total, fmt.Errorf("upgrade the gateway did not ask for: %w", errMalformed)
		}
		if resp.status/100 == 1 {
			n, err := c.Write(raw)
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
		}
		n, err := io.WriteString(c, closingHead(raw, resp))
		total += int64(n)
		if err != nil {
			return total, err
		}
		var m int64
		switch {
		case resp.bodyless(method):
		case resp.chunked:
			m, err = copyChunked(c, ubr)
		case resp.contentLength >= 0:
			m, err = copyRest(bufs, c, ubr, up, resp.contentLength)
		default:
			m, err = copyRest(bufs, c, ubr, up, -1)
		}
		return total + m, err
	}
}

// copyRest copies n bytes (n < 0: until EOF) of a body: first what br has buffered, then straight
// from the connection.
func copyRest(bufs *bufferPool, dst io.Writer, br *bufio.Reader, src net.Conn, n int64) (int64, error) {
	buffered := int64(br.Buffered())
	if n >= 0 {
		buffered = min(buffered, n)
	}
	m, err := io.CopyN(dst, br, buffered)
	if err != nil {
		return m, err
	}
	if n < 0 {
		k, err := bufs.relay(dst, src)
		return m + k, err
	}
	k, err := bufs.relayN(dst, src, n-m)
	return m + k, unexpected(err)
}

// closingHead rewrites a final response head to close the connection after it.
func closingHead(raw []byte, resp *response) string {
	start, _, _ := strings.Cut(string(raw), "\r\n")
	var b strings.Builder
	b.WriteString(start)
	b.WriteString("\r\n")
	for _, f := range resp.fields {
		switch strings.ToLower(f.Name) {
		case "connection", "keep-alive", "proxy-connection":
			continue
		}
		fmt.Fprintf(&b, "%s: %s\r\n", f.Name, f.Value)
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}
