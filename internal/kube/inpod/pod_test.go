//go:build linux

package inpod

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	mdns "github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/nstest"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/netns"
	"github.com/cordon-sandbox/cordon/internal/syncbuf"
	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// The test pod: a namespace joined by a veth to an "outside" one, as a pod to its node. Outside are
// an HTTPS upstream (api.test and denied.test, certificates of a test CA) and the DNS server the
// policy names as network.dns.upstream; the pod's resolver (the host's resolv.conf) is never
// reachable from the pod, so only the gateway can resolve anything.
// The upstream has a documentation address, as a public host would (the gateway refuses to dial a
// private one); the node's own and the DNS server's are private.
var (
	podAddr = netip.MustParseAddr("10.99.0.1")
	outAddr = netip.MustParseAddr("10.99.0.2")
	upAddr  = netip.MustParseAddr("203.0.113.10")
)

const realToken = "ghp_REALpodtoken0123456789abcdefghijklmn"

// upstream is the outside's HTTPS server; it records what reached it.
type upstream struct {
	mu   sync.Mutex
	auth []string // the Authorization header of every request, in order
	// held gets a value when a request for /held arrives, whose answer sends its header and then
	// holds the connection open until the client goes (it is not counted in auth).
	held chan struct{}
}

func (u *upstream) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.auth = nil
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

// testPod is one pod with its outside, its directories and its config.
type testPod struct {
	pod, out                   *nstest.NS
	bin                        string // the test binary, executable by every uid
	dir                        string
	trust, audit, config, copy string
	ca                         *testpki.CA
	caFile                     string // the test CA, readable by the agent's uid
	up                         *upstream
	placeholder                string
	lease                      int // the config's LeaseSeconds
}

func newTestPod(t *testing.T) *testPod {
	t.Helper()
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl")
	}
	p := &testPod{pod: nstest.New(t), out: nstest.New(t), bin: nstest.Executable(t), ca: testpki.NewCA(t, "pod test CA"), up: &upstream{held: make(chan struct{}, 1)}}
	nstest.Veth(t,
		p.pod, nstest.Link{Name: "eth0", Addrs: []netip.Prefix{netip.PrefixFrom(podAddr, 24)}, Gateways: []netip.Addr{outAddr}},
		p.out, nstest.Link{Name: "node0", Addrs: []netip.Prefix{netip.PrefixFrom(outAddr, 24), netip.PrefixFrom(upAddr, 32)}})
	p.serveOutside(t)

	// Directories as the pod mounts them: the trust and audit directories the gateway's, the
	// config readable by it alone.
	var err error
	if p.dir, err = os.MkdirTemp("", "inpod-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(p.dir) })
	if err := os.Chmod(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.trust, p.audit = filepath.Join(p.dir, "trust"), filepath.Join(p.dir, "audit")
	p.config, p.copy = filepath.Join(p.dir, "secret", kubepod.ConfigFile), filepath.Join(p.dir, "bin", "cordon")
	for _, d := range []string{p.dir, p.trust, p.audit, filepath.Dir(p.config), filepath.Dir(p.copy)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{p.trust, p.audit, filepath.Dir(p.config)} {
		if err := os.Chown(d, kubepod.GatewayUID, kubepod.GatewayUID); err != nil {
			t.Fatal(err)
		}
	}
	p.writeConfig(t)
	p.caFile = p.ca.WriteFile(t, p.dir)
	return p
}

// serveOutside starts the upstream and the DNS server in the outside namespace.
func (p *testPod) serveOutside(t *testing.T) {
	t.Helper()
	var tl net.Listener
	var pc net.PacketConn
	if err := p.out.Do(func() error {
		var err error
		if tl, err = net.Listen("tcp", netip.AddrPortFrom(upAddr, 443).String()); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(outAddr, 53).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/held" {
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				p.up.held <- struct{}{}
				<-r.Context().Done()
				return
			}
			p.up.mu.Lock()
			p.up.auth = append(p.up.auth, r.Header.Get("Authorization"))
			p.up.mu.Unlock()
			// An echo, as some APIs' errors are: the gateway must put the placeholder back.
			fmt.Fprintf(w, "upstream %s saw %s\n", r.Host, r.Header.Get("Authorization"))
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{p.ca.Leaf(t, "api.test", "denied.test")}},
	}
	go func() { _ = srv.ServeTLS(tl, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	dns := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, q *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			switch {
			case qq.Name != "api.test." && qq.Name != "denied.test.":
				m.Rcode = mdns.RcodeNameError
			case qq.Qtype == mdns.TypeA:
				m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: qq.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 5}, A: upAddr.AsSlice()})
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = dns.ActivateAndServe() }()
	t.Cleanup(func() { _ = dns.Shutdown() })
}

// writeConfig writes the gateway's config as cordon outside would: the policy's bytes, a
// credential bound to api.test, and the test CA as the roots.
func (p *testPod) writeConfig(t *testing.T) {
	t.Helper()
	set, err := creds.Prepare(context.Background(), []creds.Spec{{Name: "GH_TOKEN", Source: creds.FromEnv([]string{"T=" + realToken}, "T"),
		Inject: creds.Inject{Hosts: []string{"api.test"}, Scheme: creds.SchemeBearer}}})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := set.Export()
	if err != nil {
		t.Fatal(err)
	}
	p.placeholder = ex[0].Placeholder
	pol := "version: 1\nnetwork:\n  allow: [api.test]\n  dns: {upstream: [\"" + netip.AddrPortFrom(outAddr, 53).String() + "\"]}\n"
	b, err := json.Marshal(kubepod.GatewayConfig{Version: kubepod.Version, RunID: "podtest", PolicyName: "/home/u/.config/cordon/policy.yaml",
		Policy: []byte(pol), Hostname: "cordon-podtest", Credentials: ex, Roots: p.ca.PEM, LeaseSeconds: p.lease})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.config, b, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p.config, kubepod.GatewayUID, kubepod.GatewayUID); err != nil {
		t.Fatal(err)
	}
}

// setup runs the setup step in the pod, as root.
func (p *testPod) setup(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := p.pod.Command(ctx, 0, 0, p.bin, p.copy)
	cmd.Env = append(cmd.Env, envMode+"=setup")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("setup: %v: %s", err, out)
	}
	// This kernel has nf_tables, so the rules are nftables, and the log line says so.
	if !strings.Contains(string(out), "the pod's redirect is installed") || !strings.Contains(string(out), "rules=nftables") {
		t.Errorf("setup's log says %q, want the line naming nftables", out)
	}
}

// runningGateway is a gateway process in the pod.
type runningGateway struct {
	cmd            *exec.Cmd
	exited         chan struct{} // closed once it exited, with err set
	err            error
	stdout, stderr *syncbuf.Buffer
}

// startGateway starts the gateway in the pod as the gateway's uid and waits until its ready file
// appears (watched with inotify, so nothing is polled).
func (p *testPod) startGateway(t *testing.T) *runningGateway {
	t.Helper()
	watch := watchFor(t, p.trust, kubepod.ReadyFile)
	cmd := p.pod.Command(context.Background(), kubepod.GatewayUID, kubepod.GatewayUID, p.bin, p.config, p.trust, p.audit)
	cmd.Env = append(cmd.Env, envMode+"=gateway")
	g := &runningGateway{cmd: cmd, exited: make(chan struct{}), stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}}
	cmd.Stdout, cmd.Stderr = g.stdout, g.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.err = cmd.Wait(); close(g.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.exited
	})
	select {
	case <-watch:
	case <-g.exited:
		t.Fatalf("the gateway exited before it was ready: %v\n%s", g.err, g.stderr)
	case <-time.After(time.Minute):
		t.Fatalf("the gateway is not ready after a minute:\n%s", g.stderr)
	}
	if err := Ready(p.trust); err != nil {
		t.Fatalf("Ready after the ready file appeared: %v", err)
	}
	return g
}

// stop sends sig and returns how the gateway exited.
func (g *runningGateway) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
		return g.err
	case <-time.After(time.Minute):
		t.Fatalf("the gateway did not exit on %v", sig)
		return nil
	}
}

// watchFor returns a channel closed once dir/name exists (created or renamed there).
func watchFor(t *testing.T, dir, name string) <-chan struct{} {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	t.Cleanup(func() { _ = f.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if string(bytes.TrimRight(nameBytes, "\x00")) == name {
					return
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}()
	return done
}

// curl runs curl in the pod as the agent's uid and returns its output and error.
func (p *testPod) curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := p.pod.Command(ctx, kubepod.AgentUID, kubepod.AgentUID, append([]string{"/usr/bin/curl", "-sS", "--max-time", "20"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// auditEvents reads the gateway's audit log.
func (p *testPod) auditEvents(t *testing.T) []audit.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(p.audit, kubepod.AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []audit.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev audit.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// The pod end to end: setup's rules and a gateway from its config. The agent's curl reaches the
// allowed upstream through the gateway, transparently and through the proxy, with the credential's
// placeholder swapped for the value (the upstream sees the value, curl never does); a denied host
// and the upstream's own address are refused, logged and reported; the gateway stops cleanly on
// SIGTERM with its audit log complete, and once it is gone (stopped, or killed after a restart)
// nothing reaches the upstream.
func TestPodEndToEnd(t *testing.T) {
	nstest.RequireRoot(t)
	p := newTestPod(t)
	// The control: before the setup step, the agent reaches the upstream's address directly, so the
	// checks below that it cannot can fail.
	direct := []string{"--cacert", p.caFile, "--resolve", "api.test:443:" + upAddr.String(), "https://api.test/v1"}
	if out, err := p.curl(t, direct...); err != nil || len(p.up.seen()) != 1 {
		t.Fatalf("without the rules, curl to the upstream's address: %v: %s", err, out)
	}
	p.up.reset()

	p.setup(t)
	checkCopy(t, p.bin, p.copy)

	if err := Ready(p.trust); err == nil {
		t.Fatal("Ready before the gateway started")
	}
	g := p.startGateway(t)
	bundle := filepath.Join(p.trust, kubepod.TrustBundle)
	for _, f := range []string{kubepod.TrustBundle, kubepod.RunCA} {
		b, err := os.ReadFile(filepath.Join(p.trust, f))
		if err != nil || !bytes.Contains(b, []byte("BEGIN CERTIFICATE")) {
			t.Fatalf("trust file %s: %v %q", f, err, b)
		}
	}
	if b, _ := os.ReadFile(bundle); !bytes.Contains(b, p.ca.PEM) {
		t.Error("the trust bundle lacks the roots")
	}
	auth := "Authorization: Bearer " + p.placeholder

	// Allowed, with the credential: transparently (the pod's resolver is redirected to the
	// gateway's DNS) and through the explicit proxy.
	for _, via := range [][]string{nil, {"-x", "http://127.0.0.1:3128"}} {
		out, err := p.curl(t, append(via, "--cacert", bundle, "-H", auth, "https://api.test/v1")...)
		if err != nil {
			t.Fatalf("curl %v to the allowed upstream: %v: %s\ngateway: %s", via, err, out, g.stderr)
		}
		if want := "upstream api.test saw Bearer " + p.placeholder; strings.TrimSpace(out) != want {
			t.Errorf("curl %v read %q, want %q (the echoed value put back to the placeholder)", via, out, want)
		}
	}
	if got := p.up.seen(); len(got) != 2 || got[0] != "Bearer "+realToken || got[1] != "Bearer "+realToken {
		t.Fatalf("the upstream saw %q, want the real value twice", got)
	}

	// Refused: a host the policy does not allow, and the upstream's address dialled directly (an
	// agent that knows it); neither reaches the upstream.
	if out, err := p.curl(t, "--cacert", bundle, "https://denied.test/"); err == nil {
		t.Errorf("curl to the denied host succeeded: %s", out)
	}
	if out, err := p.curl(t, "--cacert", bundle, "--resolve", "api.test:443:"+upAddr.String(), "-H", auth, "https://api.test/v1"); err == nil {
		t.Errorf("curl to the upstream's own address succeeded: %s", out)
	}
	if got := p.up.seen(); len(got) != 2 {
		t.Fatalf("a refused request reached the upstream: %q", got)
	}

	// SIGTERM: a clean stop, the audit log complete.
	if err := g.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("the gateway exited with %v on SIGTERM, want 0:\n%s", err, g.stderr)
	}
	if err := Ready(p.trust); err == nil {
		t.Error("the ready file outlived the gateway")
	}
	var deniedDNS, deniedAddr, injected bool
	for _, ev := range p.auditEvents(t) {
		switch {
		case ev.Kind == audit.KindDNS && ev.Name == "denied.test" && ev.Decision == audit.Deny:
			deniedDNS = true
		case ev.Kind == audit.KindConnect && ev.Decision == audit.Deny && ev.Detail["addr"] == upAddr.String():
			deniedAddr = true
		case ev.Kind == audit.KindHTTP && ev.Decision == audit.Allow && ev.Detail[audit.DetailCredentials] == "GH_TOKEN":
			injected = true
		}
	}
	if !deniedDNS || !deniedAddr || !injected {
		t.Errorf("audit log: denied.test refused %v, the direct address refused %v, the credential put in %v:\n%v", deniedDNS, deniedAddr, injected, p.auditEvents(t))
	}
	var notices []kubepod.GatewayLine
	for _, line := range strings.Split(strings.TrimSpace(g.stdout.String()), "\n") {
		var l kubepod.GatewayLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Errorf("stdout line %q is not a GatewayLine: %v", line, err)
			continue
		}
		notices = append(notices, l)
	}
	if !containsLine(notices, kubepod.LineNotice, "denied.test") {
		t.Errorf("no notice names denied.test: %+v", notices)
	}
	for _, s := range []string{g.stdout.String(), g.stderr.String()} {
		if strings.Contains(s, realToken) || strings.Contains(s, p.placeholder) {
			t.Errorf("the gateway printed a credential:\n%s", s)
		}
	}

	// With the gateway gone, nothing gets out: not by name, not by the upstream's address.
	p.requireNoEgress(t, bundle, auth, 2)

	// The sidecar restarts: it serves again (the audit log appended), and killed, it stops egress.
	g = p.startGateway(t)
	bundle2, _ := os.ReadFile(bundle)
	if out, err := p.curl(t, "--cacert", bundle, "-H", auth, "https://api.test/v1"); err != nil {
		t.Fatalf("curl through the restarted gateway: %v: %s\n%s", err, out, bundle2)
	}
	if got := p.up.seen(); len(got) != 3 {
		t.Fatalf("the upstream saw %q after the restart", got)
	}
	if err := g.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("a killed gateway exited 0")
	}
	p.requireNoEgress(t, bundle, auth, 3)
}

// requireNoEgress checks that the agent's requests reach nothing while no gateway runs: the upstream
// still saw only seen requests.
func (p *testPod) requireNoEgress(t *testing.T, bundle, auth string, seen int) {
	t.Helper()
	caFile := p.caFile
	for _, args := range [][]string{
		{"--cacert", bundle, "-H", auth, "https://api.test/v1"},
		{"--cacert", caFile, "--resolve", "api.test:443:" + upAddr.String(), "https://api.test/v1"},
		{"--cacert", caFile, "-x", "http://127.0.0.1:3128", "https://api.test/v1"},
	} {
		if out, err := p.curl(t, args...); err == nil {
			t.Errorf("with no gateway, curl %v succeeded: %s", args, out)
		}
	}
	if got := p.up.seen(); len(got) != seen {
		t.Fatalf("with no gateway, a request reached the upstream: %q", got)
	}
}

func containsLine(lines []kubepod.GatewayLine, kind, sub string) bool {
	for _, l := range lines {
		if l.Cordon == kind && strings.Contains(l.Line, sub) {
			return true
		}
	}
	return false
}

// checkCopy: setup copied the binary whole, read-only and executable for every uid.
func checkCopy(t *testing.T, self, copied string) {
	t.Helper()
	fi, err := os.Stat(copied)
	if err != nil {
		t.Fatalf("setup made no copy: %v", err)
	}
	if fi.Mode().Perm() != 0o555 {
		t.Errorf("the copy has mode %v, want 0555", fi.Mode().Perm())
	}
	sum := func(path string) [32]byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	if sum(self) != sum(copied) {
		t.Error("the copy differs from the binary")
	}
	ents, _ := os.ReadDir(filepath.Dir(copied))
	if len(ents) != 1 {
		t.Errorf("setup left %d files beside the copy", len(ents)-1)
	}
}

// A gateway whose server fails stops serving, removes its ready file and returns an error (the
// container exits non-zero, the rules keep the pod shut); one told to stop returns nil.
func TestGatewayStopsWhenAServerFails(t *testing.T) {
	nstest.RequireRoot(t)
	for _, fail := range []bool{true, false} {
		t.Run(fmt.Sprint("server fails: ", fail), func(t *testing.T) {
			n := nstest.New(t)
			dir := t.TempDir()
			cfg := writeConfigFile(t, dir, kubepod.GatewayConfig{Version: kubepod.Version, Policy: []byte("version: 1\nnetwork: {allow: [api.test]}\n")})
			var sockets *sandbox.Listeners
			listen := func(ports sandbox.EgressPorts) (*sandbox.Listeners, error) {
				err := n.Do(func() error {
					var err error
					sockets, err = netns.ListenersHere(ports)
					return err
				})
				return sockets, err
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			watch := watchFor(t, dir, kubepod.ReadyFile)
			done := make(chan error, 1)
			go func() {
				done <- Gateway(ctx, GatewayOptions{ConfigPath: cfg, TrustDir: dir, AuditDir: dir, Listen: listen})
			}()
			select {
			case <-watch:
			case err := <-done:
				t.Fatalf("Gateway returned before it was ready: %v", err)
			}
			if fail {
				_ = sockets.Transparent[0].Close() // the accept loop fails
			} else {
				cancel()
			}
			err := <-done
			switch {
			case fail && err == nil:
				t.Error("a gateway whose server failed returned nil")
			case !fail && err != nil:
				t.Errorf("a gateway told to stop returned %v", err)
			}
			if Ready(dir) == nil {
				t.Error("the ready file outlived the gateway")
			}
		})
	}
}

// TestPodLeaseLapses: a gateway whose lease is renewed serves past the lease's length; once the
// renewals stop (cordon killed), it writes the stop file within the lease, cuts the connection the
// agent holds open, refuses everything after, logs the lapse, and stays up serving nothing; restarted,
// it does not serve again. Without the gateway's watch, the stop file never appears and the held
// connection stays open.
func TestPodLeaseLapses(t *testing.T) {
	nstest.RequireRoot(t)
	p := newTestPod(t)
	p.lease = 2
	p.writeConfig(t)
	p.setup(t)
	g := p.startGateway(t)
	bundle := filepath.Join(p.trust, kubepod.TrustBundle)
	auth := "Authorization: Bearer " + p.placeholder

	// cordon's heartbeat, through Lease as the exec runs it, for twice the lease.
	beat, heart := io.Pipe()
	leaseDone := make(chan error, 1)
	go func() { leaseDone <- Lease(beat, p.trust) }()
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if _, err := heart.Write([]byte{'.'}); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := p.curl(t, "--cacert", bundle, "-H", auth, "https://api.test/v1"); err != nil {
		t.Fatalf("curl with the lease renewed for twice its length: %v: %s\ngateway: %s", err, out, g.stderr)
	}
	if _, ok := Stopped(p.trust); ok {
		t.Fatal("the run was stopped while its lease was renewed")
	}

	// The agent holds a request open across the lapse.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held := p.pod.Command(ctx, kubepod.AgentUID, kubepod.AgentUID, "/usr/bin/curl", "-sS", "--max-time", "100", "--cacert", bundle, "-H", auth, "https://api.test/held")
	var heldOut syncbuf.Buffer
	held.Stdout, held.Stderr = &heldOut, &heldOut
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	heldDone := make(chan error, 1)
	go func() { heldDone <- held.Wait() }()
	select {
	case <-p.up.held:
	case err := <-heldDone:
		t.Fatalf("the held request ended before it reached the upstream: %v: %s", err, heldOut.String())
	case <-time.After(time.Minute):
		t.Fatal("the held request did not reach the upstream")
	}

	stopped := watchFor(t, p.trust, kubepod.StopFile)
	lapsing := time.Now()
	if err := heart.Close(); err != nil { // cordon is gone
		t.Fatal(err)
	}
	if err := <-leaseDone; err != nil {
		t.Fatalf("Lease at the heartbeat's end: %v", err)
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatalf("no stop file 30s after the heartbeat stopped (lease 2s):\n%s", g.stderr)
	}
	if d := time.Since(lapsing); d > 10*time.Second {
		t.Errorf("the lease of 2s lapsed after %s", d)
	}
	// The upstream holds the answer open until its client goes, so the request ends only when the
	// gateway cut it (curl may see the cut, or the upstream's end of a chunked answer as the
	// gateway's side of that connection went: either way it is over).
	select {
	case <-heldDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the connection the agent held is still open after the lease lapsed")
	}
	reason, ok := Stopped(p.trust)
	if !ok || !strings.Contains(reason, "no heartbeat from cordon") {
		t.Errorf("the stop file says %q (%v)", reason, ok)
	}
	if err := Ready(p.trust); err == nil {
		t.Error("the ready file outlived the lapse")
	}
	seen := len(p.up.seen())
	p.requireNoEgress(t, bundle, auth, seen)
	select {
	case <-g.exited:
		t.Fatalf("the gateway exited after the lapse (its container would restart): %v", g.err)
	default:
	}
	var logged bool
	for _, ev := range p.auditEvents(t) {
		if ev.Kind == audit.KindLease && ev.Decision == audit.Deny && strings.Contains(ev.Reason, "no heartbeat") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("the audit log has no lease event: %v", p.auditEvents(t))
	}
	if err := g.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("the stopped gateway exited with %v on SIGTERM, want 0:\n%s", err, g.stderr)
	}

	// The sidecar restarts: it reads the stop file and serves nothing.
	cmd := p.pod.Command(context.Background(), kubepod.GatewayUID, kubepod.GatewayUID, p.bin, p.config, p.trust, p.audit)
	cmd.Env = append(cmd.Env, envMode+"=gateway")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(stderr.String(), "does not serve"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("the restarted gateway did not say it does not serve:\n%s", stderr.String())
		}
	}
	if err := Ready(p.trust); err == nil {
		t.Error("the restarted gateway wrote its ready file")
	}
	p.requireNoEgress(t, bundle, auth, seen)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("the restarted gateway exited with %v on SIGTERM:\n%s", err, stderr.String())
	}
}
