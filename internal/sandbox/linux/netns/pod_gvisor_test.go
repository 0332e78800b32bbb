//go:build linux

package netns

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/nstest"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// The pod's xtables rules where they are meant to run: inside gVisor. A "pod" namespace joined to an
// "outside" one by a veth (as newPodNet makes them) is handed to `runsc --network=sandbox run`, whose
// netstack takes the pod's interface and addresses over; the test binary runs inside as root (the
// setup step: CAP_NET_ADMIN, CAP_NET_RAW), installs the rules into gVisor's netstack, serves the
// gateway's listeners there, and runs the probes as the agent's uid, root and the gateway's uid. The
// outside listens on the veth's other end, in the host's kernel: the address runsc's sandbox network
// reaches.

// envXTSpec carries the helper's xtPodSpec, as JSON.
const envXTSpec = "CORDON_NETNS_TEST_XT_SPEC"

// xtPodSpec is what the helper inside gVisor does.
type xtPodSpec struct {
	Rules  bool             `json:"rules"`          // install the rules (else the probes run in an open pod)
	Omit   []string         `json:"omit,omitempty"` // labels podXTTables leaves out
	Probes map[int][]string `json:"probes"`         // probeMain's arguments, by uid
}

// xtPodResult is what the helper reports.
type xtPodResult struct {
	NFT     string                    `json:"nft"`     // what InstallPod said
	NoNFT   bool                      `json:"no_nft"`  // whether that wrapped ErrNoNFTables
	Install string                    `json:"install"` // what installing the xtables said
	Probes  map[int]map[string]string `json:"probes"`
}

// dropPort is where the probes that must be dropped on output send their UDP: the outside counts
// what arrives there, apart from everything the gateway's probes reach.
const dropPort = 9997

// xtTestPorts are the gateway's ports in the gVisor tests: a pod's (kubepod.Ports), all above 1024,
// since the listeners there belong to the gateway's uid, as in a pod, and it cannot bind port 53.
func xtTestPorts() sandbox.EgressPorts {
	return sandbox.EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 15053}
}

// xtPodMain is the helper inside gVisor, root as a pod's setup step is: it installs the rules,
// starts the gateway's side (xtServeMain, as the gateway's uid), runs the probes, reports one JSON
// line, and holds the pod open until stdin closes (the outside's probes of the pod run meanwhile).
func xtPodMain() int {
	var spec xtPodSpec
	if err := json.Unmarshal([]byte(os.Getenv(envXTSpec)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "xtpod: spec:", err)
		return 2
	}
	res := xtPodResult{Probes: map[int]map[string]string{}}
	report := func() int {
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			return 2
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	if spec.Rules {
		err := InstallPod(xtTestPorts(), podGatewayUID)
		res.NFT, res.NoNFT = errText(err), errors.Is(err, ErrNoNFTables)
		omit, used := map[string]bool{}, map[string]bool{}
		for _, l := range spec.Omit {
			omit[l] = true
		}
		err = installXT(podXTTables(xtTestPorts(), podGatewayUID, func(l string) bool {
			if omit[l] {
				used[l] = true
			}
			return omit[l]
		}))
		if err == nil && len(used) != len(omit) {
			err = fmt.Errorf("the ruleset has no rule of some of the labels %v", spec.Omit)
		}
		if res.Install = errText(err); err != nil {
			return report()
		}
	}
	// The gateway's side runs as the gateway's uid, as the pod's sidecar does: the rules let its
	// answers out because they are its.
	srv := exec.Command(os.Args[0])
	srv.Env = append(os.Environ(), envChild+"=xtserve", noRaceExitDelay)
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: podGatewayUID, Gid: podGatewayUID, Groups: []uint32{}}}
	srv.Stderr = os.Stderr
	srvIn, err := srv.StdinPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xtpod:", err)
		return 2
	}
	srvOut, err := srv.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xtpod:", err)
		return 2
	}
	if err := srv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "xtpod: start the gateway's side:", err)
		return 2
	}
	defer func() { _ = srvIn.Close(); _ = srv.Wait() }()
	if line, err := bufio.NewReader(srvOut).ReadString('\n'); err != nil || line != "ready\n" {
		fmt.Fprintf(os.Stderr, "xtpod: the gateway's side did not start: %q %v\n", line, err)
		return 2
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for uid, args := range spec.Probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := probeAsHere(uid, args)
			if err != nil {
				got = map[string]string{"error": err.Error()}
			}
			mu.Lock()
			res.Probes[uid] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	return report()
}

// xtServeMain is the gateway's side inside gVisor: the gateway's listeners on loopback, and a
// server on every address at 8081 for the outside to try; "ready", then it serves until stdin closes.
func xtServeMain() int {
	set, err := ListenersHere(xtTestPorts())
	if err != nil {
		fmt.Fprintln(os.Stderr, "xtserve: listeners:", err)
		return 2
	}
	serve(set)
	for _, network := range []string{"tcp4", "tcp6"} {
		l, err := net.Listen(network, ":8081")
		if err != nil {
			fmt.Fprintln(os.Stderr, "xtserve: listen:", err)
			return 2
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
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// probeAsHere runs probeMain as uid in this (gVisor's) network stack.
func probeAsHere(uid int, args []string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*landTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envChild+"=probe", noRaceExitDelay)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("probes as uid %d: %w (stderr: %s)", uid, err, stderr.String())
	}
	var res map[string]string
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("probe output %q: %w", out, err)
	}
	if res["uid"] != fmt.Sprint(uid) {
		return nil, fmt.Errorf("probes ran as uid %s, want %d", res["uid"], uid)
	}
	return res, nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// findRunsc is the runsc to run, on PATH or where `go install` leaves it; the test skips without one.
func findRunsc(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		if p := filepath.Join(home, "go", "bin", "runsc"); isExecutable(p) {
			return p
		}
	}
	t.Skip("no runsc on PATH or in ~/go/bin")
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// gvisorPod is a pod namespace for runsc and its outside, with the outside's listeners.
type gvisorPod struct {
	*podNet
	dropHits *atomic.Int64 // datagrams that reached the outside's dropPort
}

func newGVisorPod(t *testing.T) *gvisorPod {
	t.Helper()
	pod, out := nstest.New(t), nstest.New(t)
	nstest.Veth(t,
		pod, nstest.Link{Name: "eth0", Addrs: []netip.Prefix{netip.PrefixFrom(podAddr4, 24), netip.PrefixFrom(podAddr6, 64)},
			Gateways: []netip.Addr{outAddr4, outAddr6}},
		out, nstest.Link{Name: "node0", Addrs: []netip.Prefix{netip.PrefixFrom(outAddr4, 24), netip.PrefixFrom(outAddr6, 64)}})
	g := &gvisorPod{podNet: &podNet{pod: pod, out: out, outHits: &atomic.Int64{}}, dropHits: &atomic.Int64{}}
	g.serveOutside(t)
	if err := out.Do(func() error {
		for _, a := range []netip.Addr{outAddr4, outAddr6} {
			if err := udpEcho(t, netip.AddrPortFrom(a, dropPort), g.dropHits); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("outside's drop listeners: %v", err)
	}
	return g
}

// runscRun runs the helper in a gVisor sandbox on the pod's namespace with spec, then calls during
// (if set) while the sandbox still holds the pod open, and returns the helper's report.
func (g *gvisorPod) runscRun(t *testing.T, runsc, bin string, netRaw bool, spec xtPodSpec, during func()) xtPodResult {
	t.Helper()
	root, bundle := t.TempDir(), t.TempDir()
	// runsc keeps a bind mount of an empty network namespace under its root, which must go before
	// the directory can.
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH) })
	specJSON, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	caps := []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SETUID", "CAP_SETGID"}
	oci := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"args": []string{bin},
			"env":  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", envChild + "=xtpod", envXTSpec + "=" + string(specJSON), noRaceExitDelay},
			"cwd":  "/", "user": map[string]any{"uid": 0, "gid": 0},
			"capabilities": map[string]any{"bounding": caps, "effective": caps, "permitted": caps},
		},
		"root":     map[string]any{"path": "/", "readonly": true},
		"hostname": "pod",
		// The network namespace is the pod's, never runsc's own: without a path runsc would create
		// one, and in the host's it refuses to run with a network at all.
		"linux": map[string]any{"namespaces": []map[string]string{
			{"type": "network", "path": g.pod.Path}, {"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"},
		}},
	}
	b, err := json.Marshal(oci)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("cordon-netns-xt-%d-%s", os.Getpid(), filepath.Base(bundle))
	args := []string{"--root", root, "--network=sandbox", "--overlay2=all:memory"}
	if netRaw {
		args = append(args, "--net-raw")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*landTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, runsc, append(args, "run", "--bundle", bundle, id)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("runsc run: %v", err)
	}
	t.Cleanup(func() { _ = exec.Command(runsc, "--root", root, "delete", "--force", id).Run() })
	line, rerr := bufio.NewReader(stdout).ReadString('\n')
	if rerr == nil && during != nil {
		during()
	}
	_ = stdin.Close()
	werr := cmd.Wait()
	if rerr != nil || werr != nil {
		t.Fatalf("runsc run: %v, %v (helper's line %q; stderr: %s)", rerr, werr, line, stderr.String())
	}
	var res xtPodResult
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("helper's report %q: %v (stderr: %s)", line, err, stderr.String())
	}
	return res
}

// xtProbe is one probe of a variant: run as uid, and what it must report.
type xtProbe struct {
	uid              int
	kind, addr, want string
}

// Addresses of the probes.
var (
	tcpOut4, tcpOut6   = netip.AddrPortFrom(outAddr4, 8080).String(), netip.AddrPortFrom(outAddr6, 8080).String()
	dnsOut4, dnsOut6   = netip.AddrPortFrom(outAddr4, 53).String(), netip.AddrPortFrom(outAddr6, 53).String()
	dropOut4, dropOut6 = netip.AddrPortFrom(outAddr4, dropPort).String(), netip.AddrPortFrom(outAddr6, dropPort).String()
	udpOut4            = netip.AddrPortFrom(outAddr4, 9999).String()
)

// xtWaitDropped is how long a probe that must be dropped waits: gVisor drops silently (Linux says
// EPERM), so that probe can only time out, and a second shows it.
const xtWaitDropped = 2 * time.Second

// TestPodXTInGVisor: inside gVisor, where netlink to nf_tables is refused (InstallPod says
// ErrNoNFTables), InstallPodXT's tables are installed and do what the nft pod ruleset does: every uid
// but the gateway's (the agent's, root's) has its TCP land on the transparent listener (either
// family, the original destination kept), its DNS over UDP and TCP on the DNS sockets, its other
// UDP and its ICMP dropped, loopback left alone; the gateway's uid reaches the outside (TCP and DNS
// answers in, either family); nothing from outside opens a connection in. In a pod without the
// rules every probe reaches the outside. Then each rule is left out in turn (a few at a time, where
// their probes cannot meet) and the probe that depends on it is seen to fail; and without runsc's
// --net-raw the setup step cannot open its raw socket and fails closed.
func TestPodXTInGVisor(t *testing.T) {
	requireRoot(t)
	runsc := findRunsc(t)
	bin := nstest.Executable(t)
	const agent, root, gw = podAgentUID, 0, podGatewayUID
	rules := []xtProbe{
		{agent, "tcp", tcpOut4, "transparent " + tcpOut4},
		{agent, "tcp", tcpOut6, "transparent " + tcpOut6},
		{agent, "tcp", dnsOut4, "dns-tcp " + dnsOut4},
		{agent, "udp", dnsOut4, "dns-udp probe"},
		{agent, "udp", dnsOut6, "dns-udp probe"},
		{agent, "udp", dropOut4, "timeout"},
		{agent, "udp", dropOut6, "timeout"},
		{agent, "ping", outAddr4.String(), "timeout"},
		{agent, "ping", outAddr6.String(), "timeout"},
		{agent, "tcp", "127.0.0.1:8080", "ECONNREFUSED"},
		{agent, "tcp", "[::1]:8080", "ECONNREFUSED"},
		{root, "tcp", tcpOut4, "transparent " + tcpOut4},
		{root, "udp", dnsOut4, "dns-udp probe"},
		{root, "udp", dropOut4, "timeout"},
		{gw, "tcp", tcpOut4, "outside tcp " + tcpOut4},
		{gw, "tcp", tcpOut6, "outside tcp " + tcpOut6},
		{gw, "tcp", dnsOut4, "outside tcp " + dnsOut4},
		{gw, "udp", dnsOut4, "outside udp probe"},
		{gw, "udp", dnsOut6, "outside udp probe"},
		// Stateless input: answers from UDP ports other than 53 stay out, even the gateway's.
		{gw, "udp", udpOut4, "timeout"},
	}
	open := []xtProbe{
		{agent, "tcp", tcpOut4, "outside tcp " + tcpOut4},
		{agent, "tcp", tcpOut6, "outside tcp " + tcpOut6},
		{agent, "tcp", dnsOut4, "outside tcp " + dnsOut4},
		{agent, "udp", dnsOut4, "outside udp probe"},
		{agent, "udp", dropOut4, "outside udp probe"},
		{agent, "ping", outAddr4.String(), "echo reply"},
		{agent, "tcp", "127.0.0.1:8080", "ECONNREFUSED"},
		{gw, "udp", udpOut4, "outside udp probe"},
	}
	variants := []struct {
		name     string
		rules    bool
		netRaw   bool
		omit     []string
		probes   []xtProbe
		inbound  string // "ok": the outside connects to the pod's :8081 (IPv4 and, without rules, IPv6); "no": it does not
		dropHits string // "none" or "some": whether the outside's dropPort heard anything
		install  string // a part of the install error wanted instead of success
	}{
		{name: "rules", rules: true, netRaw: true, probes: rules, inbound: "no", dropHits: "none"},
		{name: "no rules", netRaw: true, probes: open, inbound: "ok", dropHits: "some"},
		{name: "without nat transparent, input dns answers, input syn", rules: true, netRaw: true,
			omit:    []string{"nat transparent", "input dns answers", "input syn"},
			probes:  []xtProbe{{agent, "tcp", tcpOut4, "timeout"}, {gw, "udp", dnsOut4, "timeout"}, {agent, "udp", dnsOut4, "timeout"}},
			inbound: "ok"},
		{name: "without nat dns udp, nat dns tcp, nat exempt", rules: true, netRaw: true,
			omit: []string{"nat dns udp", "nat dns tcp", "nat exempt"},
			probes: []xtProbe{{agent, "udp", dnsOut4, "timeout"}, {agent, "tcp", dnsOut4, "transparent " + dnsOut4},
				{gw, "tcp", tcpOut4, "transparent " + tcpOut4}}},
		// The gateway's answers to the redirected connections leave by the same rule as its own.
		{name: "without output exempt", rules: true, netRaw: true,
			omit:   []string{"output exempt"},
			probes: []xtProbe{{gw, "tcp", tcpOut4, "timeout"}, {agent, "tcp", tcpOut4, "timeout"}, {agent, "udp", dnsOut4, "timeout"}}},
		// gVisor hands the answers to a redirected connection in on the pod's interface, not on
		// loopback, so they come in by the same stateless rules as the gateway's own answers.
		{name: "without nat loopback, input tcp", rules: true, netRaw: true,
			omit:   []string{"nat loopback", "input tcp"},
			probes: []xtProbe{{agent, "tcp", "127.0.0.1:8080", "transparent 127.0.0.1:8080"}, {gw, "tcp", tcpOut4, "timeout"}, {agent, "tcp", tcpOut4, "timeout"}}},
		{name: "without output loopback tcp, output loopback udp, input icmpv6", rules: true, netRaw: true,
			omit:   []string{"output loopback tcp", "output loopback udp", "input icmpv6"},
			probes: []xtProbe{{agent, "tcp", tcpOut4, "timeout"}, {agent, "udp", dnsOut4, "timeout"}, {gw, "tcp", tcpOut6, "timeout"}}},
		{name: "with output and input policies ACCEPT", rules: true, netRaw: true,
			omit:     []string{"output policy", "input policy"},
			probes:   []xtProbe{{agent, "udp", dropOut4, "outside udp probe"}, {gw, "udp", udpOut4, "outside udp probe"}},
			dropHits: "some"},
		{name: "without input loopback", rules: true, netRaw: true,
			omit:   []string{"input loopback"},
			probes: []xtProbe{{agent, "tcp", tcpOut4, "timeout"}}},
		{name: "without --net-raw", rules: true, install: "raw socket: operation not permitted"},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			g := newGVisorPod(t)
			spec := xtPodSpec{Rules: v.rules, Omit: v.omit, Probes: map[int][]string{}}
			for _, p := range v.probes {
				kind := p.kind
				if p.want == "timeout" {
					kind += ":" + xtWaitDropped.String()
				}
				spec.Probes[p.uid] = append(spec.Probes[p.uid], kind, p.addr)
			}
			inbound := map[string]string{}
			during := func() {
				if v.inbound == "" {
					return
				}
				outside := &testNS{fd: g.out.FD(), timeout: landTimeout}
				if v.inbound == "no" {
					outside.timeout = time.Second
				}
				addrs := []netip.Addr{podAddr4}
				if !v.rules || v.inbound == "no" {
					// With the rules the pod's own neighbour advertisements are dropped, so the
					// outside may not find the pod's IPv6 address at all; without them it does.
					addrs = append(addrs, podAddr6)
				}
				for _, a := range addrs {
					addr := netip.AddrPortFrom(a, 8081).String()
					err := outside.do(t, func() error {
						c, err := net.DialTimeout("tcp", addr, outside.wait())
						if err == nil {
							_ = c.Close()
						}
						return err
					})
					inbound[addr] = errName(err)
				}
			}
			res := g.runscRun(t, runsc, bin, v.netRaw, spec, during)
			if v.rules && (!res.NoNFT || !strings.Contains(res.NFT, "nf_tables")) {
				t.Errorf("InstallPod inside gVisor said %q, want an error wrapping ErrNoNFTables", res.NFT)
			}
			if v.install != "" {
				if !strings.Contains(res.Install, v.install) {
					t.Fatalf("installing said %q, want an error with %q", res.Install, v.install)
				}
				return
			}
			if v.rules && res.Install != "ok" {
				t.Fatalf("installing the xtables inside gVisor: %s", res.Install)
			}
			for _, p := range v.probes {
				if got := res.Probes[p.uid][p.kind+" "+p.addr]; got != p.want {
					t.Errorf("uid %d, %s %s: got %q, want %q (all of the uid's: %v)", p.uid, p.kind, p.addr, got, p.want, res.Probes[p.uid])
				}
			}
			for addr, got := range inbound {
				if (v.inbound == "ok") != (got == "ok") {
					t.Errorf("the outside connecting to the pod's %s: got %q, want %s", addr, got, map[string]string{"ok": "a connection", "no": "none"}[v.inbound])
				}
			}
			switch hits := g.dropHits.Load(); {
			case v.dropHits == "none" && hits != 0:
				t.Errorf("%d datagrams reached the outside's port %d, want none", hits, dropPort)
			case v.dropHits == "some" && hits == 0:
				t.Errorf("nothing reached the outside's port %d (else the probe cannot fail)", dropPort)
			}
		})
	}
}
