//go:build linux

package main

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Issue 11, items 9-11: how the gateway resolves the names it allows (exactly those names, never with
// the host's search list), when it resolves a name under a wildcard (only when the sandbox connects to
// it), and what network.tls.inspect adds to a host that would pass through (the Host must be the SNI).

// question is one query a recordingResolver got.
type question struct{ name, qtype string }

// recordingResolver is a DNS server on the host's loopback (UDP and TCP) that records every question
// and answers each A query with 127.0.0.1, or with answers[name] when the name is there.
type recordingResolver struct {
	addr string
	mu   sync.Mutex
	seen []question
}

func newRecordingResolver(t *testing.T, addr string, answers map[string]net.IP) *recordingResolver {
	t.Helper()
	// UDP and TCP on one port: with port 0 the kernel picks a free UDP port whose TCP twin may be
	// taken, so a few picks are tried.
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	for try := 0; try < 20; try++ {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if !strings.HasSuffix(addr, ":0") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingResolver{addr: pc.LocalAddr().String()}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			r.mu.Lock()
			r.seen = append(r.seen, question{strings.ToLower(qq.Name), dns.TypeToString[qq.Qtype]})
			r.mu.Unlock()
			if qq.Qtype != dns.TypeA {
				continue
			}
			ip, ok := answers[strings.ToLower(qq.Name)]
			if !ok {
				ip = net.IPv4(127, 0, 0, 1)
			}
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: ip})
		}
		_ = w.WriteMsg(m)
	})
	udp := &dns.Server{PacketConn: pc, Handler: handler}
	tcp := &dns.Server{Listener: ln, Handler: handler}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	t.Cleanup(func() { _ = udp.Shutdown(); _ = tcp.Shutdown() })
	return r
}

func (r *recordingResolver) questions() []question {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// count is how many questions of type qtype (any type when "") named name ("x.test.", rooted).
func (r *recordingResolver) count(name, qtype string) int {
	n := 0
	for _, q := range r.questions() {
		if q.name == name && (qtype == "" || q.qtype == qtype) {
			n++
		}
	}
	return n
}

// loopbackDNSAddr is a random address in 127.0.0.0/8 (not 127.0.0.1, which the host's own resolver
// may hold), port 53: resolv.conf's nameserver lines take no port.
func loopbackDNSAddr(t *testing.T) string {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.53.%d.%d:53", b[0], 1+b[1]%250)
}

// sandboxedWithResolvConf is h.sandboxed with cordon seeing resolvConf as /etc/resolv.conf: it runs in
// a mount namespace of its own where a file is bound over it, so the host's file is never touched. It
// needs root (the rootless identity is entered with setpriv after the mount).
func (h *harness) sandboxedWithResolvConf(resolvConf, policyBody, script string) result {
	h.t.Helper()
	conf := filepath.Join(h.base, "resolv.conf")
	h.writeFile(conf, resolvConf, 0o644)
	args := []string{"--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$1" /etc/resolv.conf && shift && exec "$@"`, "sh", conf}
	if h.who.uid != 0 {
		args = append(args, "setpriv", "--reuid="+strconv.Itoa(h.who.uid), "--regid="+strconv.Itoa(h.who.gid), "--clear-groups", "--")
	}
	args = append(args, cordonBin)
	args = append(args, h.tierArgs([]string{"run", "--policy", h.policy(policyBody), "--", "sh", "-c", script})...)
	cmd := exec.Command("unshare", args...)
	cmd.Dir = h.ws
	cmd.Env = append([]string{}, h.env...)
	return run(h.t, cmd, "")
}

// TestResolutionIgnoresSearchList (item 9): with "search corp.test" and "ndots:5" in the resolv.conf
// cordon runs with (Kubernetes' default), an allowed name is resolved as exactly that name, through the
// host's resolver and through network.dns.upstream alike: the resolver never sees "NAME.corp.test",
// which answers with another address. The control is that it sees NAME itself.
func TestResolutionIgnoresSearchList(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "unshare")
	requireTool(t, "setpriv")
	if os.Geteuid() != 0 {
		t.Skip("needs root: cordon is given its own /etc/resolv.conf in a mount namespace")
	}
	forEachTier(t, func(t *testing.T, h *harness) {
		hostDNS := newRecordingResolver(t, loopbackDNSAddr(t), map[string]net.IP{"svc.test.corp.test.": net.IPv4(127, 0, 0, 2)})
		upDNS := newRecordingResolver(t, "127.0.0.1:0", map[string]net.IP{"svc.test.corp.test.": net.IPv4(127, 0, 0, 2)})
		ns, _, _ := strings.Cut(hostDNS.addr, ":")
		conf := "nameserver " + ns + "\nsearch corp.test\noptions ndots:5 timeout:2 attempts:1\n"
		connect := "curl -4 -sS -m 10 --noproxy '*' http://svc.test:8080/ 2>&1; true"
		for _, tc := range []struct {
			name, policy string
			dns, other   *recordingResolver
		}{
			{"host resolver", "network:\n  allow: [{host: svc.test, ports: [8080]}]\n", hostDNS, upDNS},
			{"network.dns.upstream", fmt.Sprintf("network:\n  allow: [{host: svc.test, ports: [8080]}]\n  dns: {upstream: [%q]}\n", upDNS.addr), upDNS, hostDNS},
		} {
			before := len(tc.other.questions())
			r := h.sandboxedWithResolvConf(conf, tc.policy, connect)
			for _, q := range tc.dns.questions() {
				if strings.HasSuffix(q.name, ".corp.test.") {
					t.Errorf("%s: the gateway asked the resolver for %s %s, the allowed name with the search list applied:\n%s", tc.name, q.qtype, q.name, r)
				}
			}
			if tc.dns.count("svc.test.", "A") == 0 {
				t.Errorf("%s: control: the resolver never saw svc.test. (got %v), so the test proves nothing:\n%s", tc.name, tc.dns.questions(), r)
			}
			if n := len(tc.other.questions()); n != before {
				t.Errorf("%s: the other resolver got %d queries", tc.name, n-before)
			}
		}
	})
}

// TestWildcardResolvedOnConnect (item 10): a name under an allowed wildcard, chosen by the sandbox,
// reaches the upstream resolver only when the sandbox connects to it, never when it only looks it up
// (which carries nothing out); the connection is the control, resolved upstream exactly once. `cordon
// policy check` says so for each wildcard.
func TestWildcardResolvedOnConnect(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		up := newRecordingResolver(t, "127.0.0.1:0", nil)
		pol := fmt.Sprintf("network:\n  allow:\n    - exact.test\n    - {host: \"*.allowed.test\", ports: [8080]}\n  dns: {upstream: [%q]}\n", up.addr)
		looked := "data-" + h.canary + ".allowed.test"
		r := h.sandboxed(pol, "getent hosts "+looked+"; getent ahosts "+looked+"; getent hosts exact.test")
		if !strings.Contains(r.stdout, "198.18.") {
			t.Fatalf("the sandbox got no address for a name the wildcard allows:\n%s", r)
		}
		if q := up.questions(); len(q) != 0 {
			t.Fatalf("looking names up inside reached the upstream resolver: %v", q)
		}

		connected := "conn-" + h.canary + ".allowed.test"
		r = h.sandboxed(pol, "curl -4 -sS -m 10 --noproxy '*' http://"+connected+":8080/ 2>&1; true")
		if n := up.count(connected+".", "A"); n != 1 {
			t.Fatalf("a connection to %s made %d upstream A queries for it, want 1 (all: %v):\n%s", connected, n, up.questions(), r)
		}
		if n := up.count(looked+".", ""); n != 0 {
			t.Errorf("the name only looked up was resolved upstream later: %v", up.questions())
		}

		check := h.cordon(nil, "", "policy", "check", h.policy(pol))
		if check.code != 0 {
			t.Fatalf("policy check failed:\n%s", check)
		}
		var notes []string
		for _, l := range strings.Split(check.stdout, "\n") {
			if strings.HasPrefix(l, "# note: ") {
				notes = append(notes, l)
			}
		}
		if len(notes) != 1 || !strings.Contains(notes[0], `network.allow[1] "*.allowed.test"`) || !strings.Contains(notes[0], "allowed.test's DNS servers") {
			t.Fatalf("want one note about *.allowed.test reaching its zone's DNS servers, got %q:\n%s", notes, check)
		}
	})
}

// TestInspectRefusesFronting (item 11): on a host that passes through, the SNI says pass.test while
// the HTTP inside says Host: evil.test, and the upstream gets the request (domain fronting, as a CDN
// would route it: the documented gap). With network.tls.inspect naming the host, or "all", the fronted
// request is refused with 421 and the upstream never sees it, while a request whose Host is the SNI
// goes through (the control), over HTTP/1.1 and HTTP/2.
func TestInspectRefusesFronting(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		up := newTLSUpstream(t, h, "x-none", "pass.test")
		ca, err := os.ReadFile(up.caFile)
		if err != nil {
			t.Fatal(err)
		}
		h.writeFile(filepath.Join(h.ws, "upstream-ca.pem"), string(ca), 0o644)
		base := fmt.Sprintf("network:\n  allow: [{host: pass.test, ports: [%d]}]\n  hosts: {pass.test: 127.0.0.1}\n", up.port)
		u := fmt.Sprintf("https://pass.test:%d", up.port)
		saw := func(path string) (hosts []string) {
			for _, s := range up.requests() {
				if s.path == path {
					hosts = append(hosts, s.host)
				}
			}
			return hosts
		}

		// Passthrough: the sandbox verifies the upstream itself, and the upstream gets Host: evil.test.
		r := h.sandboxed(base, "curl -sS -m 10 --noproxy '*' --cacert upstream-ca.pem -H 'Host: evil.test' "+u+"/front-pass")
		if got := saw("/front-pass"); !slices.Equal(got, []string{"evil.test"}) {
			t.Fatalf("passthrough: the upstream saw %q for the fronted request, want [evil.test] (the gap this test documents):\n%s", got, r)
		}

		for _, inspect := range []string{"[pass.test]", "all"} {
			pol := base + fmt.Sprintf("  tls: {caFile: %q, inspect: %s}\n", up.caFile, inspect)
			status := func(args string) string {
				return fmt.Sprintf("curl -sS -m 10 --noproxy '*' -o /dev/null -w '%%{http_code}\\n' %s; ", args)
			}
			tag := strings.Trim(inspect, "[]")
			// No --cacert: inside, the run's CA is what vouches for pass.test now.
			script := status("-H 'Host: evil.test' "+u+"/front-"+tag) + status("--http2 -H 'Host: evil.test' "+u+"/front2-"+tag) +
				status(u+"/ok-"+tag) + status("--http2 "+u+"/ok2-"+tag)
			r := h.sandboxed(pol, script)
			want := []string{"421", "421", "200", "200"}
			if got := strings.Fields(r.stdout); !slices.Equal(got, want) {
				t.Errorf("inspect %s: statuses %q, want %q:\n%s", inspect, got, want, r)
			}
			for _, p := range []string{"/front-" + tag, "/front2-" + tag} {
				if got := saw(p); len(got) != 0 {
					t.Errorf("inspect %s: a fronted request reached the upstream with Host %q", inspect, got)
				}
			}
			for _, p := range []string{"/ok-" + tag, "/ok2-" + tag} {
				if got := saw(p); len(got) != 1 || !strings.HasPrefix(got[0], "pass.test") {
					t.Errorf("inspect %s: control %s: the upstream saw %q, want one request for pass.test", inspect, p, got)
				}
			}
		}
	})
}
