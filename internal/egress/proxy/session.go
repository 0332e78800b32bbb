package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy/http1"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy/kernelrelay"
)

// gatewayRule is the Rule of decisions the gateway takes itself (the names disagree, an address it
// will not dial) rather than the policy.
const gatewayRule = "gateway"

// Reasons for the gateway's own refusals, as they appear in the audit log.
const (
	reasonNoOrigDst    = "original destination unknown"
	reasonUnmapped     = "address not handed out by the sandbox's DNS"
	reasonSNIMismatch  = "SNI does not match the name"
	reasonNoSNI        = "TLS without a server name"
	reasonSNIIsIP      = "SNI is an IP address"
	reasonECH          = "encrypted ClientHello hides the name"
	reasonBadHello     = "malformed TLS ClientHello"
	reasonBadRequest   = "malformed HTTP request"
	reasonHostMismatch = "Host does not match the name"
	reasonURIMismatch  = "request URI does not match the name"
	reasonNoHost       = "HTTP request without a Host header"
	reasonIPLiteral    = "the target is an IP address, not a name"
	reasonNestedProxy  = "CONNECT through a connection the gateway already judged"
	reasonUpgrade      = "HTTP upgrade on plain HTTP is not supported"
	reasonNotProxyReq  = "not a proxy request (CONNECT host:port, or an absolute http:// URI)"
)

func refuse(reason string) egress.Decision {
	return egress.Decision{Rule: gatewayRule, Reason: reason}
}

// session is one client connection: its audit event, and the connections to close if the gateway
// stops while it runs.
type session struct {
	g      *Gateway
	ctx    context.Context // the gateway's: ends when it stops
	client net.Conn
	start  time.Time
	ev     audit.Event
	stop   func() bool

	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

func (g *Gateway) newSession(ctx context.Context, c net.Conn, via string) *session {
	s := &session{g: g, ctx: ctx, client: c, start: time.Now(), conns: []net.Conn{c}}
	s.ev = audit.Event{Kind: audit.KindConnect, Decision: audit.Deny, Detail: map[string]string{"via": via}}
	s.stop = context.AfterFunc(ctx, s.abort)
	return s
}

// own registers an upstream connection, closing it at once if the gateway is already stopping.
func (s *session) own(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

// abort closes every connection of the session (the gateway is stopping, or a relay failed).
func (s *session) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.conns {
		c.Close()
	}
}

// end closes everything and records the session's one event.
func (s *session) end() {
	s.stop()
	s.abort()
	s.ev.Time = s.start
	s.ev.Duration = time.Since(s.start)
	s.g.cfg.Recorder.Record(s.ev)
}

func (s *session) detail(k, v string) { s.ev.Detail[k] = v }

// decided copies a decision into the event.
func (s *session) decided(d egress.Decision) {
	s.ev.Rule, s.ev.Reason = d.Rule, d.Reason
	if d.Allow {
		s.ev.Decision = audit.Allow
	} else {
		s.ev.Decision = audit.Deny
	}
}

// resetDeny refuses a TLS or other TCP connection: a reset, and a line for a human (Config.Notify).
func (s *session) resetDeny(d egress.Decision, name string, port uint16) {
	s.decided(d)
	s.g.notify(d, name, port) // first, so the line is out before the client reports its error
	reset(s.client)
}

// reset closes c with RST instead of FIN, so the client sees a refusal rather than an empty answer.
func reset(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
	c.Close()
}

// httpDeny answers a plain-HTTP request with a 403 (or the given status) that names what was blocked
// and how to allow it, then closes the connection gracefully so the client reads the answer. The
// same line goes to Config.Notify.
func (s *session) httpDeny(d egress.Decision, status int, host string, port uint16) {
	s.decided(d)
	if host != "" {
		// Also on the user's terminal: clients rarely show a refusal's body (none shows it for a
		// refused CONNECT), so the 403 alone would leave a human guessing.
		s.g.notify(d, host, port)
	}
	var b strings.Builder
	switch {
	case host == "":
		fmt.Fprintf(&b, "cordon: refused the request (%s)\n", d.Reason)
	case port == 0:
		fmt.Fprintf(&b, "cordon: blocked %s (%s)\n", host, d.Reason)
	default:
		fmt.Fprintf(&b, "cordon: blocked %s (%s)\n", net.JoinHostPort(host, strconv.Itoa(int(port))), d.Reason)
	}
	if d.Fix != "" {
		fmt.Fprintf(&b, "to allow: %s\n", d.Fix)
	}
	writeStatus(s.client, status, b.String())
	lingeringClose(s.client)
}

// writeStatus writes a complete, closing response with a plain-text body.
func writeStatus(w io.Writer, status int, body string) {
	_, _ = fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, statusText(status), len(body), body)
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 405:
		return "Method Not Allowed"
	case 502:
		return "Bad Gateway"
	}
	return "Error"
}

// lingeringClose half-closes c and drains what the client still sends for a moment before closing:
// closing with unread data would send a reset that can destroy the answer before the client reads it.
func lingeringClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _ = io.CopyN(io.Discard, c, 256<<10)
	}
	c.Close()
}

// judge checks that the client's first bytes name the same host as the connection and port, as
// sniffed: the SNI of a ClientHello, the Host and URI of an HTTP request. It returns the refusal, or
// an allowing zero Decision.
func (s *session) judge(sn sniffed, name string, port uint16) (egress.Decision, bool) {
	s.detail("proto", sn.kind.String())
	switch sn.kind {
	case kindTLS:
		if sn.err != nil {
			s.detail("error", sn.err.Error())
			return refuse(reasonBadHello), false
		}
		h := sn.hello
		if h.ServerName != "" {
			s.detail("sni", h.ServerName)
		}
		if len(h.ALPN) > 0 {
			s.detail("alpn", strings.Join(h.ALPN, ","))
		}
		switch {
		case h.ECH:
			return refuse(reasonECH), false
		case h.ServerName == "":
			return refuse(reasonNoSNI), false
		case h.ServerNameIP.IsValid():
			return refuse(reasonSNIIsIP), false
		case h.ServerName != name:
			return refuse(reasonSNIMismatch), false
		}
	case kindHTTP:
		if sn.err != nil {
			s.detail("error", sn.err.Error())
			return refuse(reasonBadRequest), false
		}
		return s.judgeRequest(sn.req, name, port)
	}
	return egress.Decision{}, true
}

// judgeRequest checks the first plain-HTTP request on a connection for name:port, and records what
// it asked for.
func (s *session) judgeRequest(r *http1.Request, name string, port uint16) (egress.Decision, bool) {
	s.detail("method", r.Method)
	s.detail("path", truncate(r.Path, 200))
	if r.HasHost {
		s.detail("http_host", r.Host.String())
	}
	if reason := checkRequest(r, name, port); reason != "" {
		return refuse(reason), false
	}
	return egress.Decision{}, true
}

// checkRequest says why a plain-HTTP request on a connection for name:port is refused, or "".
func checkRequest(r *http1.Request, name string, port uint16) string {
	switch {
	case r.Method == "CONNECT":
		return reasonNestedProxy
	case r.Upgrade:
		return reasonUpgrade
	case !r.HasHost:
		return reasonNoHost
	case r.Host.Host != name || r.Host.Port != 0 && r.Host.Port != port:
		return reasonHostMismatch
	case r.Form == "absolute" && (r.URI.Host != name || r.URI.Port != 0 && r.URI.Port != port):
		return reasonURIMismatch
	}
	return ""
}

// pass judges and relays a connection to name:port whose upstream is already dialed and whose policy
// decision allowed it. Bytes from the upstream flow to the client at once (a server may speak first,
// and it is the server the policy allowed); bytes from the client flow only once its first bytes
// passed judge. Plain HTTP is then forwarded request by request (serveHTTP); anything else is
// relayed both ways, each direction half-closing the other side when it ends cleanly, and a failure
// in either resetting both.
func (s *session) pass(br *bufio.Reader, up net.Conn, name string, port uint16) {
	c := s.client
	// stopped is set when the gateway itself stops the upstream-to-client relay: to refuse, to forward
	// plain HTTP request by request instead, or to hand the connection to the kernel.
	var stopped atomic.Bool
	down := make(chan relayResult, 1)
	running := false // the upstream-to-client relay has started
	startDown := func() {
		running = true
		go func() {
			n, err := s.g.bufs.relay(c, up)
			acted := !stopped.Load()
			if acted {
				if err == nil {
					closeWrite(c)
				} else {
					reset(c)
					s.abort()
				}
			}
			down <- relayResult{n, err, acted}
		}()
	}
	// A client whose first bytes are already here (an HTTP or TLS client writes them as soon as it
	// is connected) is judged before the upstream's bytes are relayed: nothing the server could say
	// has reached the client yet, so plain HTTP and intercepted TLS need no relay to stop. Only a
	// silent client (a protocol where the server speaks first) gets the relay at once.
	if !readable(c, br) {
		startDown()
	}
	finish := func() {
		if !running {
			return
		}
		r := <-down
		s.ev.BytesIn += r.n
		if r.err != nil && !stopped.Load() && s.ev.Detail["error"] == "" {
			s.detail("error", "from upstream: "+r.err.Error())
		}
	}

	sn, err := s.g.sniff(c, br, 0)
	if err != nil {
		s.detail("error", err.Error())
		s.abort()
		finish()
		return
	}
	if d, ok := s.judge(sn, name, port); !ok {
		stopped.Store(true)
		up.Close()
		finish()
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
	if sn.kind == kindTLS && s.g.inspectsTLS(name) {
		// TLS to a host inspected for SNI/Host agreement: the interceptor dials its own upstream. A
		// TLS server never speaks first, so nothing of this one reached the client.
		stopped.Store(true)
		up.Close()
		finish()
		s.g.serveIntercepted(s.ctx, s, br, sn, name, port)
		return
	}
	if sn.kind == kindHTTP {
		// Whatever the server said before the request went to the client as it came; from here on
		// its bytes are read as responses.
		stopped.Store(true)
		if running {
			_ = up.SetReadDeadline(time.Now())
			finish()
			_ = up.SetReadDeadline(time.Time{})
		}
		s.serveHTTP(br, up, sn.req, name, port)
		return
	}

	prefix := sn.prefix
	if kr := s.g.cfg.KernelRelay; kr != nil {
		var done bool
		if done, prefix = s.kernelPass(kr, up, prefix, running, &stopped, down, startDown); done {
			return
		}
	}
	if !running {
		startDown()
	}
	// Client to upstream: the sniffed bytes, then the rest.
	n, err := up.Write(prefix)
	out := int64(n)
	if err == nil {
		var m int64
		m, err = s.g.bufs.relay(up, c)
		out += m
	}
	s.ev.BytesOut += out
	if err == nil {
		closeWrite(up)
	} else {
		// A reset, not a FIN, on both sides: a FIN would tell the upstream that a cut stream (an
		// upload, a request) was whole.
		s.detail("error", "from client: "+err.Error())
		reset(up)
		reset(c)
		s.abort()
	}
	finish()
}

// relayResult is how a relay goroutine ended; acted says whether it passed its end on itself (it does
// not once the gateway stopped it).
type relayResult struct {
	n     int64
	err   error
	acted bool
}

// kernelPass hands a judged connection to the kernel relay: it stops the upstream-to-client relay
// where it waits for bytes, writes the judged bytes upstream, and splices the two sockets, which
// the kernel then relays both ways until each direction's end (passed on as a half-close) or a
// reset (both reset). It returns done when the connection is over. Otherwise the user-space relay
// carries on, with the upstream-to-client goroutine running (again, or for the first time if it was
// not running) or its end left in down, and rest the bytes still to write upstream.
func (s *session) kernelPass(kr *kernelrelay.Relay, up net.Conn, prefix []byte, running bool, stopped *atomic.Bool, down chan relayResult, restart func()) (done bool, rest []byte) {
	cc, ok1 := s.client.(*net.TCPConn)
	uc, ok2 := up.(*net.TCPConn)
	if !ok1 || !ok2 {
		return false, prefix
	}
	stopped.Store(true)
	r := relayResult{err: os.ErrDeadlineExceeded} // a relay that never ran stopped where it waited
	if running {
		_ = up.SetReadDeadline(time.Now())
		r = <-down
		_ = up.SetReadDeadline(time.Time{})
	}
	if !errors.Is(r.err, os.ErrDeadlineExceeded) {
		// The upstream's stream ended before the handover: pass its end on as the relay would have,
		// and leave the rest to user space.
		if !r.acted {
			if r.err == nil {
				closeWrite(s.client)
			} else {
				reset(s.client)
				s.abort()
			}
		}
		stopped.Store(false)
		down <- relayResult{r.n, r.err, true}
		return false, prefix
	}
	s.ev.BytesIn += r.n
	n, err := up.Write(prefix)
	s.ev.BytesOut += int64(n)
	if err != nil {
		s.detail("error", "to upstream: "+err.Error())
		reset(up)
		reset(s.client)
		s.abort()
		return true, nil
	}
	p, err := kr.Splice(cc, uc)
	if err != nil {
		// The kernel did not take it (its maps are full, a socket is closing): relay in user space,
		// counting what Splice moved itself.
		if he := (*kernelrelay.HandoverError)(nil); errors.As(err, &he) {
			s.ev.BytesOut += he.AB
			s.ev.BytesIn += he.BA
		}
		s.detail("relay", "user space ("+err.Error()+")")
		stopped.Store(false)
		restart()
		return false, nil
	}

	s.detail("relay", "kernel")
	out, in, err := p.Wait(s.ctx)
	s.ev.BytesOut += out
	s.ev.BytesIn += in
	if err != nil {
		s.detail("error", err.Error())
		reset(up)
		reset(s.client)
		s.abort()
	}
	return true, nil
}

// readable reports, without waiting, whether the client has sent bytes the gateway has not read:
// already in br, or in the socket (a peek that takes nothing).
func readable(c net.Conn, br *bufio.Reader) bool {
	if br.Buffered() > 0 {
		return true
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			var err error
			n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err != syscall.EINTR {
				return true
			}
		}
	})
	return n > 0
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		c.Close()
	}
}
