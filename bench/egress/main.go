// Command egress measures cordon's egress gateway end to end: a download from an upstream on the
// host's loopback through a real sandbox (transparent path: curl with proxies off), against the same
// download by the same client outside any sandbox, and new connections per second through the gateway
// against direct ones. Figures are printed as ratios from one run.
//
//	go build -o bin/cordon ./cmd/cordon && go run ./bench/egress -cordon bin/cordon -size 1024
package main

import (
	"bytes"
	"flag"
	"fmt"
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
	cordon := flag.String("cordon", "bin/cordon", "cordon binary")
	sizeMiB := flag.Int("size", 1024, "download size in MiB")
	conns := flag.Int("conns", 2000, "connections for the connection-rate test")
	concurrent := flag.Int("concurrent", 10000, "connections held open at once")
	rounds := flag.Int("rounds", 3, "rounds of the download and connection-rate tests (direct and through interleaved)")
	tests := flag.String("tests", "download,rate,concurrent", "comma-separated tests to run")
	keep := flag.Bool("keep", false, "keep the state directory (audit logs) and print its path")
	flag.Parse()
	want := func(t string) bool { return strings.Contains(","+*tests+",", ","+t+",") }
	bin, err := filepath.Abs(*cordon)
	check(err)
	// The gateway holds two descriptors per relayed connection; give cordon (inherited by the child)
	// room for the concurrency test where the caller may raise its limit.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Max < 1<<20 {
		want := syscall.Rlimit{Cur: 1 << 20, Max: 1 << 20}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
			fmt.Printf("note: cannot raise the open-file limit above %d; the concurrency test may hit it\n", lim.Max)
		}
	}

	block := bytes.Repeat([]byte("cordon-bench-"), 1<<16/13+1)[:1<<16]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	port := ln.Addr().(*net.TCPAddr).Port
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("mib"))
		w.Header().Set("Content-Length", strconv.Itoa(n<<20))
		for i := 0; i < n<<20/len(block); i++ {
			if _, err := w.Write(block); err != nil {
				return
			}
		}
	}))

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
	check(os.WriteFile(pol, []byte(fmt.Sprintf("version: 1\nnetwork:\n  allow: [{host: bench.test, ports: [%d]}]\n  hosts: {bench.test: 127.0.0.1}\n", port)), 0o644))
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "state"))

	// Throughput: curl reports its own average download speed (bytes/s), so process start-up is not
	// counted on either side.
	curl := func(host, proxy string) string {
		return fmt.Sprintf("curl -sS %s -o /dev/null -w '%%{speed_download}' 'http://%s:%d/?mib=%d'", proxy, host, port, *sizeMiB)
	}
	if want("download") {
		// Three ways, interleaved in each round: direct (no sandbox), through the transparent path
		// (proxies off: DNS, nftables redirect, conntrack), through the explicit proxy (HTTP_PROXY).
		ways := []struct {
			name string
			argv []string
		}{
			{"direct", []string{"sh", "-c", curl("127.0.0.1", "--noproxy '*'")}},
			{"transparent", []string{bin, "run", "--policy", pol, "--", "sh", "-c", curl("bench.test", "--noproxy '*'")}},
			{"explicit", []string{bin, "run", "--policy", pol, "--", "sh", "-c", curl("bench.test", `-x "$http_proxy"`)}},
		}
		speeds := make([][]float64, len(ways))
		cpu := make([]time.Duration, len(ways)) // the client's, and cordon's through it
		var server time.Duration
		for range *rounds {
			for i, w := range ways {
				s0, c0 := cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN)
				speeds[i] = append(speeds[i], speed(run(env, project, w.argv[0], w.argv[1:]...)))
				server += cpuTime(syscall.RUSAGE_SELF) - s0
				cpu[i] += cpuTime(syscall.RUSAGE_CHILDREN) - c0
			}
		}
		gib := float64(*sizeMiB) / 1024 * float64(*rounds)
		fmt.Printf("download %d MiB, %d rounds; server CPU %.2f s/GiB\n", *sizeMiB, *rounds, server.Seconds()/gib/float64(len(ways)))
		for i, w := range ways {
			ratios := make([]float64, *rounds)
			for k := range ratios {
				ratios[k] = speeds[i][k] / speeds[0][k]
			}
			fmt.Printf("  %-11s median %5.0f MiB/s (range %.0f-%.0f), x-of-direct median %.2f (range %.2f-%.2f); client (+ cordon) CPU %.2f s/GiB\n",
				w.name, median(slices.Clone(speeds[i]))/(1<<20), slices.Min(speeds[i])/(1<<20), slices.Max(speeds[i])/(1<<20),
				median(slices.Clone(ratios)), slices.Min(ratios), slices.Max(ratios), cpu[i].Seconds()/gib)
		}
	}

	// Connection rate: P Python processes (forked from one) each open, use and close their share of N
	// connections in sequence; each connection is timed. The client is the same direct and through the
	// gateway: compare like with like (one process per connection, such as curl's, could not reach
	// 5,000 per second on this VM even directly).
	py := `python3 -c '
import os, socket, sys, time
host, port, n, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
req = b"HEAD /?mib=0 HTTP/1.1\r\nHost: bench.test\r\n\r\n"
for i in range(20):
    s = socket.create_connection(addr); s.sendall(req); s.recv(1024); s.close()
r, w = os.pipe()
t = time.perf_counter()
for p in range(procs):
    if os.fork() == 0:
        lat = []
        for i in range(n // procs):
            t0 = time.perf_counter()
            s = socket.create_connection(addr); s.sendall(req); s.recv(1024); s.close()
            lat.append(time.perf_counter() - t0)
        lat.sort()
        os.write(w, ("%%f\n" %% lat[len(lat)//2]).encode())
        os._exit(0)
for p in range(procs): os.wait()
el = time.perf_counter() - t
os.close(w)
p50 = sorted(float(x) for x in os.read(r, 65536).split())
print(n // procs * procs / el, p50[len(p50)//2] * 1e6)
' %s %d %d %d`
	if want("rate") {
		for _, procs := range []int{1, 4} {
			var rd, rg, ld, lg []float64
			var cpu [3]time.Duration // server, client direct, client + cordon through
			for range *rounds {
				s0, c0 := cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN)
				d := strings.Fields(run(env, project, "sh", "-c", fmt.Sprintf(py, "127.0.0.1", port, *conns, procs)))
				c1 := cpuTime(syscall.RUSAGE_CHILDREN)
				g := strings.Fields(run(env, project, bin, "run", "--policy", pol, "--", "sh", "-c", fmt.Sprintf(py, "bench.test", port, *conns, procs)))
				s2, c2 := cpuTime(syscall.RUSAGE_SELF), cpuTime(syscall.RUSAGE_CHILDREN)
				cpu[0] += s2 - s0
				cpu[1] += c1 - c0
				cpu[2] += c2 - c1
				rd, ld = append(rd, parse(d[0])), append(ld, parse(d[1]))
				rg, lg = append(rg, parse(g[0])), append(lg, parse(g[1]))
			}
			ratios := make([]float64, len(rd))
			for i := range rd {
				ratios[i] = rg[i] / rd[i]
			}
			fmt.Printf("new connections, %d client process(es), %d rounds (medians): direct %.0f/s, through the gateway %.0f/s (range %.0f-%.0f; target >= 5000/s), %.2fx (range %.2f-%.2f); p50 per connection %.0f µs direct, %.0f µs through: %.0f µs added (target < 200 µs)\n",
				procs, *rounds, median(slices.Clone(rd)), median(slices.Clone(rg)), slices.Min(rg), slices.Max(rg),
				median(slices.Clone(ratios)), slices.Min(ratios), slices.Max(ratios), median(ld), median(lg), median(lg)-median(ld))
			total := float64(*rounds * (*conns + 20))
			fmt.Printf("  CPU µs per connection: server %.0f, direct client %.0f, through: client + cordon %.0f (cordon's start included)\n",
				cpu[0].Seconds()/total/2*1e6, cpu[1].Seconds()/total*1e6, cpu[2].Seconds()/total*1e6)
		}
	}

	if want("concurrent") {
		holdOpen(bin, dir, project, env, port, *concurrent)
	}
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
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir, cmd.Stderr = env, dir, os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		check(fmt.Errorf("%s %v: %w", name, args, err))
	}
	_ = start
	return strings.TrimSpace(string(out))
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
