//go:build linux

package netns

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Every TCP connection, to any address and port, of either family, lands on the transparent listener
// served from outside, and OrigDst reports what the client asked for. In a sibling namespace with the
// same listeners and routes but no rules, none of them does.
func TestEveryTCPConnectionLandsOnTheGateway(t *testing.T) {
	with, without := sandboxNS(t, true), sandboxNS(t, false)
	p := testPorts()
	want := map[string]string{
		"198.18.0.5:443":   "transparent 198.18.0.5:443",
		"1.1.1.1:80":       "transparent 1.1.1.1:80",
		"[fd00::1]:22":     "transparent [fd00::1]:22",
		"[2001:db8::7]:25": "transparent [2001:db8::7]:25",
		// An IPv6 socket reaching an IPv4 address takes the IPv4 path, and is redirected there.
		"[::ffff:1.1.1.1]:80": "transparent 1.1.1.1:80",
		// The gateway's own ports on loopback are left alone: the explicit proxy stays the proxy, and a
		// direct connection to the transparent port shows itself as such.
		fmt.Sprintf("127.0.0.1:%d", p.Proxy):       "proxy 127.0.0.1:3128",
		fmt.Sprintf("[::1]:%d", p.Proxy):           "proxy [::1]:3128",
		fmt.Sprintf("127.0.0.1:%d", p.Transparent): "transparent 127.0.0.1:15001",
	}
	probes := map[string]func() string{}
	for addr := range want {
		probes["with "+addr] = func() string { return with.tcpProbe(t, addr) }
		probes["without "+addr] = func() string { return without.tcpProbe(t, addr) }
	}
	got := parallel(probes)
	for addr, w := range want {
		if g := got["with "+addr]; g != w {
			t.Errorf("with rules, connect to %s: got %q, want %q", addr, g, w)
		}
		// Without rules a connection to the gateway's own port of course reaches it; every other one
		// must not land on the transparent listener.
		if g := got["without "+addr]; strings.HasPrefix(g, "transparent") && !strings.HasSuffix(addr, fmt.Sprint(p.Transparent)) {
			t.Errorf("without rules, connect to %s landed on the gateway (%q): the probe cannot tell the rules work", addr, g)
		}
	}
	t.Logf("without rules: %v", got)
}

// Real clients, run inside as the agent is (root in the namespace, no CAP_NET_ADMIN), reach the
// transparent listener whatever address they were given; without the rules they fail.
func TestRealClientsLandOnTheGateway(t *testing.T) {
	with, without := sandboxNS(t, true), sandboxNS(t, false)
	type client struct {
		argv []string
		want string
	}
	var clients []client
	if _, err := os.Stat("/usr/bin/curl"); err == nil {
		clients = append(clients,
			client{[]string{"/usr/bin/curl", "-sS", "--max-time", "5", "http://1.1.1.1/"}, "transparent 1.1.1.1:80"},
			client{[]string{"/usr/bin/curl", "-sS", "-g", "--max-time", "5", "http://[fd00::1]:22/"}, "transparent [fd00::1]:22"},
		)
	}
	if _, err := os.Stat("/bin/bash"); err == nil {
		clients = append(clients, client{[]string{"/bin/bash", "-c",
			`exec 3<>/dev/tcp/198.18.0.5/443 && printf 'GET / HTTP/1.0\r\n\r\n' >&3 && tail -n 1 <&3`},
			"transparent 198.18.0.5:443"})
	}
	if len(clients) == 0 {
		t.Skip("neither curl nor bash is installed")
	}
	probes := map[string]func() string{}
	for i, c := range clients {
		probes[fmt.Sprint("with ", i)] = func() string {
			out, err := with.run(t, 10*time.Second, true, "", c.argv...)
			return fmt.Sprintf("%s %v", strings.TrimSpace(out), err)
		}
		// Without the rules the connection goes nowhere; a second is plenty to show it.
		probes[fmt.Sprint("without ", i)] = func() string {
			out, err := without.run(t, time.Second, true, "", c.argv...)
			return fmt.Sprintf("%s %v", strings.TrimSpace(out), err)
		}
	}
	got := parallel(probes)
	for i, c := range clients {
		if g := got[fmt.Sprint("with ", i)]; g != c.want+" <nil>" {
			t.Errorf("with rules, %v: got %q, want %q", c.argv, g, c.want)
		}
		if g := got[fmt.Sprint("without ", i)]; strings.HasSuffix(g, "<nil>") || strings.Contains(g, "transparent") {
			t.Errorf("without rules, %v succeeded (%q): the probe cannot tell the rules work", c.argv, g)
		}
	}
}

// DNS over UDP and TCP to any address lands on the DNS sockets, and the UDP answer comes back as if
// from the address asked (a connected socket accepts nothing else).
func TestDNSLandsOnTheGateway(t *testing.T) {
	with, without := sandboxNS(t, true), sandboxNS(t, false)
	want := map[string]string{
		"udp 1.1.1.1:53":       "dns-udp probe",
		"udp [fd00::53]:53":    "dns-udp probe",
		"udp 127.0.0.53:53":    "dns-udp probe",
		"tcp 1.1.1.1:53":       "dns-tcp 1.1.1.1:53",
		"tcp [2001:db8::1]:53": "dns-tcp [2001:db8::1]:53",
	}
	probes := map[string]func() string{}
	for k := range want {
		proto, addr, _ := strings.Cut(k, " ")
		probe := func(n *testNS) string {
			if proto == "udp" {
				return n.udpProbe(t, addr, nil)
			}
			return n.tcpProbe(t, addr)
		}
		probes["with "+k] = func() string { return probe(with) }
		probes["without "+k] = func() string { return probe(without) }
	}
	got := parallel(probes)
	for k, w := range want {
		if g := got["with "+k]; g != w {
			t.Errorf("with rules, %s: got %q, want %q", k, g, w)
		}
		if g := got["without "+k]; strings.HasPrefix(g, "dns-") {
			t.Errorf("without rules, %s reached the DNS sockets (%q): the probe cannot tell the rules work", k, g)
		}
	}
	t.Logf("without rules: %v", got)
}

// Everything that is not TCP or DNS is dropped as it leaves the socket (EPERM), for both families:
// UDP to other ports, ICMP echo, raw IP. The same probes succeed in the sibling without the rules,
// where a receiver in the namespace gets the datagram, or at least the datagram leaves the socket.
func TestEverythingElseIsDropped(t *testing.T) {
	with, without := sandboxNS(t, true), sandboxNS(t, false)
	type receivers struct{ udp4, udp6, raw net.PacketConn }
	recv := map[*testNS]receivers{}
	for _, n := range []*testNS{with, without} {
		recv[n] = receivers{
			udp4: n.listenPacket(t, "udp4", "127.0.0.1:9999"),
			udp6: n.listenPacket(t, "udp6", "[::1]:9999"),
			raw:  n.listenPacket(t, "ip4:253", "127.0.0.1"),
		}
	}
	probes := map[string]func(n *testNS) string{
		"udp 1.1.1.1:9999":        func(n *testNS) string { return n.udpProbe(t, "1.1.1.1:9999", nil) },
		"udp [fd00::1]:9999":      func(n *testNS) string { return n.udpProbe(t, "[fd00::1]:9999", nil) },
		"icmp echo 127.0.0.1":     func(n *testNS) string { return n.pingProbe(t, netip.MustParseAddr("127.0.0.1")) },
		"icmpv6 echo ::1":         func(n *testNS) string { return n.pingProbe(t, netip.IPv6Loopback()) },
		"raw ip proto 253 to lo":  func(n *testNS) string { return n.rawProbe(t, recv[n].raw) },
		"icmp echo 198.18.0.5":    func(n *testNS) string { return n.pingProbe(t, netip.MustParseAddr("198.18.0.5")) },
		"icmpv6 echo 2001:db8::1": func(n *testNS) string { return n.pingProbe(t, netip.MustParseAddr("2001:db8::1")) },
	}
	// Without rules, what "succeeds" means: a receiver got it, the kernel answered the ping, or (for an
	// address nothing in the namespace owns) it left the socket and timed out waiting for an answer.
	succeeded := map[string]bool{"received": true, "echo reply": true, "sent": true}
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
		g := got["without "+k]
		if !succeeded[g] && !(strings.HasPrefix(k, "icmp") && g == "timeout") {
			t.Errorf("without rules, %s: got %q; the probe cannot show the rules are what stops it", k, g)
		}
	}
	t.Logf("without rules: %v", got)
}

// Loopback stays inside: the agent's own servers on 127.0.0.1 and ::1 are reached directly, over TCP
// and UDP, and never through the gateway.
func TestLoopbackStaysInside(t *testing.T) {
	with := sandboxNS(t, true)
	udp4 := with.listenPacket(t, "udp4", "127.0.0.1:9999")
	udp6 := with.listenPacket(t, "udp6", "[::1]:9999")
	got := parallel(map[string]func() string{
		"tcp 127.0.0.1:8080": func() string { return with.tcpProbe(t, "127.0.0.1:8080") },
		"tcp [::1]:8080":     func() string { return with.tcpProbe(t, "[::1]:8080") },
		"tcp 127.0.0.2:8080": func() string { return with.tcpProbe(t, "127.0.0.2:8080") },
		"udp 127.0.0.1:9999": func() string { return with.udpProbe(t, "127.0.0.1:9999", udp4) },
		"udp [::1]:9999":     func() string { return with.udpProbe(t, "[::1]:9999", udp6) },
	})
	for k, g := range got {
		if strings.HasPrefix(k, "tcp") && strings.HasPrefix(g, "transparent") {
			t.Errorf("%s went to the gateway (%q); loopback must stay inside", k, g)
		}
		if strings.HasPrefix(k, "udp") && g != "received" {
			t.Errorf("%s: got %q, want received", k, g)
		}
	}
}

// A connection to an address the gateway's DNS hands out leaves from a global-scope source of its own
// family, so resolvers that sort by RFC 6724 (glibc's getaddrinfo, Go's) try the name's IPv4 address
// first: with 127.0.0.1 as the IPv4 source, its loopback scope would not match the destination's
// (rule 2) and the IPv6 address would win, which costs every connection the slower IPv6 path through
// the redirect. Loopback destinations keep their loopback source.
func TestSourceAddressesAreGlobalScope(t *testing.T) {
	n := sandboxNS(t, true)
	for _, c := range []struct{ dst, want string }{
		{"198.18.0.1:80", "192.0.2.1"},
		{"[fd12:3456:789a::1]:80", "2001:db8::1"},
		{"127.0.0.2:80", "127.0.0.1"},
		{"[::1]:80", "::1"},
	} {
		var src string
		if err := n.do(t, func() error {
			// A connected UDP socket sends nothing: connect only picks the route and the source.
			c, err := net.Dial("udp", c.dst)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			src = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().String()
			return nil
		}); err != nil {
			t.Fatalf("connect to %s: %v", c.dst, err)
		}
		if src != c.want {
			t.Errorf("to %s the source is %s, want %s", c.dst, src, c.want)
		}
	}
}

// The agent, root in the namespace but without CAP_NET_ADMIN, cannot insert a rule, change a policy,
// delete the table, flush the ruleset or remove the routes; the same process with CAP_NET_ADMIN can,
// which is what makes the test able to fail.
func TestAgentCannotChangeTheRules(t *testing.T) {
	attack := func(n *testNS, dropCaps bool) map[string]string {
		out, err := n.run(t, 10*time.Second, dropCaps, "attack", os.Args[0])
		if err != nil {
			t.Fatalf("attack: %v", err)
		}
		var res map[string]string
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("attack output %q: %v", out, err)
		}
		return res
	}
	attempts := []string{"insert accept rule", "set policy accept", "delete table", "flush ruleset", "delete default route"}

	agent := sandboxNS(t, true)
	res := attack(agent, true)
	if res["uid"] != "0" || res["net_admin"] != "no" {
		t.Fatalf("the attacker should be root without CAP_NET_ADMIN: %v", res)
	}
	for _, a := range attempts {
		if res[a] != "EPERM" {
			t.Errorf("agent without CAP_NET_ADMIN: %s: got %q, want EPERM", a, res[a])
		}
	}
	if err := verifyInstalled(agent); err != nil {
		t.Errorf("rules changed by the agent: %v", err)
	}
	if g := agent.udpProbe(t, "1.1.1.1:9999", nil); g != "EPERM" {
		t.Errorf("after the attack, UDP out: got %q, want EPERM", g)
	}

	admin := sandboxNS(t, true)
	res = attack(admin, false)
	if res["net_admin"] != "yes" {
		t.Fatalf("the comparison attacker should have CAP_NET_ADMIN: %v", res)
	}
	for _, a := range attempts {
		if res[a] != "ok" {
			t.Errorf("with CAP_NET_ADMIN, %s: got %q, want ok (else the test cannot fail)", a, res[a])
		}
	}
	if err := verifyInstalled(admin); err == nil {
		t.Errorf("with CAP_NET_ADMIN the attack should have removed the rules")
	}
}

// verifyInstalled reads the namespace's ruleset and compares it with what Install writes.
func verifyInstalled(n *testNS) error {
	conn, err := nftables.New(nftables.WithNetNSFd(n.fd))
	if err != nil {
		return err
	}
	return verifyRules(conn, ruleset(testPorts()))
}

// Installing again, even with other ports first, leaves exactly one table with exactly the rules of
// the last call, and traffic still flows.
func TestInstallIsIdempotent(t *testing.T) {
	n := sandboxNS(t, true)
	other := sandbox.EgressPorts{Transparent: 15002, Proxy: 3129, DNS: 5353}
	for _, p := range []sandbox.EgressPorts{testPorts(), other, testPorts()} {
		if err := Install(n.path, p); err != nil {
			t.Fatalf("Install(%+v) again: %v", p, err)
		}
	}
	if err := verifyInstalled(n); err != nil {
		t.Fatalf("after reinstalling: %v", err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(n.fd))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := conn.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Name != TableName {
		t.Errorf("want only table %s, got %d tables", TableName, len(tables))
	}
	if g := n.tcpProbe(t, "1.1.1.1:80"); g != "transparent 1.1.1.1:80" {
		t.Errorf("after reinstalling, connect to 1.1.1.1:80: got %q", g)
	}
	// The verification is not a formality: a ruleset that differs from the one expected fails it.
	if err := verifyRules(conn, ruleset(other)); err == nil {
		t.Errorf("verification accepted a ruleset with other ports")
	}
}

// A namespace without IPv6 gets IPv4 sockets only, and the install still succeeds; IPv6 then goes
// nowhere at all.
func TestNamespaceWithoutIPv6(t *testing.T) {
	n := newNS(t, envNoIPv6+"=1")
	set, err := Listeners(n.path, testPorts())
	if err != nil {
		t.Fatalf("Listeners: %v", err)
	}
	t.Cleanup(func() { _ = set.Close() })
	if len(set.Transparent) != 1 || len(set.Proxy) != 1 || len(set.DNSTCP) != 1 || len(set.DNSUDP) != 1 {
		t.Fatalf("want IPv4 sockets only, got %+v", set)
	}
	serve(set)
	installOrSkip(t, n)
	if g := n.tcpProbe(t, "1.1.1.1:80"); g != "transparent 1.1.1.1:80" {
		t.Errorf("connect to 1.1.1.1:80: got %q", g)
	}
	if g := n.tcpProbe(t, "[fd00::1]:22"); strings.HasPrefix(g, "transparent") || g == "timeout" {
		t.Errorf("connect to [fd00::1]:22 without IPv6: got %q, want an immediate error", g)
	} else {
		t.Logf("IPv6 connect without IPv6: %s", g)
	}
}

// A path that is not (or no longer) a network namespace is an error, never the host's namespace.
func TestBadNamespacePaths(t *testing.T) {
	bad := map[string]string{
		"missing":     filepath.Join(t.TempDir(), "no-such-namespace"),
		"regular":     "/proc/self/status",
		"mount ns":    "/proc/self/ns/mnt",
		"empty":       "",
		"a directory": t.TempDir(),
	}
	if os.Geteuid() == 0 {
		n := newNS(t)
		gone := n.path
		// Let the holder go and wait for its /proc entry to disappear.
		if err := unix.Kill(n.pid, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for _, err := os.Stat(gone); err == nil && time.Now().Before(deadline); _, err = os.Stat(gone) {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(n.pid, &ws, unix.WNOHANG, nil)
			time.Sleep(10 * time.Millisecond)
		}
		bad["dead process"] = gone
	}
	for name, path := range bad {
		if err := Install(path, testPorts()); err == nil {
			t.Errorf("Install into %s (%q) succeeded", name, path)
		}
		if set, err := Listeners(path, testPorts()); err == nil {
			_ = set.Close()
			t.Errorf("Listeners in %s (%q) succeeded", name, path)
		}
	}
	// Bad ports are refused before any namespace is opened (a path that does not exist, so that a
	// regression here can never program the host's own namespace).
	for _, p := range []sandbox.EgressPorts{{}, {Transparent: 1, Proxy: 1, DNS: 53}, {Transparent: 1, Proxy: 2, DNS: 2}} {
		if err := Install("/nonexistent", p); err == nil || !strings.Contains(err.Error(), "ports") {
			t.Errorf("Install with ports %+v: got %v, want a ports error", p, err)
		}
	}
}

// Listeners hands every thread back in the namespace it came from: after many calls no thread of the
// test process is left in a sandbox's namespace.
func TestThreadsReturnToTheirNamespace(t *testing.T) {
	n := newNS(t)
	mine, err := threadNSID()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		set, err := Listeners(n.path, testPorts())
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		var st unix.Stat_t
		if err := unix.Stat(task, &st); err != nil {
			continue // the thread exited meanwhile
		}
		if (nsID{st.Dev, st.Ino}) != mine {
			t.Errorf("%s is in another network namespace", task)
		}
	}
}

// A thread that cannot get back to its namespace is never reused: its goroutine exits still locked,
// and the runtime terminates it. The probe is the thread's /proc entry, which would remain if the
// thread were handed back to the scheduler.
func TestThreadThatCannotReturnIsDiscarded(t *testing.T) {
	n := newNS(t)
	var tid int
	// If the goroutine happens to run on the process's main thread, the runtime cannot end that thread
	// and wedges it instead (equally never reused, but it stays in /proc); try again, which then lands
	// on another thread.
	for attempt := 0; attempt < 3 && (attempt == 0 || tid == os.Getpid()); attempt++ {
		calls := 0
		failReturn := func(fd int) error {
			calls++
			if calls == 1 {
				return unix.Setns(fd, unix.CLONE_NEWNET)
			}
			return errors.New("simulated failure to return")
		}
		err := inNetNSWith(n.fd, func() error { tid = unix.Gettid(); return nil }, failReturn)
		if err == nil {
			t.Fatal("inNetNSWith succeeded although the thread could not return")
		}
	}
	if tid == os.Getpid() {
		t.Fatal("the failing call ran on the main thread three times")
	}
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d, stuck in the sandbox's namespace, is still alive", tid)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The comparison: a thread that returned normally stays alive for reuse, so the probe can fail.
	if err := inNetNS(n.fd, func() error { tid = unix.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
		t.Errorf("a thread that returned cleanly was discarded too (%v): the probe cannot tell", err)
	}
}

// TestListenBacklogAbsorbsBursts checks that the transparent listener's accept queue holds a burst
// of connections well beyond the kernel's default somaxconn (4096), which a new namespace starts
// with: nothing accepts them, yet every connection completes its handshake. A listener in the same
// namespace made with the old backlog of 4096 fills up, so the test can tell.
func TestListenBacklogAbsorbsBursts(t *testing.T) {
	const burst = 5000
	n := newNS(t)
	set, err := Listeners(n.path, testPorts())
	if err != nil {
		t.Fatalf("Listeners: %v", err)
	}
	defer set.Close()
	var small int
	err = n.do(t, func() error {
		b, err := os.ReadFile(somaxconnPath)
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(b)); got != strconv.Itoa(listenBacklog) {
			return fmt.Errorf("somaxconn in the namespace is %s, want %d", got, listenBacklog)
		}
		small, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.Bind(small, &unix.SockaddrInet4{Port: 15002, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		return unix.Listen(small, 4096)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(small)
	var conns []int
	defer func() {
		for _, fd := range conns {
			_ = unix.Close(fd)
		}
	}()
	// connected counts how many of burst connections to port complete without being accepted.
	connected := func(port int) int {
		done := 0
		err := n.do(t, func() error {
			for range burst {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
				if err != nil {
					return err
				}
				conns = append(conns, fd)
				err = unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
				if err != nil && !errors.Is(err, unix.EINPROGRESS) {
					return err
				}
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
				if k, err := unix.Poll(pfd, 300); err != nil || k == 0 {
					return nil // the SYN was dropped: the queue is full
				}
				if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
					return fmt.Errorf("connection %d: %v %v", done, err, unix.Errno(soerr))
				}
				done++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	if got := connected(15002); got >= burst {
		t.Fatalf("a listener with a backlog of 4096 took all %d connections: the test cannot tell", got)
	} else {
		t.Logf("backlog 4096: %d of %d connections completed", got, burst)
	}
	if got := connected(int(testPorts().Transparent)); got != burst {
		t.Errorf("the transparent listener's queue took %d of %d connections", got, burst)
	}
}
