//go:build linux

// Command peers compares cordon with other sandboxes a coding agent can run in, on this machine:
// bubblewrap, firejail and the Anthropic sandbox runtime (srt). For each it measures the start latency
// of `true` (median, interleaved so the machine's state affects all alike), the peak RSS of the
// process the user launches, download throughput from a loopback upstream through the tool's egress
// path, and the scorecard of `cordon probe` run inside it against canaries planted on the host (cordon
// itself: `cordon verify`). Tools it cannot find are skipped with a message; bench/peers/run.sh
// installs them first.
//
//	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && go run ./bench/peers -cordon bin/cordon -n 50
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
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

	"github.com/cordon-sandbox/cordon/internal/benchstat"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
)

// tool is one sandbox: how to wrap a command with a comparable policy (no network, home hidden,
// writes only to the project), and how to wrap one whose egress allows the loopback upstream.
type tool struct {
	name string
	// wrap returns argv running argv inside the tool with no network.
	wrap func(argv []string) []string
	// wrapNet returns argv running argv with egress to the upstream allowed, and extra environment.
	wrapNet func(argv []string, upstream string) ([]string, []string)
	// note says what its egress path is.
	note string
	// netHost is the name the egress path allows for the upstream.
	netHost string
}

type env struct {
	cordon, project, base, home string
	upstreamPort                int
}

func main() {
	cordonFlag := flag.String("cordon", "bin/cordon", "cordon binary")
	n := flag.Int("n", 50, "runs of `true` per tool")
	size := flag.Int("mib", 64, "MiB downloaded per throughput run")
	flag.Parse()
	cordon, err := filepath.Abs(*cordonFlag)
	check(err)
	base, err := os.MkdirTemp("", "cordon-peers-")
	check(err)
	defer os.RemoveAll(base)
	e := &env{cordon: cordon, base: base, project: filepath.Join(base, "project"), home: os.Getenv("HOME")}
	// cordon's runs go to a state directory of their own, removed with the rest.
	check(os.Setenv("XDG_STATE_HOME", filepath.Join(base, "state")))
	check(os.MkdirAll(filepath.Join(e.project, ".git", "hooks"), 0o755))
	check(os.WriteFile(filepath.Join(e.project, ".git", "config"), []byte("[core]\n"), 0o644))

	// The upstream: size MiB of zeros on the host's loopback.
	payload := make([]byte, *size<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	e.upstreamPort = l.Addr().(*net.TCPAddr).Port

	tools := available(e)
	fmt.Printf("machine: %s, %d MiB per download, %d starts per tool\n\n", uname(), *size, *n)

	// Start latency, interleaved.
	truePath, _ := exec.LookPath("true")
	lat := map[string][]time.Duration{}
	all := append([]tool{{name: "none (fork/exec)", wrap: func(a []string) []string { return a }}}, tools...)
	for i := 0; i < *n; i++ {
		for _, t := range all {
			d, err := timed(e, t.wrap([]string{truePath}))
			if err != nil {
				fmt.Printf("%s: true failed: %v\n", t.name, err)
				continue
			}
			lat[t.name] = append(lat[t.name], d)
		}
	}
	fmt.Println("| tool | start `true` (median) | ratio to fork/exec | peak RSS of the tool's own processes |")
	fmt.Println("|---|---|---|---|")
	baseMed := benchstat.Median(lat["none (fork/exec)"])
	for _, t := range all {
		m := benchstat.Median(lat[t.name])
		fmt.Printf("| %s | %.1f ms | %.1fx | %.1f MiB |\n", t.name, ms(m), float64(m)/float64(baseMed), float64(peakRSS(e, t))/1024)
	}

	// Throughput through each tool's egress path: rounds interleaved, median of each.
	fmt.Println("\n| tool | egress path | download MB/s (median of 5) | ratio to unsandboxed |")
	fmt.Println("|---|---|---|---|")
	direct := tool{name: "none", note: "direct", wrapNet: func(a []string, _ string) ([]string, []string) { return a, nil }}
	var netTools []tool
	for _, t := range append([]tool{direct}, tools...) {
		if t.wrapNet != nil {
			netTools = append(netTools, t)
		}
	}
	speeds := map[string][]float64{}
	for range 5 {
		for _, t := range netTools {
			if v, err := download(e, t.wrapNet, cmp.Or(t.netHost, "127.0.0.1")); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", t.name, err)
			} else {
				speeds[t.name] = append(speeds[t.name], v)
			}
		}
	}
	plain := benchstat.Median(speeds["none"])
	for _, t := range netTools {
		m := benchstat.Median(speeds[t.name])
		fmt.Printf("| %s | %s | %.0f | %.2f |\n", t.name, t.note, m, m/plain)
	}

	// The probes inside each.
	scores(e, tools)
}

func available(e *env) []tool {
	var tools []tool
	if _, err := exec.LookPath("bwrap"); err == nil {
		bw := func(net bool) []string {
			a := []string{"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", e.home,
				"--bind", e.project, e.project, "--chdir", e.project, "--unshare-all", "--die-with-parent", "--new-session"}
			if net {
				a = append(a, "--share-net")
			}
			return append(a, "--")
		}
		tools = append(tools, tool{name: "bubblewrap", note: "none: --share-net shares the host's network unfiltered",
			wrap:    func(a []string) []string { return append(bw(false), a...) },
			wrapNet: func(a []string, _ string) ([]string, []string) { return append(bw(true), a...), nil }})
	} else {
		fmt.Println("bubblewrap not installed: skipped")
	}
	if _, err := exec.LookPath("firejail"); err == nil {
		fj := func(net bool) []string {
			a := []string{"firejail", "--quiet", "--noprofile", "--private", "--private-tmp", "--caps.drop=all", "--nonewprivs", "--seccomp", "--whitelist=" + e.project}
			if !net {
				a = append(a, "--net=none")
			}
			return append(a, "--")
		}
		tools = append(tools, tool{name: "firejail", note: "none: without --net=none the host's network, unfiltered",
			wrap:    func(a []string) []string { return append(fj(false), a...) },
			wrapNet: func(a []string, _ string) ([]string, []string) { return append(fj(true), a...), nil }})
	} else {
		fmt.Println("firejail not installed: skipped")
	}
	if _, err := exec.LookPath("srt"); err == nil {
		settings := func(domains []string) string {
			p := filepath.Join(e.base, fmt.Sprintf("srt-%d.json", len(domains)))
			b, _ := json.Marshal(map[string]any{
				"filesystem": map[string]any{"denyRead": []string{"~"}, "allowRead": []string{e.project}, "allowWrite": []string{e.project}, "denyWrite": []string{}},
				"network":    map[string]any{"allowedDomains": domains, "deniedDomains": []string{}},
			})
			os.WriteFile(p, b, 0o644)
			return p
		}
		none, local := settings([]string{}), settings([]string{"localhost"})
		tools = append(tools, tool{name: "srt (sandbox-runtime)", note: "its HTTP proxy on the host, domain allowlist", netHost: "localhost",
			wrap: func(a []string) []string { return append([]string{"srt", "--settings", none, "--"}, a...) },
			wrapNet: func(a []string, _ string) ([]string, []string) {
				// srt sets no_proxy=localhost,…: make curl use its proxy anyway.
				if len(a) > 0 && a[0] == "curl" {
					a = append([]string{"curl", "--noproxy", ""}, a[1:]...)
				}
				return append([]string{"srt", "--settings", local, "--"}, a...), nil
			}})
	} else {
		fmt.Println("srt not installed (npm install -g @anthropic-ai/sandbox-runtime): skipped")
	}
	tools = append(tools, tool{name: "cordon", note: "its gateway: name pinned to loopback, judged per connection", netHost: "upstream.test",
		wrap: func(a []string) []string {
			return append([]string{e.cordon, "run", "--workspace", e.project, "--"}, a...)
		},
		wrapNet: func(a []string, _ string) ([]string, []string) {
			p := filepath.Join(e.base, "cordon-net.yaml")
			os.WriteFile(p, fmt.Appendf(nil, "version: 1\nnetwork:\n  allow:\n    - {host: upstream.test, ports: [%d]}\n  hosts: {upstream.test: 127.0.0.1}\n", e.upstreamPort), 0o644)
			return append([]string{e.cordon, "run", "--policy", p, "--workspace", e.project, "--"}, a...), nil
		}})
	return tools
}

// timed runs argv and returns its wall time.
func timed(e *env, argv []string) (time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = e.project
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return d, nil
}

// peakRSS runs `sleep 2` in the tool and samples the summed RSS (KiB) of the launched process and
// all its descendants but the sleep itself: the memory the sandbox costs around a command.
func peakRSS(e *env, t tool) int64 {
	var peak int64
	for range 3 {
		argv := t.wrap([]string{"sleep", "2"})
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = e.project
		if cmd.Start() != nil {
			return 0
		}
		for deadline := time.Now().Add(1800 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			peak = max(peak, treeRSS(cmd.Process.Pid))
		}
		cmd.Wait()
	}
	return peak
}

// treeRSS sums VmRSS over pid and its descendants, leaving out processes named sleep.
func treeRSS(root int) int64 {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, en := range ents {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + en.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses and may contain spaces.
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 1 {
				ppid, _ := strconv.Atoi(f[1])
				children[ppid] = append(children[ppid], pid)
			}
		}
	}
	var sum int64
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = append(queue[1:], children[pid]...)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || strings.Contains(string(st), "Name:\tsleep\n") {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				sum += kb
			}
		}
	}
	return sum
}

// download fetches the payload once with curl through wrap from host (the name the tool's egress
// allows) and returns MB/s.
func download(e *env, wrap func([]string, string) ([]string, []string), host string) (float64, error) {
	argv, extra := wrap([]string{"curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", fmt.Sprintf("http://%s:%d/", host, e.upstreamPort)}, host)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = e.project
	cmd.Env = append(os.Environ(), extra...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("download failed: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("curl printed no speed")
	}
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	return v / 1e6, err
}

// scores runs the probes inside each tool against canaries planted for the occasion, and prints the
// results side by side.
func scores(e *env, tools []tool) {
	set, err := canary.Plant(canary.Options{Home: e.home, Dir: e.base, Exe: e.cordon, WriteDirs: []string{e.home, e.base}})
	check(err)
	defer set.Close()
	coords, _ := json.Marshal(set.Coordinates())
	extra := []string{set.EnvVar(), "SSH_AUTH_SOCK=" + set.AgentSocket()}
	byTool := map[string]map[string]probe.Result{}
	var ids []string
	for _, t := range tools {
		var argv []string
		if t.name == "cordon" {
			argv = []string{e.cordon, "verify", "--json"}
		} else {
			argv = t.wrap([]string{e.cordon, "probe", "--json", "--canaries", string(coords)})
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = e.project
		cmd.Env = append(os.Environ(), extra...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		sc, err := probe.ReadJSON(out)
		if err != nil {
			fmt.Printf("\n%s: no scorecard: %v %s\n", t.name, err, bytes.TrimSpace(stderr.Bytes()))
			continue
		}
		m := map[string]probe.Result{}
		for _, r := range sc.Results {
			if t.name != "cordon" {
				r = judgeOnHost(r, set.Nonce())
			}
			m[r.ID] = r
			if !slices.Contains(ids, r.ID) {
				ids = append(ids, r.ID)
			}
		}
		byTool[t.name] = m
	}
	var names []string
	for _, t := range tools {
		if byTool[t.name] != nil {
			names = append(names, t.name)
		}
	}
	fmt.Printf("\n| probe | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	for _, id := range ids {
		row := []string{id}
		for _, n := range names {
			row = append(row, string(byTool[n][id].Status))
		}
		fmt.Printf("| %s |\n", strings.Join(row, " | "))
	}
	fmt.Printf("\n| boundary | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	for _, b := range probe.Boundaries {
		row := []string{string(b)}
		for _, n := range names {
			var p, f, s int
			for _, r := range byTool[n] {
				if r.Boundary != b {
					continue
				}
				switch r.Status {
				case probe.Pass:
					p++
				case probe.Fail:
					f++
				default:
					s++
				}
			}
			row = append(row, fmt.Sprintf("%d/%d (%d skip)", p, p+f, s))
		}
		fmt.Printf("| %s |\n", strings.Join(row, " | "))
	}
	fmt.Println("\nFailures (evidence):")
	for _, n := range names {
		for _, id := range ids {
			if r := byTool[n][id]; r.Status == probe.Fail {
				fmt.Printf("- %s %s: %s\n", n, id, firstLine(r.Evidence))
			}
		}
	}
}

// judgeOnHost settles a planted result the way cordon verify does, without a workspace guard: a
// planted file that exists on the host (or in the project) escaped.
func judgeOnHost(r probe.Result, nonce string) probe.Result {
	if len(r.Planted) == 0 {
		return r
	}
	var escaped []string
	for _, p := range r.Planted {
		if _, err := os.Lstat(p); err == nil {
			escaped = append(escaped, p)
			if strings.Contains(filepath.Base(p), nonce) {
				os.Remove(p)
			}
		}
	}
	if len(escaped) > 0 {
		r.Status, r.Evidence = probe.Fail, "on the host: "+strings.Join(escaped, ", ")
	} else {
		r.Status, r.Evidence = probe.Pass, "not on the host"
	}
	return r
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func uname() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "unknown"
	}
	b := make([]byte, 0, 65)
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return "Linux " + string(b)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}
