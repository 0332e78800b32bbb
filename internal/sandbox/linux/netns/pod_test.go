//go:build linux

package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/cordon-sandbox/cordon/internal/nstest"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// The pod's tests: a "pod" namespace joined to an "outside" one by a veth pair (as a pod is to its
// node), the gateway's listeners served by the test in the pod, and outside a listener of every kind
// that answers with what it is. The pod's processes are probed as root (a uid the rules do not
// exempt, which still holds CAP_NET_RAW, so what stops raw IP and ICMP is the rules), as the agent's
// uid and as the gateway's.

// Addresses of the pod's test network (private and documentation ranges only).
var (
	podAddr4, outAddr4 = netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
	podAddr6, outAddr6 = netip.MustParseAddr("fd99::1"), netip.MustParseAddr("fd99::2")
)

// podGatewayUID and podAgentUID are the uids the probes run as (the same as kubepod's, which this
// package does not import).
const (
	podGatewayUID = 15000
	podAgentUID   = 1000
)

// podNet is one pod and its outside.
type podNet struct {
	pod, out *nstest.NS
	probe    *testNS // the pod, for the in-process probes
	outRaw   net.PacketConn
	outHits  *atomic.Int64 // connections and datagrams the outside listeners received
	bin      string        // the test binary, where the probes' uids may execute it
}

// newPodNet makes a pod and its outside; with rules, InstallPod programs the pod, as the setup step
// does, from a thread inside it.
func newPodNet(t *testing.T, rules bool) *podNet {
	t.Helper()
	pod, out := nstest.New(t), nstest.New(t)
	nstest.Veth(t,
		pod, nstest.Link{Name: "eth0", Addrs: []netip.Prefix{netip.PrefixFrom(podAddr4, 24), netip.PrefixFrom(podAddr6, 64)},
			Gateways: []netip.Addr{outAddr4, outAddr6}},
		out, nstest.Link{Name: "node0", Addrs: []netip.Prefix{netip.PrefixFrom(outAddr4, 24), netip.PrefixFrom(outAddr6, 64)}})
	p := &podNet{pod: pod, out: out, probe: &testNS{path: pod.Path, fd: pod.FD(), timeout: probeTimeout}, outHits: &atomic.Int64{}, bin: nstest.Executable(t)}
	set, err := Listeners(pod.Path, testPorts())
	if err != nil {
		t.Fatalf("Listeners: %v", err)
	}
	t.Cleanup(func() { _ = set.Close() })
	serve(set)
	p.serveOutside(t)
	if rules {
		if err := pod.Do(func() error { return InstallPod(testPorts(), podGatewayUID) }); err != nil {
			conn, cerr := nftables.New(nftables.WithNetNSFd(pod.FD()))
			if cerr == nil {
				_, cerr = conn.ListTables()
			}
			if cerr != nil {
				t.Skipf("nf_tables is not available on this kernel (%v); InstallPod said: %v", cerr, err)
			}
			t.Fatalf("InstallPod: %v", err)
		}
		p.probe.timeout = landTimeout
	}
	return p
}

// serveOutside listens outside on TCP 8080 and 53 and UDP 9999 and 53, both families, answering
// "outside tcp ADDR" or "outside udp PAYLOAD", and receives raw IP protocol 253. The kernel answers
// pings itself.
func (p *podNet) serveOutside(t *testing.T) {
	t.Helper()
	err := p.out.Do(func() error {
		for _, a := range []netip.Addr{outAddr4, outAddr6} {
			for _, ports := range [][2]uint16{{8080, 9999}, {53, 53}} { // TCP, UDP
				l, err := net.Listen("tcp", netip.AddrPortFrom(a, ports[0]).String())
				if err != nil {
					return err
				}
				t.Cleanup(func() { _ = l.Close() })
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						p.outHits.Add(1)
						go func() {
							defer func() { _ = c.Close() }()
							_ = c.SetDeadline(time.Now().Add(5 * time.Second))
							r := bufio.NewReader(c)
							_, _ = r.ReadString('\n')
							_, _ = fmt.Fprintf(c, "HTTP/1.0 200 OK\r\n\r\noutside tcp %s\n", c.LocalAddr())
							_ = c.(*net.TCPConn).CloseWrite()
							_, _ = io.Copy(io.Discard, r)
						}()
					}
				}()
				if err := udpEcho(t, netip.AddrPortFrom(a, ports[1]), p.outHits); err != nil {
					return err
				}
			}
		}
		var err error
		p.outRaw, err = net.ListenPacket("ip4:253", outAddr4.String())
		return err
	})
	if err != nil {
		t.Fatalf("outside listeners: %v", err)
	}
	t.Cleanup(func() { _ = p.outRaw.Close() })
}

// udpAsk sends "probe" from inside n to addr and returns the answer, or how it failed.
func (n *testNS) udpAsk(addr string) string {
	var c net.Conn
	if err := n.do(nil, func() error {
		var err error
		c, err = net.Dial("udp", addr)
		return err
	}); err != nil {
		return errName(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte("probe")); err != nil {
		return errName(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(n.wait()))
	buf := make([]byte, 512)
	m, err := c.Read(buf)
	if err != nil {
		return errName(err)
	}
	return string(buf[:m])
}

// probeMain runs inside the pod (nstest.NS.Command, or a gVisor sandbox's helper) as some uid: each
// pair of arguments is a probe ("tcp ADDR", "udp ADDR" or "ping IP", each kind optionally with
// ":WAIT", how long it waits instead of landTimeout), and the results are printed as a JSON object
// keyed "KIND ADDR".
func probeMain(args []string) int {
	probes := map[string]func() string{}
	for i := 0; i+1 < len(args); i += 2 {
		kind, addr := args[i], args[i+1]
		n := &testNS{fd: -1, timeout: landTimeout}
		if k, wait, ok := strings.Cut(kind, ":"); ok {
			d, err := time.ParseDuration(wait)
			if err != nil {
				fmt.Fprintf(os.Stderr, "probe %q: %v\n", kind, err)
				return 2
			}
			kind, n.timeout = k, d
		}
		switch kind {
		case "tcp":
			probes[kind+" "+addr] = func() string { return n.tcpProbe(nil, addr) }
		case "udp":
			probes[kind+" "+addr] = func() string { return n.udpAsk(addr) }
		case "ping":
			probes[kind+" "+addr] = func() string { return n.pingDgram(addr) }
		default:
			fmt.Fprintf(os.Stderr, "unknown probe %q\n", kind)
			return 2
		}
	}
	got := parallel(probes)
	got["uid"] = fmt.Sprint(os.Getuid())
	if err := json.NewEncoder(os.Stdout).Encode(got); err != nil {
		return 2
	}
	return 0
}

// pingDgram sends an ICMP echo request from an unprivileged ICMP socket (SOCK_DGRAM, which
// gVisor gives every uid) to ip and waits for the reply.
func (n *testNS) pingDgram(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return err.Error()
	}
	network, laddr, proto := "udp4", "0.0.0.0", 1
	var req, rep icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if addr.Is6() {
		network, laddr, proto = "udp6", "::", 58
		req, rep = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	c, err := icmp.ListenPacket(network, laddr)
	if err != nil {
		return errName(err)
	}
	defer func() { _ = c.Close() }()
	return n.echo(c, &net.UDPAddr{IP: addr.AsSlice()}, proto, req, rep)
}

// probeAs runs probeMain in the pod as uid and returns its results.
func (p *podNet) probeAs(t *testing.T, uid int, probes ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*landTimeout)
	defer cancel()
	cmd := p.pod.Command(ctx, uid, uid, append([]string{p.bin}, probes...)...)
	cmd.Env = append(cmd.Env, envChild+"=probe", noRaceExitDelay)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probes as uid %d: %v (stderr: %s)", uid, err, stderr.String())
	}
	var res map[string]string
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	if res["uid"] != fmt.Sprint(uid) {
		t.Fatalf("probes ran as uid %s, want %d", res["uid"], uid)
	}
	return res
}

// Every uid but the gateway's has its TCP connections (either family, any address) land on the
// transparent listener and its DNS (UDP and TCP, to any address) on the DNS sockets; UDP to other
// ports reaches nothing. The gateway's uid reaches the outside directly, DNS included. In a pod
// without the rules the same probes reach the outside, so each can fail.
func TestPodRedirectsAllButTheGateway(t *testing.T) {
	with, without := newPodNet(t, true), newPodNet(t, false)
	tcp4, tcp6 := netip.AddrPortFrom(outAddr4, 8080).String(), netip.AddrPortFrom(outAddr6, 8080).String()
	udp4, udp6 := netip.AddrPortFrom(outAddr4, 9999).String(), netip.AddrPortFrom(outAddr6, 9999).String()
	dns4, dns6 := netip.AddrPortFrom(outAddr4, 53).String(), netip.AddrPortFrom(outAddr6, 53).String()
	probes := []string{"tcp", tcp4, "tcp", tcp6, "udp", udp4, "udp", udp6, "udp", dns4, "udp", dns6, "tcp", dns4}
	agent := map[string]string{
		"tcp " + tcp4: "transparent " + tcp4,
		"tcp " + tcp6: "transparent " + tcp6,
		"udp " + udp4: "EPERM",
		"udp " + udp6: "EPERM",
		"udp " + dns4: "dns-udp probe",
		"udp " + dns6: "dns-udp probe",
		"tcp " + dns4: "dns-tcp " + dns4,
	}
	gateway := map[string]string{
		"tcp " + tcp4: "outside tcp " + tcp4,
		"tcp " + tcp6: "outside tcp " + tcp6,
		"udp " + udp4: "outside udp probe",
		"udp " + udp6: "outside udp probe",
		"udp " + dns4: "outside udp probe",
		"udp " + dns6: "outside udp probe",
		"tcp " + dns4: "outside tcp " + dns4,
	}
	for _, c := range []struct {
		name string
		uid  int
		want map[string]string
	}{{"agent", podAgentUID, agent}, {"root", 0, agent}, {"gateway", podGatewayUID, gateway}} {
		t.Run(c.name, func(t *testing.T) {
			got := with.probeAs(t, c.uid, append(probes, "tcp", "127.0.0.1:8080", "tcp", "[::1]:8080")...)
			for k, w := range c.want {
				if got[k] != w {
					t.Errorf("uid %d, %s: got %q, want %q", c.uid, k, got[k], w)
				}
			}
			// Loopback stays loopback (the pod's own servers; nothing listens there here).
			for _, k := range []string{"tcp 127.0.0.1:8080", "tcp [::1]:8080"} {
				if got[k] != "ECONNREFUSED" {
					t.Errorf("uid %d, %s: got %q, want ECONNREFUSED (loopback is not redirected)", c.uid, k, got[k])
				}
			}
			if c.uid == podGatewayUID {
				return
			}
			// Without the rules every probe of the other uids reaches the outside: the rules are what
			// turns it round.
			got = without.probeAs(t, c.uid, probes...)
			for k := range c.want {
				if !strings.HasPrefix(got[k], "outside") {
					t.Errorf("without rules, uid %d, %s: got %q, want the outside's answer (else the probe cannot fail)", c.uid, k, got[k])
				}
			}
		})
	}
}

// What is neither TCP nor DNS is dropped as it leaves the socket, whatever the uid (root's raw
// sockets included): ICMP echo of either family, raw IP. Without the rules each reaches the outside.
func TestPodDropsEverythingElse(t *testing.T) {
	with, without := newPodNet(t, true), newPodNet(t, false)
	probes := map[string]func(p *podNet) string{
		"icmp echo outside":   func(p *podNet) string { return p.probe.pingProbe(t, outAddr4) },
		"icmpv6 echo outside": func(p *podNet) string { return p.probe.pingProbe(t, outAddr6) },
		"raw ip proto 253":    func(p *podNet) string { return p.probe.rawProbe(t, p.outRaw) },
		"icmp echo loopback":  func(p *podNet) string { return p.probe.pingProbe(t, netip.MustParseAddr("127.0.0.1")) },
		// Neighbour discovery passes for the kernel's sake, with the hop limit ND always has; a
		// message of an ND type sent with another leaves nothing.
		"icmpv6 neighbor solicitation, hop limit 64": func(p *podNet) string { return p.probe.ndProbe(outAddr6, 64) },
	}
	run := map[string]func() string{}
	for k, f := range probes {
		run["with "+k] = func() string { return f(with) }
		run["without "+k] = func() string { return f(without) }
	}
	got := parallel(run)
	for k := range probes {
		if g := got["with "+k]; g != "EPERM" {
			t.Errorf("with rules, %s: got %q, want EPERM (dropped on output)", k, g)
		}
		if g := got["without "+k]; g != "echo reply" && g != "received" && g != "sent" {
			t.Errorf("without rules, %s: got %q; the probe cannot show the rules are what stops it", k, g)
		}
	}
}

// ndProbe sends an ICMPv6 message of a neighbour discovery type (a neighbour solicitation for
// target) from a raw socket with the given hop limit, and reports whether it left the socket.
func (n *testNS) ndProbe(target netip.Addr, hops int) string {
	var c *icmp.PacketConn
	if err := n.do(nil, func() error {
		var err error
		c, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		return err
	}); err != nil {
		return errName(err)
	}
	defer func() { _ = c.Close() }()
	if err := c.IPv6PacketConn().SetHopLimit(hops); err != nil {
		return errName(err)
	}
	t16 := target.As16()
	msg := icmp.Message{Type: ipv6.ICMPTypeNeighborSolicitation, Body: &icmp.RawBody{Data: append(make([]byte, 4), t16[:]...)}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return "marshal: " + err.Error()
	}
	if _, err := c.WriteTo(b, &net.IPAddr{IP: target.AsSlice()}); err != nil {
		return errName(err)
	}
	return "sent"
}

// Nothing from outside starts a connection into the pod, though answers to the gateway's come in:
// a server in the pod listening on every address is out of reach from the node, and reachable
// without the rules.
func TestPodTakesNothingIn(t *testing.T) {
	for _, rules := range []bool{true, false} {
		p := newPodNet(t, rules)
		var l net.Listener
		if err := p.pod.Do(func() error {
			var err error
			l, err = net.Listen("tcp", ":8081")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		// Where the rules drop the SYN, a second shows it; where they are absent, the connection
		// must not be cut short by a loaded machine.
		outside := &testNS{fd: p.out.FD(), timeout: landTimeout}
		if rules {
			outside.timeout = time.Second
		}
		got := map[string]string{}
		for _, a := range []netip.Addr{podAddr4, podAddr6} {
			addr := netip.AddrPortFrom(a, 8081).String()
			err := outside.do(t, func() error {
				c, err := net.DialTimeout("tcp", addr, outside.wait())
				if err == nil {
					_ = c.Close()
				}
				return err
			})
			got[addr] = errName(err)
		}
		_ = l.Close()
		for addr, g := range got {
			if rules && g != "timeout" {
				t.Errorf("with rules, the node connecting to the pod's %s: got %q, want timeout (dropped on input)", addr, g)
			}
			if !rules && g != "ok" {
				t.Errorf("without rules, the node connecting to the pod's %s: got %q (else the probe cannot fail)", addr, g)
			}
		}
	}
}

// The pod's ruleset reads back as podRuleset writes it, differs from the sandbox's, and InstallPod
// refuses to exempt root or take bad ports before it touches any namespace.
func TestInstallPodVerifiesAndRefuses(t *testing.T) {
	p := newPodNet(t, true)
	conn, err := nftables.New(nftables.WithNetNSFd(p.pod.FD()))
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyRules(conn, podRuleset(testPorts(), podGatewayUID)); err != nil {
		t.Errorf("the pod's rules do not read back: %v", err)
	}
	if err := verifyRules(conn, podRuleset(testPorts(), podGatewayUID+1)); err == nil {
		t.Error("verification accepted the pod's rules with another exempt uid")
	}
	if err := verifyRules(conn, ruleset(testPorts())); err == nil {
		t.Error("verification accepted the pod's rules as the sandbox's")
	}
	// Installing again replaces the table.
	if err := p.pod.Do(func() error { return InstallPod(testPorts(), podGatewayUID) }); err != nil {
		t.Fatalf("InstallPod again: %v", err)
	}
	for _, c := range []struct {
		ports sandbox.EgressPorts
		uid   uint32
		want  string
	}{{testPorts(), 0, "uid 0"}, {sandbox.EgressPorts{}, podGatewayUID, "ports"}} {
		// In a namespace of its own, so that a regression cannot program the test's.
		n := nstest.New(t)
		err := n.Do(func() error { return InstallPod(c.ports, c.uid) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("InstallPod(%+v, %d): %v, want an error about %s", c.ports, c.uid, err, c.want)
		}
		if conn, err := nftables.New(nftables.WithNetNSFd(n.FD())); err == nil {
			if tables, _ := conn.ListTables(); len(tables) != 0 {
				t.Errorf("a refused InstallPod left %d tables", len(tables))
			}
		}
	}
}

// ListenersHere makes the same sockets as Listeners, in the namespace of the thread that calls it
// (the pod's gateway runs in the namespace it serves): both families, every role.
func TestListenersHere(t *testing.T) {
	n := nstest.New(t)
	var set *sandbox.Listeners
	if err := n.Do(func() error {
		var err error
		set, err = ListenersHere(testPorts())
		return err
	}); err != nil {
		t.Fatalf("ListenersHere: %v", err)
	}
	t.Cleanup(func() { _ = set.Close() })
	if len(set.Transparent) != 2 || len(set.Proxy) != 2 || len(set.DNSTCP) != 2 || len(set.DNSUDP) != 2 {
		t.Fatalf("want IPv4 and IPv6 sockets for each role, got %+v", set)
	}
	serve(set)
	probe := &testNS{path: n.Path, fd: n.FD(), timeout: landTimeout}
	// Without rules there is no conntrack entry to read an original destination from: the role
	// that answered is what counts.
	for addr, want := range map[string]string{"127.0.0.1:3128": "proxy ", "[::1]:15001": "transparent "} {
		if got := probe.tcpProbe(t, addr); !strings.HasPrefix(got, want) {
			t.Errorf("%s: got %q, want the %slistener", addr, got, want)
		}
	}
	if got := probe.udpProbe(t, "127.0.0.1:53", nil); got != "dns-udp probe" {
		t.Errorf("DNS over UDP: got %q", got)
	}
	if _, err := ListenersHere(sandbox.EgressPorts{}); err == nil {
		t.Error("ListenersHere took bad ports")
	}
}

// udpEcho answers every datagram to at with "outside udp " and what it said, counting them in hits,
// until the test ends.
func udpEcho(t *testing.T, at netip.AddrPort, hits *atomic.Int64) error {
	pc, err := net.ListenPacket("udp", at.String())
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			hits.Add(1)
			_, _ = pc.WriteTo(append([]byte("outside udp "), buf[:n]...), from)
		}
	}()
	return nil
}
