// Package dns is the sandbox's only resolver. It answers A and AAAA queries for the names the policy
// allows with private addresses that map back to the name (so the gateway knows what every connection
// is for), and nothing else: an unknown name gets NXDOMAIN and is never sent anywhere, so a DNS tunnel
// ("$(secret).attacker.example") carries nothing out of the sandbox. It never resolves upstream
// itself; the gateway resolves the real name when it dials. So a name the sandbox makes up under an
// allowed wildcard reaches that zone's DNS servers only if the sandbox connects to it, never because
// it looked the name up (the wildcard stays a channel, one name per connection: see SECURITY-MODEL).
//
// The server reads and writes the sockets it is given (the gateway creates them inside the sandbox's
// network namespace) with its own small loops around one function from query bytes to answer bytes,
// using github.com/miekg/dns for the wire format. Owning the loops keeps resource use fixed (one
// goroutine for UDP, a bounded number of TCP connections) and lets the fuzzer reach the very code that
// parses what the sandbox sends.
package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/hostname"
)

// Policy says which names the DNS answers. It is the part of egress.Policy the DNS needs, declared
// here so that this package does not import the gateway that serves it.
type Policy interface {
	// Known reports whether some rule could allow host (lower-case, no trailing dot) on some port.
	Known(host string) bool
}

// Explainer is optionally implemented by a Policy to name the rule behind Known in the audit log.
type Explainer interface {
	Explain(host string) (rule, reason string)
}

// Names assigns the addresses the DNS answers with: the part of egress.Names the DNS needs.
type Names interface {
	Assign(name string) (v4, v6 netip.Addr, err error)
}

// Defaults for Config's zero values.
const (
	// DefaultTTL is short so that a policy or mapping change is seen quickly and so that nothing the
	// sandbox caches outlives the run by long.
	DefaultTTL = 5 * time.Second
	// DefaultIdleTimeout closes a TCP connection that sends no query for this long.
	DefaultIdleTimeout = 10 * time.Second
	// MaxTCPConns bounds the TCP connections served at once; further ones are closed at once, so the
	// sandbox cannot make the gateway hold unbounded sockets and goroutines.
	MaxTCPConns = 64
)

// Config is what a Server needs. Policy, Names and Recorder are required.
type Config struct {
	Policy   Policy
	Names    Names
	Recorder audit.Recorder
	// Hostname is the sandbox's own host name, answered with loopback like localhost.
	Hostname string
	// TTL of answers; zero means DefaultTTL.
	TTL time.Duration
	// IdleTimeout for TCP connections; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Refused, if set, is told each host name the policy refused (not malformed names), with the
	// reason, so a human can be told what the sandbox could not resolve. It must not block.
	Refused func(host, reason string)
}

// Server answers the sandbox's DNS queries. It is safe for concurrent use.
type Server struct {
	policy   Policy
	explain  Explainer // nil when Policy does not implement it
	refused  func(host, reason string)
	names    Names
	rec      audit.Recorder
	hostname string
	ttl      uint32
	idle     time.Duration
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Policy == nil || cfg.Names == nil || cfg.Recorder == nil {
		return nil, errors.New("dns: Policy, Names and Recorder are required")
	}
	s := &Server{policy: cfg.Policy, names: cfg.Names, rec: cfg.Recorder, ttl: uint32(DefaultTTL / time.Second), idle: cfg.IdleTimeout, refused: cfg.Refused}
	s.explain, _ = cfg.Policy.(Explainer)
	if cfg.Hostname != "" {
		h, ok := hostName(cfg.Hostname)
		if !ok {
			return nil, fmt.Errorf("dns: sandbox host name %q is not a valid host name", cfg.Hostname)
		}
		s.hostname = h
	}
	if cfg.TTL != 0 {
		if cfg.TTL < time.Second || cfg.TTL > time.Hour {
			return nil, fmt.Errorf("dns: TTL %v out of range (1s to 1h)", cfg.TTL)
		}
		s.ttl = uint32(cfg.TTL / time.Second)
	}
	if s.idle <= 0 {
		s.idle = DefaultIdleTimeout
	}
	return s, nil
}

// Serve answers queries on pc (UDP) and l (TCP), either of which may be nil, until ctx is done. It
// takes ownership of both and closes them before returning. It returns nil when ctx ends it, and
// otherwise the error that stopped one of them; both stop then, so the sandbox is left without DNS
// rather than with half of it (fail closed).
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, l net.Listener) error {
	if pc == nil && l == nil {
		return errors.New("dns: nothing to serve: no packet conn and no listener")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	run := func(f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errs <- err
			}
			cancel()
		})
	}
	if pc != nil {
		stop := context.AfterFunc(ctx, func() { pc.Close() })
		defer stop()
		run(func(ctx context.Context) error { return s.serveUDP(ctx, pc) })
	}
	if l != nil {
		stop := context.AfterFunc(ctx, func() { l.Close() })
		defer stop()
		run(func(ctx context.Context) error { return s.serveTCP(ctx, l) })
	}
	wg.Wait()
	// Close both here as well: the AfterFuncs run asynchronously, and a loop that failed on its own
	// may have left its socket open. The sockets are gone when Serve returns, in every case.
	if pc != nil {
		pc.Close()
	}
	if l != nil {
		l.Close()
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// serveUDP answers datagrams one at a time: an answer needs no I/O, so one goroutine keeps up and the
// sandbox cannot make the gateway start more.
func (s *Server) serveUDP(ctx context.Context, pc net.PacketConn) error {
	buf := make([]byte, 65535)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if transient(err) {
				continue
			}
			return fmt.Errorf("dns: reading UDP: %w", err)
		}
		if resp := s.handle(buf[:n], "udp"); resp != nil {
			// A failed write is the client's problem (it went away); the next query goes on.
			_, _ = pc.WriteTo(resp, addr)
		}
	}
}

// serveTCP accepts connections, at most MaxTCPConns at a time.
func (s *Server) serveTCP(ctx context.Context, l net.Listener) error {
	slots := make(chan struct{}, MaxTCPConns)
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := time.Duration(0)
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if transient(err) {
				// Out of file descriptors and the like: wait a little instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return nil
				}
				continue
			}
			return fmt.Errorf("dns: accepting TCP: %w", err)
		}
		backoff = 0
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			defer c.Close()
			s.serveConn(c)
		})
	}
}

// serveConn answers length-prefixed queries on one TCP connection in order (RFC 7766) until the
// client closes it, goes idle, or sends something that is not a DNS message.
func (s *Server) serveConn(c net.Conn) {
	var hdr [2]byte
	buf := make([]byte, 65535)
	for {
		if err := c.SetDeadline(time.Now().Add(s.idle)); err != nil {
			return
		}
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n == 0 {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		resp := s.handle(buf[:n], "tcp")
		if resp == nil {
			continue
		}
		out := make([]byte, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp)))
		copy(out[2:], resp)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// transient reports errors a server should wait out rather than stop for.
func transient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// hostName returns name (in presentation form, as miekg/dns unpacks it) lower-case without the
// trailing dot, and whether it is a plain host name: labels of ASCII letters, digits, '-' and '_'.
// Anything else (an escaped dot or byte, a wildcard, an empty label) is never a name the policy
// could allow, so it is refused before the policy is asked.
func hostName(name string) (string, bool) {
	n, err := hostname.Normalize(name)
	return n, err == nil
}

// sanitizeName is a name as the audit log shows it when it is not a plain host name: lower-cased and
// cut to a length a log line can carry.
func sanitizeName(name string) string {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if len(name) > 300 {
		name = name[:300] + "…"
	}
	return name
}

// handle answers one query. It returns nil when the message deserves no answer at all (too short to
// carry an ID, or a response rather than a query: answering a response could start two servers
// bouncing errors at each other). Every message, answered or not, is one audit event.
func (s *Server) handle(raw []byte, proto string) (out []byte) {
	ev := audit.Event{Kind: audit.KindDNS, Decision: audit.Deny, Detail: map[string]string{"transport": proto}}
	// The message is hostile input. Should parsing it ever panic, that query goes unanswered and is
	// logged, and the sandbox's DNS (and cordon with it) stays up; the fuzz target calls answer
	// directly, so it still sees any panic.
	defer func() {
		if p := recover(); p != nil {
			out = nil
			s.rec.Record(audit.Event{Kind: audit.KindDNS, Decision: audit.Deny, Reason: fmt.Sprintf("internal error answering the query: %v", p),
				Detail: map[string]string{"transport": proto}})
		}
	}()
	resp, udpSize := s.answer(raw, &ev)
	if resp != nil {
		ev.Detail["rcode"] = rcodeName(resp.Rcode)
		limit := mdns.MaxMsgSize
		if proto == "udp" {
			limit = udpSize
		}
		var err error
		if out, err = pack(resp, limit); err != nil {
			ev.Decision, ev.Reason = audit.Deny, err.Error()
		}
	}
	s.rec.Record(ev)
	return out
}

// answer builds the response for raw and fills ev in; nil means no response. udpSize is the largest
// answer the client takes over UDP: 512 bytes, or what its EDNS OPT record says up to ednsSize.
func (s *Server) answer(raw []byte, ev *audit.Event) (resp *mdns.Msg, udpSize int) {
	resp, opt := s.respond(raw, ev)
	if opt == nil {
		return resp, mdns.MinMsgSize
	}
	return resp, max(mdns.MinMsgSize, min(int(opt.UDPSize()), ednsSize))
}

// respond is answer without the size: the response, and the query's OPT record if it has a valid one.
func (s *Server) respond(raw []byte, ev *audit.Event) (*mdns.Msg, *mdns.OPT) {
	if len(raw) < 12 {
		ev.Reason = "malformed query: shorter than a DNS header"
		return nil, nil
	}
	id := binary.BigEndian.Uint16(raw[0:2])
	if raw[2]&0x80 != 0 {
		ev.Reason = "a response, not a query"
		return nil, nil
	}
	fail := func(rcode int, reason string) (*mdns.Msg, *mdns.OPT) {
		ev.Reason = reason
		m := new(mdns.Msg)
		m.Id, m.Response, m.Rcode, m.RecursionAvailable = id, true, rcode, true
		return m, nil
	}
	if op := int(raw[2]>>3) & 0xF; op != mdns.OpcodeQuery {
		m, _ := fail(mdns.RcodeNotImplemented, fmt.Sprintf("opcode %s is not supported", opcodeName(op)))
		m.Opcode = op
		return m, nil
	}
	qd, an, ns, ar := binary.BigEndian.Uint16(raw[4:]), binary.BigEndian.Uint16(raw[6:]), binary.BigEndian.Uint16(raw[8:]), binary.BigEndian.Uint16(raw[10:])
	if qd != 1 {
		return fail(mdns.RcodeFormatError, fmt.Sprintf("malformed query: %d questions", qd))
	}
	if an != 0 || ns != 0 || ar > 1 {
		return fail(mdns.RcodeFormatError, "malformed query: records in the answer or authority section, or extra records other than one OPT")
	}
	req := new(mdns.Msg)
	if err := req.Unpack(raw); err != nil {
		return fail(mdns.RcodeFormatError, "malformed query: "+err.Error())
	}
	// miekg/dns tolerates header counts larger than what follows; a query must not.
	if len(req.Question) != 1 || len(req.Extra) != int(ar) {
		return fail(mdns.RcodeFormatError, "malformed query: header counts do not match the message")
	}
	q := req.Question[0]
	ev.Detail["qtype"] = typeName(q.Qtype)
	resp := new(mdns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	var opt *mdns.OPT
	if len(req.Extra) == 1 {
		o, ok := req.Extra[0].(*mdns.OPT)
		if !ok || o.Hdr.Name != "." {
			ev.Reason = "malformed query: an extra record other than OPT"
			resp.Rcode = mdns.RcodeFormatError
			return resp, nil
		}
		opt = o
		// A query with OPT gets one back (RFC 6891); it also carries BADVERS's upper bits.
		resp.SetEdns0(ednsSize, false)
		if o.Version() != 0 {
			ev.Reason = fmt.Sprintf("EDNS version %d is not supported", o.Version())
			resp.Rcode = mdns.RcodeBadVers
			return resp, opt
		}
	}
	if q.Qclass != mdns.ClassINET {
		ev.Name = sanitizeName(q.Name)
		ev.Reason = fmt.Sprintf("class %s is not served", className(q.Qclass))
		resp.Rcode = mdns.RcodeRefused
		return resp, opt
	}
	host, ok := hostName(q.Name)
	if !ok {
		ev.Name = sanitizeName(q.Name)
		ev.Rule, ev.Reason = "default", "not a valid host name"
		resp.Rcode = mdns.RcodeNameError
		return resp, opt
	}
	ev.Name = host
	resp.Authoritative = true // the sandbox's view of every name is cordon's to give
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || host == s.hostname {
		ev.Decision, ev.Rule = audit.Allow, "localhost"
		if host == s.hostname {
			ev.Rule = "sandbox host name"
		}
		s.addAnswer(resp, q, netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback(), ev)
		return resp, opt
	}
	if !s.policy.Known(host) {
		ev.Rule, ev.Reason = "default", "not an allowed name"
		if s.explain != nil {
			ev.Rule, ev.Reason = s.explain.Explain(host)
		}
		if s.refused != nil {
			s.refused(host, ev.Reason)
		}
		resp.Rcode = mdns.RcodeNameError
		return resp, opt
	}
	ev.Decision = audit.Allow
	if s.explain != nil {
		ev.Rule, _ = s.explain.Explain(host)
	}
	if q.Qtype != mdns.TypeA && q.Qtype != mdns.TypeAAAA {
		return resp, opt // NOERROR, no data: the name exists for connections, nothing else
	}
	v4, v6, err := s.names.Assign(host)
	if err != nil {
		ev.Decision, ev.Reason = audit.Deny, "no address to answer with: "+err.Error()
		resp.Rcode = mdns.RcodeServerFailure
		return resp, opt
	}
	s.addAnswer(resp, q, v4, v6, ev)
	return resp, opt
}

// addAnswer adds the A or AAAA record the question asks for, if there is an address of that family.
func (s *Server) addAnswer(resp *mdns.Msg, q mdns.Question, v4, v6 netip.Addr, ev *audit.Event) {
	hdr := mdns.RR_Header{Name: q.Name, Class: mdns.ClassINET, Ttl: s.ttl}
	switch {
	case q.Qtype == mdns.TypeA && v4.IsValid():
		hdr.Rrtype = mdns.TypeA
		resp.Answer = append(resp.Answer, &mdns.A{Hdr: hdr, A: v4.AsSlice()})
		ev.Detail["answer"] = v4.String()
	case q.Qtype == mdns.TypeAAAA && v6.IsValid():
		hdr.Rrtype = mdns.TypeAAAA
		resp.Answer = append(resp.Answer, &mdns.AAAA{Hdr: hdr, AAAA: v6.AsSlice()})
		ev.Detail["answer"] = v6.String()
	}
}

// ednsSize is the UDP payload size the server advertises and honours at most: the size DNS flag day
// 2020 settled on, which avoids IP fragmentation.
const ednsSize = 1232

// pack encodes resp, truncating it (TC set) to limit bytes, so a UDP client that cannot take more
// retries over TCP.
func pack(resp *mdns.Msg, limit int) ([]byte, error) {
	resp.Compress = true
	resp.Truncate(limit)
	out, err := resp.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing the answer: %w", err)
	}
	return out, nil
}

func rcodeName(rc int) string {
	if rc == mdns.RcodeBadVers {
		return "BADVERS" // shares its number with TSIG's BADSIG, which is what the table says
	}
	if n, ok := mdns.RcodeToString[rc]; ok {
		return n
	}
	return fmt.Sprintf("RCODE%d", rc)
}

func typeName(t uint16) string {
	if n, ok := mdns.TypeToString[t]; ok {
		return n
	}
	return fmt.Sprintf("TYPE%d", t)
}

func className(c uint16) string {
	if n, ok := mdns.ClassToString[c]; ok {
		return n
	}
	return fmt.Sprintf("CLASS%d", c)
}

func opcodeName(op int) string {
	if n, ok := mdns.OpcodeToString[op]; ok {
		return n
	}
	return fmt.Sprintf("OPCODE%d", op)
}
