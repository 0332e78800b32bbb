package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"

	"github.com/cordon-sandbox/cordon/internal/egress"
)

// transparent handles one connection redirected from the sandbox. Its name is the one the original
// destination address was handed out for; there is no other way to name a host on this path, so an
// address the DNS never handed out (an IP the agent typed, the metadata service) is refused outright.
func (g *Gateway) transparent(ctx context.Context, c net.Conn) {
	s := g.newSession(ctx, c, "transparent")
	defer s.end()
	dst, err := g.cfg.OrigDst(c)
	if err != nil {
		s.detail("error", err.Error())
		s.resetDeny(refuse(reasonNoOrigDst), "", 0)
		return
	}
	addr, port := dst.Addr().Unmap(), dst.Port()
	s.ev.Port = port
	s.detail("addr", addr.String())
	name, ok := g.cfg.Names.Lookup(addr)
	if !ok {
		s.resetDeny(refuse(reasonUnmapped), addr.String(), port)
		return
	}
	s.ev.Name = name

	br := bufio.NewReaderSize(c, sniffBuffer)
	d := g.cfg.Policy.Decide(name, port)
	if !d.Allow {
		g.denyAfterSniff(s, br, d, name, port)
		return
	}
	s.decided(d)
	if g.intercepts(name) {
		g.intercept(ctx, s, br, name, port)
		return
	}
	up, err := s.dial(ctx, name, port, d)
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			g.denyAfterSniff(s, br, r.d, name, port)
			return
		}
		s.detail("error", err.Error())
		reset(c)
		return
	}
	if !s.own(up) {
		return
	}
	s.pass(br, up, name, port)
}

// denyAfterSniff refuses a connection the way its protocol can show: a 403 for plain HTTP, a reset
// for anything else. It waits at most SniffTimeout for the client's first bytes to tell which.
func (g *Gateway) denyAfterSniff(s *session, br *bufio.Reader, d egress.Decision, name string, port uint16) {
	sn, err := g.sniff(s.client, br, g.cfg.SniffTimeout)
	if err == nil {
		s.detail("proto", sn.kind.String())
		switch {
		case sn.kind == kindTLS && sn.hello != nil:
			s.detail("sni", sn.hello.ServerName)
		case sn.kind == kindHTTP && sn.req != nil:
			s.judgeRequest(sn.req, name, port) // for the details it records
		}
	}
	if err == nil && sn.kind == kindHTTP {
		s.httpDeny(d, 403, name, port)
		return
	}
	s.resetDeny(d, name, port)
}
