// Package probe is cordon's boundary tested from the inside: a list of concrete escape attempts, each
// with a pass criterion that can fail, run by a runner that bounds each attempt and turns a crash into
// a failure, and a scorecard renderer. It deliberately depends on nothing of cordon's sandbox, so the
// same static binary can be copied into any sandbox (docker, another tool, a CI runner) and say what
// that sandbox actually stops. Run without a sandbox, most probes fail: that is the proof they can.
package probe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Status is a probe's verdict. A SKIP is never counted as a pass: it says why the probe could not
// judge.
type Status string

// The three verdicts.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Boundary groups probes by what they attack, so the scorecard reads as one score per promise.
type Boundary string

// The boundaries, in the order the scorecard lists them.
const (
	FileSystem  Boundary = "filesystem"
	Network     Boundary = "network"
	Credentials Boundary = "credentials"
	Processes   Boundary = "processes"
	Resources   Boundary = "resources"
	Persistence Boundary = "persistence"
)

// Boundaries lists every boundary in scorecard order.
var Boundaries = []Boundary{FileSystem, Network, Credentials, Processes, Resources, Persistence}

// Result is one probe's outcome. Evidence says what was found (for a FAIL) or why (for a SKIP).
type Result struct {
	ID       string   `json:"id"`
	Boundary Boundary `json:"boundary"`
	Tried    string   `json:"tried"`
	Status   Status   `json:"status"`
	Evidence string   `json:"evidence,omitempty"`
	// Planted lists paths the probe created that only the host can judge (a file written into a
	// private copy or into the real host cannot be told apart from inside); cordon verify checks them.
	Planted []string `json:"planted,omitempty"`
	// Held maps variables to the sha256 of the value the probe found in them, for the host to compare
	// with values that must not be there (a credential's real value, which never enters the sandbox,
	// not even as a hash).
	Held map[string]string `json:"held,omitempty"`
}

// Probe is one escape attempt. Run must return within its context's deadline where it can; the runner
// gives up on it (a FAIL) when it does not.
type Probe struct {
	ID       string
	Boundary Boundary
	Tried    string
	Run      func(ctx context.Context, env *Env) Verdict
}

// Verdict is what a probe's function returns; the runner adds the probe's identity.
type Verdict struct {
	Status   Status
	Evidence string
	Planted  []string
	Held     map[string]string
}

// Env is what every probe may use: the canaries' coordinates and the directory to plant files in.
type Env struct {
	Canaries Canaries
	// Dir is the working directory: the workspace when cordon verify runs the probes.
	Dir string
	// FDs are the descriptors (above stderr) open when NewEnv ran, before any probe opened its own.
	FDs []string
}

// NewEnv captures what the probes need before any of them runs: call it first thing, so the
// descriptor snapshot holds only what the process inherited.
func NewEnv(c Canaries) *Env {
	env := &Env{Canaries: c, FDs: snapshotFDs()}
	env.Dir, _ = os.Getwd()
	return env
}

// Canaries are the coordinates of secrets planted on the host for the probes to find: where to look
// and how to recognise the secret (a sha256 of it), never the secret itself, so a probe can only
// report a canary it actually reached. Every field is optional; a probe without its canary tries the
// generic attack and, where that cannot be judged, says SKIP.
type Canaries struct {
	// Nonce marks the names and files the probes create, so the host can recognise them.
	Nonce string `json:"nonce,omitempty"`
	// SecretFile is a file in the host user's real home.
	SecretFile *Secret `json:"secret_file,omitempty"`
	// Env is a variable in the environment cordon was started with.
	Env *Secret `json:"env,omitempty"`
	// Process is a host process with ProcessEnv in its environment and Marker as an argument.
	Process *Process `json:"process,omitempty"`
	// Listener is a TCP listener on the host that greets every connection with a secret line, and
	// a UDP socket on the same port that answers every datagram with it.
	Listener *Listener `json:"listener,omitempty"`
	// Abstract is a listening abstract unix socket name (without the leading @) that greets likewise.
	Abstract *Named `json:"abstract,omitempty"`
	// AgentSocket is a unix socket on the host posing as an ssh agent.
	AgentSocket string `json:"agent_socket,omitempty"`
	// DNS is a resolver on the host's loopback; cordon verify makes it the gateway's upstream.
	DNS string `json:"dns,omitempty"`
	// WriteDirs are host directories the probes try to create files in.
	WriteDirs []string `json:"write_dirs,omitempty"`
	// Allowed are host:port endpoints the policy allows, for probes that need an allowed path to
	// misuse (CONNECT relays, Host and SNI mismatches).
	Allowed []Endpoint `json:"allowed,omitempty"`
	// Limits are the limits the policy sets; a resource probe checks each is in force.
	Limits *Limits `json:"limits,omitempty"`
	// AllowNesting says the policy permits user namespaces inside (sandbox.allowNesting), so one
	// being created is the policy's choice, not an escape.
	AllowNesting bool `json:"allow_nesting,omitempty"`
	// Placeholders are the variables that hold the policy's credential placeholders. The probe
	// reports the sha256 of what it finds there and the host compares it with the real value's: no
	// trace of a real value, not even its hash (a short secret's hash can be brute-forced), is handed
	// into the sandbox.
	Placeholders []Named `json:"placeholders,omitempty"`
	// EtcSecrets are the paths of EtcSecretPaths the host has (cordon verify looks), so that
	// fs.etc-secrets counts one there at all as shown, readable or not, and says which it could not
	// test.
	EtcSecrets []string `json:"etc_secrets,omitempty"`
	// Tier is the isolation tier cordon verify runs the probes in (native, gvisor): gVisor's kernel
	// makes its own /dev, with entries of its own that fs.dev-nodes knows.
	Tier string `json:"tier,omitempty"`
	// Injected are the credentials with where their values go and their hosts' allowed endpoints,
	// for the probe that sends a placeholder in cleartext.
	Injected []Injected `json:"injected,omitempty"`
}

// Secret names something secret and the hex sha256 of its value.
type Secret struct {
	Path   string `json:"path,omitempty"`
	Name   string `json:"name,omitempty"`
	SHA256 string `json:"sha256"`
}

// Process is the host canary process. It is recognised by the sha256 of one of its arguments, not
// the argument itself, so that the probe's own command line (and its parents', which carry these
// coordinates) cannot match.
type Process struct {
	PID          int    `json:"pid"`
	MarkerSHA256 string `json:"marker_sha256"`
	Env          Secret `json:"env"`
}

// Listener is the host's canary listener: Addrs are the host's own addresses (loopback included).
type Listener struct {
	Port   int      `json:"port"`
	Addrs  []string `json:"addrs"`
	SHA256 string   `json:"sha256"`
	// ExtraPorts are further loopback ports greeting the same way (the ports of allowed names, so a
	// name resolved to loopback would reach one).
	ExtraPorts []int `json:"extra_ports,omitempty"`
}

// Named is a named canary with the sha256 of the greeting it sends.
type Named struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256,omitempty"`
}

// Endpoint is an allowed host and port.
type Endpoint struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// Limits are the limits a policy sets; zero means none set.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	CPU         float64 `json:"cpu,omitempty"`
	OpenFiles   uint64  `json:"open_files,omitempty"`
	// MemoryWholeBox says that MemoryBytes bounds the whole box from the host, a user-space kernel
	// (gVisor's) included, which keeps no limit of its own: an allocation past it may end the box,
	// probes and all, rather than the process that allocated, so res.memory does not try it.
	MemoryWholeBox bool `json:"memory_whole_box,omitempty"`
}

// Sum is the hex sha256 canaries are recognised by.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Options tune the runner.
type Options struct {
	// Timeout bounds each probe; zero means DefaultTimeout.
	Timeout time.Duration
	// Only, when set, runs just the probes whose id has one of these prefixes.
	Only []string
}

// DefaultTimeout bounds one probe. Probes use shorter timeouts for each attempt inside.
const DefaultTimeout = 10 * time.Second

// Run runs the probes concurrently, each under its own timeout, and returns their results in the
// probes' order. A probe that panics or does not return in time is a FAIL: a crash or a hang is not
// evidence that the boundary held.
func Run(ctx context.Context, probes []Probe, env *Env, opts Options) []Result {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	var selected []Probe
	for _, p := range probes {
		if len(opts.Only) == 0 || hasPrefix(p.ID, opts.Only) {
			selected = append(selected, p)
		}
	}
	results := make([]Result, len(selected))
	var wg sync.WaitGroup
	for i, p := range selected {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runOne(ctx, p, env, timeout)
		}()
	}
	wg.Wait()
	return results
}

func hasPrefix(id string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

func runOne(ctx context.Context, p Probe, env *Env, timeout time.Duration) Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan Verdict, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- Verdict{Status: Fail, Evidence: fmt.Sprintf("probe crashed: %v\n%s", r, firstLines(string(debug.Stack()), 8))}
			}
		}()
		done <- p.Run(ctx, env)
	}()
	var v Verdict
	select {
	case v = <-done:
	case <-ctx.Done():
		v = Verdict{Status: Fail, Evidence: fmt.Sprintf("probe timed out after %s: no verdict, so no evidence the boundary held", timeout)}
	}
	if v.Status != Pass && v.Status != Fail && v.Status != Skip {
		v = Verdict{Status: Fail, Evidence: fmt.Sprintf("probe returned no verdict (%q)", v.Status)}
	}
	return Result{ID: p.ID, Boundary: p.Boundary, Tried: p.Tried, Status: v.Status, Evidence: v.Evidence, Planted: v.Planted, Held: v.Held}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// Failed reports whether any result is a FAIL.
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Sorted returns the results ordered by boundary (scorecard order), then id.
func Sorted(results []Result) []Result {
	out := append([]Result(nil), results...)
	rank := map[Boundary]int{}
	for i, b := range Boundaries {
		rank[b] = i
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Boundary != out[j].Boundary {
			return rank[out[i].Boundary] < rank[out[j].Boundary]
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Injected is a credential as the cleartext probe needs it: the variable that holds its placeholder,
// where the gateway would put its value, and the allowed endpoints of the hosts it is bound to.
type Injected struct {
	Name string `json:"name"`
	// Header, Scheme ("bearer" or "basic") and Body say where the placeholder is sent, as the
	// policy's inject entry does.
	Header string     `json:"header,omitempty"`
	Scheme string     `json:"scheme,omitempty"`
	Body   bool       `json:"body,omitempty"`
	Hosts  []Endpoint `json:"hosts"`
}

// snapshotFDs lists the descriptors above stderr open now, other than the Go runtime's own
// (epoll, eventfd, pidfd show as anon_inode) and the directory being listed.
func snapshotFDs() []string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	leaked := []string{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n <= 2 {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(target, "anon_inode:") || strings.HasSuffix(target, "/fd") {
			continue
		}
		leaked = append(leaked, fmt.Sprintf("%d -> %s", n, target))
	}
	return leaked
}

// AllocArg0 is the argv[0] under which the probe binary runs as res.memory's child: it allocates and
// touches the bytes given as its argument, so that an out-of-memory kill hits the child, not the probes.
const AllocArg0 = "cordon-probe-alloc"

// FilesArg0 is the argv[0] under which the probe binary runs as res.open-files' child: it opens
// files until the kernel refuses (FilesMain).
const FilesArg0 = "cordon-probe-files"
