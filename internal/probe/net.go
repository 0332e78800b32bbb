//go:build linux

package probe

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// attemptTimeout bounds one connection attempt; a probe makes several.
const attemptTimeout = 1500 * time.Millisecond

func networkProbes() []Probe {
	return []Probe{
		{"net.loopback", Network, "connect to a host listener on 127.0.0.1 and ::1", withListener(netLoopback)},
		{"net.raw-ip", Network, "connect straight to the host's own IPv4 addresses (no name)", withListener(netRawIPv4)},
		{"net.ipv6", Network, "connect to the host's global IPv6 addresses", withListener(netIPv6)},
		{"net.udp", Network, "send UDP to the host's listener and wait for its answer", withListener(netUDP)},
		{"net.icmp", Network, "ping the host's addresses (ICMP echo)", netICMP},
		{"net.dns-tunnel", Network, "resolve a denied name carrying data, via the resolver and the canary DNS server", netDNSTunnel},
		{"net.name-to-loopback", Network, "connect to an allowed name that resolves to the host's loopback", netNameToLoopback},
		{"net.connect-relay", Network, "CONNECT through the proxy or an allowed host to the host's listener", withListener(netConnectRelay)},
		{"net.host-mismatch", Network, "send an HTTP request with a denied Host to an allowed address", netHostMismatch},
		{"net.sni-mismatch", Network, "send a TLS ClientHello naming a denied host to an allowed address", netSNIMismatch},
	}
}

// withListener runs a probe that needs the host listener canary, and skips it when there is none.
func withListener(run func(context.Context, *Env, *Listener) Verdict) func(context.Context, *Env) Verdict {
	return func(ctx context.Context, env *Env) Verdict {
		if env.Canaries.Listener == nil {
			return skip("no host listener canary given (cordon verify plants one)")
		}
		return run(ctx, env, env.Canaries.Listener)
	}
}

// greets dials addr and reports whether what it says first is the listener's secret greeting.
func greets(ctx context.Context, network, addr, want string) (bool, error) {
	d := net.Dialer{Timeout: attemptTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	return readGreeting(c, want)
}

func readGreeting(c net.Conn, want string) (bool, error) {
	c.SetReadDeadline(time.Now().Add(attemptTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if line == "" && err != nil {
		return false, fmt.Errorf("connected, but nothing came back: %w", err)
	}
	return Sum([]byte(strings.TrimRight(line, "\r\n"))) == want, nil
}

// hostAddrs splits the listener's host addresses by kind.
func hostAddrs(l *Listener) (loop, v4, v6 []netip.Addr) {
	for _, s := range l.Addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		switch {
		case a.IsLoopback():
			loop = append(loop, a)
		case a.Is4():
			v4 = append(v4, a)
		case a.IsGlobalUnicast() || a.IsPrivate():
			v6 = append(v6, a)
		}
	}
	return loop, v4, v6
}

func dialEach(ctx context.Context, l *Listener, addrs []netip.Addr, ports []int) Verdict {
	var tried []string
	for _, a := range addrs {
		for _, p := range ports {
			addr := netip.AddrPortFrom(a, uint16(p)).String()
			ok, err := greets(ctx, "tcp", addr, l.SHA256)
			if ok {
				return fail("connected to %s and got the host listener's secret greeting", addr)
			}
			tried = append(tried, fmt.Sprintf("%s: %v", addr, errOr(err, "no greeting")))
		}
	}
	return pass("%s", strings.Join(tried, "; "))
}

func errOr(err error, s string) string {
	if err != nil {
		return shortErr(err)
	}
	return s
}

// shortErr drops the repeated "dial tcp ...:" prefixes from an error.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 60 {
		return s[i+2:]
	}
	return s
}

func netLoopback(ctx context.Context, env *Env, l *Listener) Verdict {
	return dialEach(ctx, l, []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}, []int{l.Port})
}

func netRawIPv4(ctx context.Context, env *Env, l *Listener) Verdict {
	_, v4, _ := hostAddrs(l)
	if len(v4) == 0 {
		return skip("the host has no non-loopback IPv4 address")
	}
	return dialEach(ctx, l, v4, []int{l.Port})
}

func netIPv6(ctx context.Context, env *Env, l *Listener) Verdict {
	_, _, v6 := hostAddrs(l)
	if len(v6) == 0 {
		return skip("the host has no global IPv6 address")
	}
	return dialEach(ctx, l, v6, []int{l.Port})
}

func netUDP(ctx context.Context, env *Env, l *Listener) Verdict {
	loop, v4, v6 := hostAddrs(l)
	var notes []string
	for _, a := range append(append(loop, v4...), v6...) {
		addr := netip.AddrPortFrom(a, uint16(l.Port)).String()
		c, err := net.Dial("udp", addr)
		if err != nil {
			notes = append(notes, addr+": "+shortErr(err))
			continue
		}
		_, err = c.Write([]byte("cordon-probe " + env.Canaries.Nonce + "\n"))
		if err != nil {
			c.Close()
			notes = append(notes, addr+": "+shortErr(err))
			continue
		}
		ok, err := readGreeting(c, l.SHA256)
		c.Close()
		if ok {
			return fail("a UDP datagram to %s was answered by the host listener", addr)
		}
		notes = append(notes, addr+": "+errOr(err, "a reply that is not the host's"))
	}
	if env.Canaries.Nonce != "" {
		return pass("no answer (%s); cordon verify also checks the host received nothing", strings.Join(notes, "; "))
	}
	return pass("no answer: %s", strings.Join(notes, "; "))
}

func netICMP(_ context.Context, env *Env) Verdict {
	l := env.Canaries.Listener
	if l == nil {
		return skip("no host addresses given (cordon verify passes them)")
	}
	_, v4, _ := hostAddrs(l)
	if len(v4) == 0 {
		return skip("the host has no non-loopback IPv4 address to ping")
	}
	fd, kind, err := icmpSocket()
	if err != nil {
		return pass("no ICMP socket can be opened: %v", err)
	}
	defer unix.Close(fd)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
	for _, a := range v4 {
		sa := &unix.SockaddrInet4{Addr: a.As4()}
		if err := unix.Sendto(fd, echoRequest(), 0, sa); err != nil {
			continue
		}
		buf := make([]byte, 1500)
		deadline := time.Now().Add(attemptTimeout)
		for time.Now().Before(deadline) {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break
			}
			msg := buf[:n]
			if kind == unix.SOCK_RAW && n > 20 {
				msg = buf[(buf[0]&0x0f)*4 : n]
			}
			if f, ok := from.(*unix.SockaddrInet4); ok && netip.AddrFrom4(f.Addr) == a && len(msg) > 0 && msg[0] == 0 {
				return fail("%s answered an ICMP echo", a)
			}
		}
	}
	return pass("no echo reply from the host's addresses")
}

func icmpSocket() (int, int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP)
	if err == nil {
		return fd, unix.SOCK_DGRAM, nil
	}
	fd, err2 := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	if err2 == nil {
		return fd, unix.SOCK_RAW, nil
	}
	return -1, 0, fmt.Errorf("datagram: %v; raw: %v", err, err2)
}

func echoRequest() []byte {
	b := []byte{8, 0, 0, 0, 0x43, 0x50, 0, 1, 'c', 'o', 'r', 'd', 'o', 'n'}
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	cs := ^uint16(sum)
	b[2], b[3] = byte(cs>>8), byte(cs)
	return b
}

// deniedName is a name no policy allows, carrying the nonce as the data a tunnel would carry.
func deniedName(env *Env, label string) string {
	n := env.Canaries.Nonce
	if n == "" {
		n = "no-nonce"
	}
	return label + "-" + n + ".exfil.cordon-probe.invalid"
}

func netDNSTunnel(ctx context.Context, env *Env) Verdict {
	name := deniedName(env, "resolver")
	r := &net.Resolver{PreferGo: true}
	lctx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
	addrs, err := r.LookupHost(lctx, name)
	cancel()
	if err == nil && len(addrs) > 0 {
		return fail("the resolver answered the denied name %s with %v", name, addrs)
	}
	note := "the resolver refused " + name
	if env.Canaries.DNS != "" {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(deniedName(env, "direct")), dns.TypeA)
		c := &dns.Client{Timeout: attemptTimeout}
		resp, _, err := c.ExchangeContext(ctx, q, env.Canaries.DNS)
		if err == nil && resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
			return fail("the host's DNS server at %s answered a query sent to it directly: %v", env.Canaries.DNS, resp.Answer[0])
		}
		note += "; a direct query to " + env.Canaries.DNS + " got " + dnsOutcome(resp, err)
	}
	if env.Canaries.Nonce != "" {
		note += "; cordon verify also checks the host's DNS server saw nothing"
	}
	return pass("%s", note)
}

func dnsOutcome(resp *dns.Msg, err error) string {
	if err != nil {
		return shortErr(err)
	}
	return dns.RcodeToString[resp.Rcode] + " with no answer"
}

// loopbackPorts are the ports on which the host greets with its secret.
func loopbackPorts(l *Listener) map[int]bool {
	ports := map[int]bool{l.Port: true}
	for _, p := range l.ExtraPorts {
		ports[p] = true
	}
	return ports
}

func netNameToLoopback(ctx context.Context, env *Env) Verdict {
	l := env.Canaries.Listener
	if l == nil || len(env.Canaries.Allowed) == 0 {
		return skip("needs allowed names and a host listener on their ports (cordon verify with a network policy)")
	}
	ports := loopbackPorts(l)
	var tried []string
	for _, e := range env.Canaries.Allowed {
		if !ports[e.Port] {
			continue
		}
		addr := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
		ok, err := greets(ctx, "tcp", addr, l.SHA256)
		if ok {
			return fail("the allowed name %s led to the host's loopback listener", addr)
		}
		tried = append(tried, addr+": "+errOr(err, "not the host's listener"))
	}
	if len(tried) == 0 {
		return skip("no allowed name on a port the host could listen on")
	}
	return pass("%s", strings.Join(tried, "; "))
}

// explicitProxy is the HTTP proxy the environment names, if any: its address and, when the URL
// carries credentials, the Proxy-Authorization header value.
func explicitProxy() (addr, auth string) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		v := os.Getenv(k)
		if v == "" {
			continue
		}
		if !strings.Contains(v, "://") {
			v = "http://" + v
		}
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			continue
		}
		if u.User != nil {
			pw, _ := u.User.Password()
			auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
		}
		return u.Host, auth
	}
	return "", ""
}

// connectThrough asks the HTTP proxy at via to CONNECT to target and reports whether the tunnel
// carried the host listener's greeting.
func connectThrough(ctx context.Context, via, auth, target, want string) (bool, string) {
	d := net.Dialer{Timeout: attemptTimeout}
	c, err := d.DialContext(ctx, "tcp", via)
	if err != nil {
		return false, shortErr(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * attemptTimeout))
	hdr := ""
	if auth != "" {
		hdr = "Proxy-Authorization: " + auth + "\r\n"
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, hdr)
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return false, "no answer to CONNECT: " + shortErr(err)
	}
	if !strings.Contains(status, " 200") {
		return false, strings.TrimSpace(status)
	}
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return false, "tunnel closed"
		}
		if strings.TrimSpace(h) == "" {
			break
		}
	}
	line, _ := br.ReadString('\n')
	if Sum([]byte(strings.TrimRight(line, "\r\n"))) == want {
		return true, ""
	}
	return false, "tunnel opened, but not to the host's listener"
}

func netConnectRelay(ctx context.Context, env *Env, l *Listener) Verdict {
	type via struct{ addr, auth string }
	var vias []via
	if p, auth := explicitProxy(); p != "" {
		vias = append(vias, via{p, auth})
	}
	for _, e := range env.Canaries.Allowed {
		vias = append(vias, via{net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), ""})
	}
	if len(vias) == 0 {
		return skip("no proxy in the environment and no allowed host to relay through")
	}
	targets := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port)), net.JoinHostPort("localhost", strconv.Itoa(l.Port))}
	var tried []string
	for _, v := range vias {
		for _, t := range targets {
			ok, why := connectThrough(ctx, v.addr, v.auth, t, l.SHA256)
			if ok {
				return fail("CONNECT %s through %s reached the host's listener", t, v.addr)
			}
			tried = append(tried, fmt.Sprintf("via %s to %s: %s", v.addr, t, why))
		}
	}
	return pass("%s", strings.Join(tried, "; "))
}

// statusLine sends one HTTP/1.1 request with the given Host to addr and returns the status line.
func statusLine(ctx context.Context, addr, host string) (string, error) {
	d := net.Dialer{Timeout: attemptTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * attemptTimeout))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	line, err := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/") {
		if err == nil {
			err = errors.New("not an HTTP answer")
		}
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func netHostMismatch(ctx context.Context, env *Env) Verdict {
	if len(env.Canaries.Allowed) == 0 {
		return skip("no allowed endpoint given (cordon verify with a network policy passes them)")
	}
	var notes []string
	for _, e := range env.Canaries.Allowed {
		addr := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
		control, err := statusLine(ctx, addr, e.Host)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s does not answer plain HTTP (%s)", addr, shortErr(err)))
			continue
		}
		if refusal(control) {
			// A refusal cannot be told from the gateway's own: comparing it proves nothing.
			notes = append(notes, fmt.Sprintf("%s refuses even its own name (%q)", addr, control))
			continue
		}
		lie := deniedName(env, "host")
		got, err := statusLine(ctx, addr, lie)
		if err == nil && got == control {
			return fail("%s answered a request for Host %s like one for %s (%q): the Host was not checked", addr, lie, e.Host, got)
		}
		return pass("%s answered %q for its own name, and %s for Host %s", addr, control, errOr(err, strconv.Quote(got)), lie)
	}
	return skip("%s", strings.Join(notes, "; "))
}

// refusal reports whether a status line is one a gateway or proxy answers with when it refuses.
func refusal(status string) bool {
	f := strings.Fields(status)
	if len(f) < 2 {
		return true
	}
	switch f[1] {
	case "403", "407", "502", "503", "504":
		return true
	}
	return false
}

// countingConn counts the bytes a server sends.
type countingConn struct {
	net.Conn
	n int
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n += n
	return n, err
}

// helloAnswered sends a ClientHello for sni to addr and reports whether the server sent any byte.
func helloAnswered(ctx context.Context, addr, sni string) (bool, error) {
	d := net.Dialer{Timeout: attemptTimeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	cc := &countingConn{Conn: raw}
	defer cc.Close()
	cc.SetDeadline(time.Now().Add(2 * attemptTimeout))
	err = tls.Client(cc, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).HandshakeContext(ctx)
	return cc.n > 0, err
}

func netSNIMismatch(ctx context.Context, env *Env) Verdict {
	if len(env.Canaries.Allowed) == 0 {
		return skip("no allowed endpoint given (cordon verify with a network policy passes them)")
	}
	var notes []string
	for _, e := range env.Canaries.Allowed {
		addr := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
		if ok, err := helloAnswered(ctx, addr, e.Host); !ok {
			notes = append(notes, fmt.Sprintf("%s sent nothing back even for its own name (%v)", addr, err))
			continue
		}
		lie := deniedName(env, "sni")
		ok, err := helloAnswered(ctx, addr, lie)
		if ok {
			return fail("a ClientHello for %s sent to %s reached a server that answered", lie, addr)
		}
		return pass("%s answers a ClientHello for its own name; for %s: %v", addr, lie, err)
	}
	return skip("%s", strings.Join(notes, "; "))
}
