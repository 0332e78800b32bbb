// Package proxy holds the connection handlers of cordon's egress gateway: the transparent handler,
// which takes every TCP connection the sandbox makes (nftables redirects them to its listener), and
// the explicit HTTP/1.1 forward proxy for tools that want one. Both serve listeners they are given
// (created inside the sandbox's network namespace, served from outside it), so this package never
// creates a socket the sandbox could reach by other means.
//
// For every connection the handlers work out the one name it is for, and require every place that
// names it to agree: the address the sandbox's DNS handed out (egress.Names), the CONNECT target, the
// TLS SNI, the HTTP Host header and request URI. A connection that cannot be checked (ECH, an IP
// address, a malformed ClientHello or request) is refused, not guessed at. Only then is the policy
// asked, and on "allow" the gateway dials the real host itself, never an address the sandbox chose,
// and refuses addresses that would reach this host or its network (loopback, link-local such as the
// cloud metadata service, private ranges, this host's own addresses) unless the policy pins the name
// there. Every connection ends as exactly one audit.Event.
//
// Plain HTTP is read by the strict parser of package http1 and forwarded one request at a time, each
// judged like the first and written upstream by the gateway from what it parsed (httpforward.go), so
// a server can only read the requests the gateway read: never a smuggled one in a body or after
// framing the parser refuses.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress"
	"github.com/cordon-sandbox/cordon/internal/egress/proxy/kernelrelay"
)

// Defaults for the Config fields left zero.
const (
	// DefaultSniffTimeout is how long a connection to a denied name may stay silent before the gateway
	// resets it: waiting for its first bytes is only needed to answer HTTP with a readable 403.
	DefaultSniffTimeout = 2 * time.Second
	// DefaultHeaderTimeout bounds the time a client takes to finish a ClientHello or an HTTP request
	// head it has started, so a slow client cannot hold a check open forever.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultDialTimeout bounds resolving and connecting to an upstream.
	DefaultDialTimeout = 10 * time.Second
	// localAddrsTTL is how long the list of this host's own addresses is reused.
	localAddrsTTL = 5 * time.Second
	// maxHello bounds a TLS ClientHello (records included).
	maxHello = 64 << 10
	// sniffBuffer is the read buffer of a connection while its first bytes are classified.
	sniffBuffer = 4 << 10
)

// Config is what the gateway's handlers are given. Policy, Recorder and LookupNetIP are required;
// Names and OrigDst are required by Transparent only.
type Config struct {
	// Policy decides each name and port.
	Policy egress.Policy
	// Names maps the addresses the sandbox's DNS handed out back to names (Transparent).
	Names egress.Names
	// Recorder receives one event per connection.
	Recorder audit.Recorder
	// LookupNetIP resolves a name the policy allowed and did not pin, outside the sandbox (the host's
	// resolver, or network.dns.upstream).
	LookupNetIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// OrigDst returns the address a redirected connection was sent to (Transparent); the gateway
	// gives the real one, which reads it from conntrack.
	OrigDst func(net.Conn) (netip.AddrPort, error)
	// Notify, if set, is called when a TLS or other TCP connection is refused by reset (plain HTTP
	// gets a 403 that says the same), so the CLI can print one line for a human. It is called on
	// every refusal: telling the human once per host and port, and not flooding the terminal, is the
	// caller's (the gateway's bounded notifier), the one place that de-duplicates. It must not block,
	// and should make its line only when it prints one: an agent retrying pays for every call.
	Notify func(d egress.Decision, name string, port uint16)
	// Unreachable, if set, is called when an allowed name:port cannot be reached (it does not
	// resolve, or no address answers), on every such failure, so the caller can tell the human once
	// per host (the gateway's notifier de-duplicates). A dial the gateway refuses, or one the
	// sandbox gave up on, is not reported here. It must not block.
	Unreachable func(name string, port uint16, err error)
	// DialContext, if set, replaces net.Dialer for connections to upstreams (the gateway passes it
	// "tcp" and an IP:port it has checked). Return *net.TCPConn: the relay reads and writes its
	// descriptor directly.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// LocalAddrs, if set, lists this host's own addresses, which the gateway refuses to dial; the
	// default reads the interfaces.
	LocalAddrs func() ([]netip.Addr, error)
	// Intercept, if set, takes the connections to the hosts it wants, once they are judged and allowed.
	Intercept Interceptor
	// Services, if set, names the run's fixture services: a name and port it knows is dialled at
	// the unix socket it returns (a server cordon started outside the sandbox), never resolved.
	Services func(name string, port uint16) (socket string, ok bool)
	// KernelRelay, if set, relays the connections the gateway passes through unread (TLS it does not
	// inspect, other TCP) in the kernel once their first bytes are judged, instead of copying them
	// through user space. Plain HTTP is always forwarded request by request in user space. The
	// caller owns it (and closes it after the gateway stops).
	KernelRelay *kernelrelay.Relay
	// SniffTimeout, HeaderTimeout and DialTimeout override the defaults above.
	SniffTimeout, HeaderTimeout, DialTimeout time.Duration
}

// Gateway serves the transparent and explicit listeners of one sandbox. It keeps the little state the
// handlers share (this host's addresses); it has no global state, so each run has its own.
type Gateway struct {
	cfg  Config
	bufs bufferPool // the relays' buffers

	mu          sync.Mutex
	localAddrs  map[netip.Addr]bool
	localAddrsT time.Time
}

// New checks cfg and returns a Gateway. A missing piece is an error rather than a permissive default:
// the gateway fails closed.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("proxy: Config.Policy is required")
	case cfg.Recorder == nil:
		return nil, errors.New("proxy: Config.Recorder is required")
	case cfg.LookupNetIP == nil:
		return nil, errors.New("proxy: Config.LookupNetIP is required")
	}
	if cfg.SniffTimeout <= 0 {
		cfg.SniffTimeout = DefaultSniffTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.DialContext == nil {
		cfg.DialContext = (&net.Dialer{}).DialContext
	}
	if cfg.LocalAddrs == nil {
		cfg.LocalAddrs = interfaceAddrs
	}
	return &Gateway{cfg: cfg}, nil
}

// Transparent serves connections redirected to ln from the sandbox, until ctx is done or ln fails.
// Each connection is for the name its original destination was handed out for. It returns nil when
// ctx ends it; either way every connection it accepted is closed before it returns, so egress stops
// with the gateway.
func (g *Gateway) Transparent(ctx context.Context, ln net.Listener) error {
	if g.cfg.Names == nil || g.cfg.OrigDst == nil {
		return errors.New("proxy: Transparent needs Config.Names and Config.OrigDst")
	}
	return g.serve(ctx, ln, g.transparent)
}

// Explicit serves an HTTP/1.1 forward proxy on ln (CONNECT, and absolute-form http:// requests),
// until ctx is done or ln fails, with the same guarantees as Transparent.
func (g *Gateway) Explicit(ctx context.Context, ln net.Listener) error {
	return g.serve(ctx, ln, g.explicit)
}

// serve accepts until ctx ends or the listener fails, runs handle for each connection, and returns
// after every handler has.
func (g *Gateway) serve(ctx context.Context, ln net.Listener, handle func(context.Context, net.Conn)) error {
	var wg sync.WaitGroup
	defer g.bufs.drain() // after the handlers: idle buffers go to the garbage collector
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // runs before wg.Wait: closes the connections the handlers are blocked on
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var backoff time.Duration
	idle := make(chan net.Conn) // unbuffered: a connection is handed only to a waiting handler
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if temporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				continue
			}
			return fmt.Errorf("proxy: accept on %s: %w", ln.Addr(), err)
		}
		backoff = 0
		// An idle handler goroutine takes the connection if there is one: it keeps the stack the
		// last connection grew, where a new goroutine copies its stack up again on every connection.
		select {
		case idle <- c:
			continue
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle(ctx, c)
			t := time.NewTimer(idleHandler)
			defer t.Stop()
			for {
				select {
				case c := <-idle:
					handle(ctx, c)
					t.Reset(idleHandler)
				case <-t.C:
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
}

// idleHandler is how long a handler goroutine waits for another connection before it ends.
const idleHandler = time.Second

// temporary reports accept errors that pass (out of file descriptors, a connection aborted before it
// was accepted); the loop backs off instead of giving up the listener.
func temporary(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// notify tells Config.Notify that name and port were refused.
func (g *Gateway) notify(d egress.Decision, name string, port uint16) {
	if g.cfg.Notify != nil {
		g.cfg.Notify(d, name, port)
	}
}

// isLocal reports whether a is one of this host's own addresses, re-reading them every few seconds.
// When they cannot be read it fails closed: every address counts as local.
func (g *Gateway) isLocal(a netip.Addr) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.localAddrs == nil || time.Since(g.localAddrsT) > localAddrsTTL {
		addrs, err := g.cfg.LocalAddrs()
		if err != nil {
			return true, fmt.Errorf("proxy: listing this host's addresses: %w", err)
		}
		g.localAddrs = make(map[netip.Addr]bool, len(addrs))
		for _, l := range addrs {
			g.localAddrs[l.Unmap()] = true
		}
		g.localAddrsT = time.Now()
	}
	return g.localAddrs[a], nil
}

func interfaceAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range ifaddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
