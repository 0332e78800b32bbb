package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// Interceptor takes over connections to hosts whose requests the gateway must see: hosts with HTTP
// rules or a credential to inject. The handlers still judge such a connection first (policy, SNI and
// Host against the name); the interceptor then terminates TLS, checks each request, and dials the
// upstream itself through DialUpstream.
type Interceptor interface {
	// Wants reports whether connections to name are intercepted.
	Wants(name string) bool
	// OnlyTLS reports, for a name it wants, that only TLS is to be intercepted (inspected for
	// SNI/Host agreement): other protocols pass as for a host that is not intercepted.
	OnlyTLS(name string) bool
	// ServeTLS serves a connection whose first bytes are a ClientHello for name.
	ServeTLS(ctx context.Context, client net.Conn, name string, port uint16) error
	// ServePlain serves a plain-HTTP connection to name, starting with its first request head.
	ServePlain(ctx context.Context, client net.Conn, name string, port uint16) error
}

// reasonNotHTTP refuses a connection to an intercepted host that speaks neither TLS nor HTTP: its
// rules and credentials are about HTTP requests, so a protocol the gateway cannot read would go
// around them.
const reasonNotHTTP = "neither TLS nor HTTP to a host whose requests are checked"

// intercepts reports whether every connection to name goes to the interceptor, which then takes
// only TLS and HTTP.
func (g *Gateway) intercepts(name string) bool {
	return g.cfg.Intercept != nil && g.cfg.Intercept.Wants(name) && !g.cfg.Intercept.OnlyTLS(name)
}

// inspectsTLS reports whether name's TLS alone goes to the interceptor: the connection is dialled
// and relayed as for any host, and handed over once its first bytes turn out to be a ClientHello.
func (g *Gateway) inspectsTLS(name string) bool {
	return g.cfg.Intercept != nil && g.cfg.Intercept.Wants(name) && g.cfg.Intercept.OnlyTLS(name)
}

// intercept hands a judged, allowed connection to the interceptor: the client's first bytes must name
// the same host (as for any connection), and must be TLS or HTTP.
func (g *Gateway) intercept(ctx context.Context, s *session, br *bufio.Reader, name string, port uint16) {
	sn, err := g.sniff(s.client, br, 0)
	if err != nil {
		s.detail("error", err.Error())
		return
	}
	if d, ok := s.judge(sn, name, port); !ok {
		if sn.kind == kindHTTP {
			status := 403
			if d.Reason == reasonBadRequest {
				status = 400
			}
			s.httpDeny(d, status, name, port)
		} else {
			s.resetDeny(d, name, port)
		}
		return
	}
	g.serveIntercepted(ctx, s, br, sn, name, port)
}

// serveIntercepted hands a connection whose first bytes were sniffed and judged to the interceptor.
func (g *Gateway) serveIntercepted(ctx context.Context, s *session, br *bufio.Reader, sn sniffed, name string, port uint16) {
	s.detail("intercepted", "true")
	var replay []byte
	serve := g.cfg.Intercept.ServeTLS
	switch sn.kind {
	case kindTLS:
		replay = sn.prefix
	case kindHTTP:
		replay = append(sn.req.Raw, drain(br)...)
		serve = g.cfg.Intercept.ServePlain
	default:
		s.resetDeny(refuse(reasonNotHTTP), name, port)
		return
	}
	c := &replayConn{Conn: s.client, r: io.MultiReader(bytes.NewReader(replay), s.client)}
	if err := serve(ctx, c, name, port); err != nil {
		s.detail("error", err.Error())
	}
	s.ev.BytesOut, s.ev.BytesIn = c.read.Load(), c.written.Load()
}

// DialUpstream connects to name:port for the interceptor exactly as the relay would: the policy must
// allow it, the name is resolved outside the sandbox, and the same addresses are refused (unless
// pinned in network.hosts).
func (g *Gateway) DialUpstream(ctx context.Context, name string, port uint16) (net.Conn, error) {
	d := g.cfg.Policy.Decide(name, port)
	if !d.Allow {
		return nil, fmt.Errorf("proxy: %s:%d: %s", name, port, d.Reason)
	}
	s := &session{g: g, ev: audit.Event{Detail: map[string]string{}}}
	c, err := s.dial(ctx, name, port, d)
	if r, ok := err.(*refusal); ok {
		return nil, fmt.Errorf("proxy: %s:%d: %s", name, port, r.d.Reason)
	}
	return c, err
}

// replayConn is the client connection with the bytes the gateway already read put back in front, and
// a count of what passed each way.
type replayConn struct {
	net.Conn
	r             io.Reader
	read, written atomic.Int64
}

func (c *replayConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *replayConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// CloseWrite half-closes the client connection, as the relay does when the upstream is done.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
