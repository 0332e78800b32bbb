//go:build linux

// Command egress measures cordon's egress gateway end to end: a download from an upstream on the
// host's loopback through a real sandbox (transparent path: curl with proxies off; and the explicit
// proxy), over plain HTTP (forwarded request by request) and over TLS the gateway passes through,
// new connections per second through the gateway (a compiled client: this binary in its "client"
// role), and connections held at once. Every figure is a ratio within one run against the same
// client direct and through relays that only copy (see floor.go), the floor under any user-space
// gateway on the machine. The connection test also gives each contender's CPU per connection: the
// client's own, and the relay's (or the rest of cordon's run).
//
//	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && go run ./bench/egress -cordon bin/cordon -size 1024
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if role(os.Args) {
		return
	}
	cordon := flag.String("cordon", "bin/cordon", "cordon binary")
	baseline := flag.String("baseline", "", "an older cordon binary, run as one more contender in the same rounds (before/after figures)")
	sizeMiB := flag.Int("size", 1024, "download size in MiB")
	conns := flag.Int("conns", 2000, "connections for the connection-rate test")
	concurrent := flag.Int("concurrent", 10000, "connections held open at once")
	rounds := flag.Int("rounds", 3, "rounds of the download and connection-rate tests (direct and through interleaved)")
	tests := flag.String("tests", "download,tls-download,rate,concurrent", "comma-separated tests to run")
	keep := flag.Bool("keep", false, "keep the state directory (audit logs) and print its path")
	flag.Parse()
	want := func(t string) bool { return strings.Contains(","+*tests+",", ","+t+",") }
	bin, err := filepath.Abs(*cordon)
	check(err)
	var base string
	if *baseline != "" {
		base, err = filepath.Abs(*baseline)
		check(err)
	}
	// The gateway holds two descriptors per relayed connection; give cordon (inherited by the child)
	// room for the concurrency test where the caller may raise its limit.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Max < 1<<20 {
		want := syscall.Rlimit{Cur: 1 << 20, Max: 1 << 20}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
			fmt.Printf("note: cannot raise the open-file limit above %d; the concurrency test may hit it\n", lim.Max)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	port := ln.Addr().(*net.TCPAddr).Port
	go serve(ln)
	tlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	tlsPort := tlsLn.Addr().(*net.TCPAddr).Port
	go serve(tls.NewListener(tlsLn, selfSigned("bench.test")))

	dir, err := os.MkdirTemp("", "cordon-bench-egress-")
	check(err)
	if *keep {
		fmt.Println("state kept in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	project := filepath.Join(dir, "project")
	check(os.Mkdir(project, 0o755))
	pol := filepath.Join(dir, "policy.yaml")
	check(os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nnetwork:\n  allow: [{host: bench.test, ports: [%d, %d]}]\n  hosts: {bench.test: 127.0.0.1}\n", port, tlsPort)), 0o644))
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "state"))

	// Throughput: curl reports its own average download speed (bytes/s), so process start-up is not
	// counted on either side.
	curl := func(host string, port int, flags string) string {
		return fmt.Sprintf("curl -sS %s -o /dev/null -w '%%{speed_download}' 'http://%s:%d/?mib=%d'", flags, host, port, *sizeMiB)
	}
	// The floor: what relaying alone costs here, measured with relays that check and log nothing.
	upstream := fmt.Sprintf("127.0.0.1:%d", port)
	goRelay, epollRelay := startRelay("relay-go", upstream), startRelay("relay-epoll", upstream)
	defer goRelay.stop()
	defer epollRelay.stop()
	spliceRelay := startRelay("relay-splice", upstream)
	defer spliceRelay.stop()
	relays := []*relay{goRelay, epollRelay, spliceRelay}
	// The sockmap relay needs root; rootless, the bench goes on without it.
	var sockmapRelay *relay
	if os.Geteuid() == 0 {
		sockmapRelay = startRelay("relay-sockmap", upstream)
		defer sockmapRelay.stop()
		relays = append(relays, sockmapRelay)
	}
	relayCPU := func() time.Duration {
		var d time.Duration
		for _, r := range relays {
			d += r.cpu()
		}
		return d
	}
	// A download way: one command per round, whose output is curl's transfer rate.
	type way struct {
		name   string
		argv   []string
		cordon bool // a run of cordon (or the baseline build), not a floor
	}
	// download runs the ways interleaved, rounds times, and prints each one's rate against direct
	// (ways[0]) and, for cordon's, against the Go relay (ways[1]).
	download := func(title string, ways []way) {
		speeds := make([][]float64, len(ways))
		cpu := make([]time.Duration, len(ways)) // the client's, and cordon's or the relay's with it
		// The whole machine's, since a kernel relay's work runs in kernel threads (softirq, the
		// sockmap's work queue) that no process is charged for; it includes whatever else runs.
		machine := make([]time.Duration, len(ways))
		var server time.Duration
		for range *rounds {
			// Each round runs the ways in an order of its own, so that no way always follows the
			// same one (a cordon run's namespaces are torn down by the kernel after it exits, while
			// the next way runs; a kernel relay leaves work queued) or always runs first.
			for _, i := range rand.Perm(len(ways)) {
				w := ways[i]
				s0, c0, r0, m0 := cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN), relayCPU(), machineCPU()
				out, err := tryRun(env, project, w.argv[0], w.argv[1:]...)
				v := speed(out)
				if err != nil {
					// A contender that fails a round (the sockmap relay refuses a handover now and
					// then) has no figure for it, which its medians leave out; the others' rounds
					// still stand.
					fmt.Printf("note: %s, round failed: %v\n", w.name, err)
					v = math.NaN()
				}
				speeds[i] = append(speeds[i], v)
				server += cpuTime(syscall.RUSAGE_SELF) - s0
				cpu[i] += cpuTime(syscall.RUSAGE_CHILDREN) - c0 + relayCPU() - r0
				machine[i] += machineCPU() - m0
			}
		}
		gib := float64(*sizeMiB) / 1024 * float64(*rounds)
		fmt.Printf("%s %d MiB, %d rounds; server CPU %.2f s/GiB\n", title, *sizeMiB, *rounds, server.Seconds()/gib/float64(len(ways)))
		// Each round's speed over another way's in the same round: x of direct for every way, and,
		// for cordon's (the rootless target is the plain-copy floor measured in the same run), x of
		// the Go relay, paired by round so that the VM's drift between rounds cancels.
		perRound := func(i, j int) []float64 {
			ratios := make([]float64, *rounds)
			for k := range ratios {
				ratios[k] = speeds[i][k] / speeds[j][k]
			}
			return measured(ratios)
		}
		for i, w := range ways {
			sp, rs := measured(speeds[i]), perRound(i, 0)
			if len(sp) == 0 || len(rs) == 0 {
				fmt.Printf("  %-11s every round failed\n", w.name)
				continue
			}
			failed := ""
			if n := *rounds - len(sp); n > 0 {
				failed = fmt.Sprintf(" (%d rounds failed)", n)
			}
			fmt.Printf("  %-11s median %5.0f MiB/s (range %.0f-%.0f), x-of-direct median %.2f (range %.2f-%.2f); client (+ relay or cordon) CPU %.2f s/GiB, machine %.2f%s\n",
				w.name, median(slices.Clone(sp))/(1<<20), slices.Min(sp)/(1<<20), slices.Max(sp)/(1<<20),
				median(slices.Clone(rs)), slices.Min(rs), slices.Max(rs), cpu[i].Seconds()/gib, machine[i].Seconds()/gib, failed)
			if w.cordon {
				if fr := perRound(i, 1); len(fr) > 0 {
					fmt.Printf("  %-11s x-of-Go-relay median %.2f (range %.2f-%.2f), paired by round\n", "", median(slices.Clone(fr)), slices.Min(fr), slices.Max(fr))
				}
			}
		}
		if base != "" {
			// The baseline runs the transparent way's command: the build against it, round by round.
			tr, bl := slices.IndexFunc(ways, func(w way) bool { return w.name == "transparent" }), len(ways)-1
			if ab := perRound(tr, bl); len(ab) > 0 {
				fmt.Printf("  transparent / baseline median %.2f (range %.2f-%.2f), paired by round\n", median(slices.Clone(ab)), slices.Min(ab), slices.Max(ab))
			}
		}
	}
	// downloadWays are a download's contenders, curl(host, port, flags) being its command: direct
	// (no sandbox); through the floor relays on the host (floors[0] the Go relay; nil ones left
	// out); through cordon's transparent path (proxies off: DNS, nftables redirect, conntrack);
	// through its explicit proxy (HTTP_PROXY); and the baseline build's transparent path.
	downloadWays := func(curl func(host string, port int, flags string) string, port int, floors ...*relay) []way {
		ways := []way{{"direct", []string{"sh", "-c", curl("127.0.0.1", port, "--noproxy '*'")}, false}}
		for _, r := range floors {
			if r != nil {
				ways = append(ways, way{r.name, []string{"sh", "-c", curl("127.0.0.1", r.port, "--noproxy '*'")}, false})
			}
		}
		ways = append(ways,
			way{"transparent", []string{bin, "run", "--policy", pol, "--", "sh", "-c", curl("bench.test", port, "--noproxy '*'")}, true},
			way{"explicit", []string{bin, "run", "--policy", pol, "--", "sh", "-c", curl("bench.test", port, `-x "$http_proxy"`)}, true})
		if base != "" {
			ways = append(ways, way{"baseline", []string{base, "run", "--policy", pol, "--", "sh", "-c", curl("bench.test", port, "--noproxy '*'")}, true})
		}
		return ways
	}
	if want("download") {
		download("download", downloadWays(curl, port, goRelay, spliceRelay, sockmapRelay))
	}
	if want("tls-download") {
		// The same download over TLS that cordon does not inspect (no credential or HTTP rule names
		// the host): the gateway judges the ClientHello's name and passes the stream through, as it
		// does for most HTTPS, where plain HTTP is forwarded request by request. The floors relay to
		// the TLS port; curl sends the name everywhere (the relays' clients resolve it to loopback).
		tlsUp := fmt.Sprintf("127.0.0.1:%d", tlsPort)
		tlsGo, tlsSplice := startRelay("relay-go", tlsUp), startRelay("relay-splice", tlsUp)
		defer tlsGo.stop()
		defer tlsSplice.stop()
		relays = append(relays, tlsGo, tlsSplice)
		var tlsSockmap *relay
		if os.Geteuid() == 0 {
			tlsSockmap = startRelay("relay-sockmap", tlsUp)
			defer tlsSockmap.stop()
			relays = append(relays, tlsSockmap)
		}
		curlTLS := func(host string, port int, flags string) string {
			if host == "127.0.0.1" {
				flags += fmt.Sprintf(" --resolve bench.test:%d:127.0.0.1", port)
			}
			return fmt.Sprintf("curl -sS -k --http1.1 %s -o /dev/null -w '%%{speed_download}' 'https://bench.test:%d/?mib=%d'", flags, port, *sizeMiB)
		}
		download("TLS download, passed through", downloadWays(curlTLS, tlsPort, tlsGo, tlsSplice, tlsSockmap))
	}

	// Connection rate: this binary as the client ("client" role, Go: connect, HEAD, read, close; PAR
	// goroutines), the same client direct, through the two floor relays, and from inside cordon
	// (copied into the project, which is the sandbox's working directory).
	if want("rate") {
		self, err := os.Executable()
		check(err)
		exe, err := os.ReadFile(self)
		check(err)
		check(os.WriteFile(filepath.Join(project, "egress-client"), exe, 0o755))
		// Each way's CPU is split in two: the client's own (it reports its getrusage) and the rest of
		// what the way ran: the relay process's, or cordon's whole run but the client (its process,
		// init, their start and end). The upstream is this process's and is counted for none.
		type rateWay struct {
			name  string
			relay *relay // whose CPU the way adds; nil for direct and cordon
			rest  string // what the second CPU figure counts
			argv  func(par int) []string
		}
		ways := []rateWay{
			{"direct", nil, "nothing else", func(par int) []string {
				return []string{self, "client", upstream, strconv.Itoa(*conns), strconv.Itoa(par)}
			}},
			{"Go relay", goRelay, "relay", func(par int) []string {
				return []string{self, "client", fmt.Sprintf("127.0.0.1:%d", goRelay.port), strconv.Itoa(*conns), strconv.Itoa(par)}
			}},
			{"epoll relay", epollRelay, "relay", func(par int) []string {
				return []string{self, "client", fmt.Sprintf("127.0.0.1:%d", epollRelay.port), strconv.Itoa(*conns), strconv.Itoa(par)}
			}},
			{"cordon", nil, "the rest of the run", func(par int) []string {
				return []string{bin, "run", "--policy", pol, "--", "./egress-client", "client", fmt.Sprintf("bench.test:%d", port), strconv.Itoa(*conns), strconv.Itoa(par)}
			}},
		}
		if base != "" {
			ways = append(ways, rateWay{"baseline", nil, "the rest of the run", func(par int) []string {
				return []string{base, "run", "--policy", pol, "--", "./egress-client", "client", fmt.Sprintf("bench.test:%d", port), strconv.Itoa(*conns), strconv.Itoa(par)}
			}})
		}
		for _, par := range []int{1, 4} {
			rates, lats := make([][]float64, len(ways)), make([][]float64, len(ways))
			clientCPU, restCPU := make([]time.Duration, len(ways)), make([]time.Duration, len(ways))
			for range *rounds {
				for i, w := range ways {
					argv := w.argv(par)
					c0, r0 := cpuTime(syscall.RUSAGE_CHILDREN), time.Duration(0)
					if w.relay != nil {
						r0 = w.relay.cpu()
					}
					f := strings.Fields(run(env, project, argv[0], argv[1:]...))
					rates[i], lats[i] = append(rates[i], parse(f[0])), append(lats[i], parse(f[1]))
					own := time.Duration(parse(f[2]) * float64(time.Second))
					clientCPU[i] += own
					restCPU[i] += cpuTime(syscall.RUSAGE_CHILDREN) - c0 - own
					if w.relay != nil {
						restCPU[i] += w.relay.cpu() - r0
					}
				}
			}
			fmt.Printf("new connections, %d at a time, %d each, %d rounds (medians; target >= 5000/s and < 200 µs added):\n", par, *conns, *rounds)
			for i, w := range ways {
				ratio := func(base int) float64 {
					r := make([]float64, *rounds)
					for k := range r {
						r[k] = rates[i][k] / rates[base][k]
					}
					return median(r)
				}
				perConn := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(*rounds*(*conns/par*par)) }
				fmt.Printf("  %-11s %6.0f/s (range %.0f-%.0f), %.2fx direct, %.2fx the epoll relay; p50 per connection %4.0f µs, %4.0f µs added; CPU per connection: client %3.0f µs, %s %3.0f µs\n",
					w.name, median(slices.Clone(rates[i])), slices.Min(rates[i]), slices.Max(rates[i]), ratio(0), ratio(2),
					median(slices.Clone(lats[i])), median(slices.Clone(lats[i]))-median(slices.Clone(lats[0])),
					perConn(clientCPU[i]), w.rest, perConn(restCPU[i]))
			}
		}
	}

	if want("concurrent") {
		holdOpen(bin, dir, project, env, port, *concurrent)
	}
}

// selfSigned is a TLS configuration with a new self-signed certificate for name (the bench's
// clients do not verify it: what is measured is the bytes' path, not the trust).
func selfSigned(name string) *tls.Config {
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	check(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(err)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// serve is the upstream: GET /?mib=N answers N MiB.
func serve(ln net.Listener) {
	block := bytes.Repeat([]byte("cordon-bench-"), 1<<16/13+1)[:1<<16]
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("mib"))
		w.Header().Set("Content-Length", strconv.Itoa(n<<20))
		for i := 0; i < n<<20/len(block); i++ {
			if _, err := w.Write(block); err != nil {
				return
			}
		}
	}))
}

// holdOpen opens n connections at once through the gateway, checks each got an answer, closes them,
// and follows cordon's open descriptors: before the connections, while they are open, and after they
// closed until they are back (or 10 s passed). The client reads each answer whole, so that closing
// sends FIN rather than a reset.
func holdOpen(bin, dir, project string, env []string, port, n int) {
	pol := filepath.Join(dir, "policy-concurrent.yaml")
	check(os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nnetwork:\n  allow: [{host: bench.test, ports: [%d]}]\n  hosts: {bench.test: 127.0.0.1}\nlimits: {openFiles: %d}\n", port, n+1000)), 0o644))
	py := fmt.Sprintf(`python3 -c '
import socket, sys, time
addr = socket.getaddrinfo("bench.test", %d, socket.AF_INET, socket.SOCK_STREAM)[0][4]
print("READY", flush=True)
time.sleep(0.5)
socks, errors = [], 0
for i in range(%d):
    try:
        s = socket.create_connection(addr, 10); socks.append(s)
    except OSError: errors += 1
ok = 0
for s in socks:
    s.sendall(b"HEAD /?mib=0 HTTP/1.1\r\nHost: bench.test\r\n\r\n")
for s in socks:
    try:
        b = b""
        while b"\r\n\r\n" not in b:
            d = s.recv(4096)
            if not d: break
            b += d
        if b.startswith(b"HTTP/1.1 200"): ok += 1
        else: errors += 1
    except OSError: errors += 1
print("OPEN", len(socks), "answered", ok, "errors", errors, flush=True)
time.sleep(1)
for s in socks: s.close()
print("CLOSED", flush=True)
time.sleep(12)
'`, port, n)
	cmd := exec.Command(bin, "run", "--policy", pol, "--", "sh", "-c", py)
	cmd.Env, cmd.Dir, cmd.Stderr = env, project, os.Stderr
	out, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	lines := make(chan string)
	go func() {
		defer close(lines)
		buf := make([]byte, 4096)
		var pending string
		for {
			k, err := out.Read(buf)
			pending += string(buf[:k])
			for {
				line, rest, ok := strings.Cut(pending, "\n")
				if !ok {
					break
				}
				lines <- line
				pending = rest
			}
			if err != nil {
				return
			}
		}
	}()
	var base, open int
	var result string
	for line := range lines {
		switch {
		case line == "READY":
			base = countFDs(pid)
		case strings.HasPrefix(line, "OPEN"):
			open, result = countFDs(pid), line
		}
		if line == "CLOSED" {
			break
		}
	}
	closed := time.Now()
	after := countFDs(pid)
	for after > base+64 && time.Since(closed) < 10*time.Second {
		time.Sleep(50 * time.Millisecond)
		after = countFDs(pid)
	}
	fmt.Printf("%d concurrent connections: %s; cordon's descriptors: %d before, %d while open, %d %.1f s after closing (limit %s)\n",
		n, result, base, open, after, time.Since(closed).Seconds(), fdLimit(pid))
}

// fdLimit is the process's RLIMIT_NOFILE as /proc shows it (soft hard).
func fdLimit(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			f := strings.Fields(l)
			return f[3] + "/" + f[4]
		}
	}
	return "?"
}

// cpuTime is the user plus system CPU time of who (RUSAGE_SELF or RUSAGE_CHILDREN, the waited-for
// descendants).
func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	check(syscall.Getrusage(who, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median of xs (which it sorts).
// machineCPU is the busy time of all processors so far (/proc/stat: everything but idle, iowait and
// steal).
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	check(err)
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, f := range strings.Fields(line)[1:] {
		v, err := strconv.ParseInt(f, 10, 64)
		check(err)
		if i != 3 && i != 4 && i < 7 { // not idle, iowait, steal (the hypervisor's); guest times are in user
			busy += v
		}
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

func run(env []string, dir string, name string, args ...string) string {
	out, err := tryRun(env, dir, name, args...)
	check(err)
	return out
}

// tryRun runs a command and returns its output, trimmed, or why it failed.
func tryRun(env []string, dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir, cmd.Stderr = env, dir, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %v: %w", name, args, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func speed(s string) float64 { return parse(s) }

func parse(s string) float64 {
	f, err := strconv.ParseFloat(strings.Fields(s + " 0")[0], 64)
	check(err)
	return f
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// measured is xs without the rounds that have no figure (NaN: the contender failed them).
func measured(xs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
}
