//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests build the real cordon binary once and attack the boundary from inside real
// sandboxes, as root and, where the host has the unprivileged test user, rootless. Every attack is
// also run without the sandbox, to prove that the test's canary was reachable and the test can fail.

var cordonBin string

// testUserName is the unprivileged user the rootless variants run as (CI creates it; see .ci/run).
const testUserName = "cordon-test"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cordon-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	cordonBin = filepath.Join(dir, "cordon")
	build := exec.Command("go", "build", "-o", cordonBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building cordon: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// who is an identity the tests run cordon as.
type who struct {
	name     string
	uid, gid int
}

// identities is the identities this host can run the tests as (see callers), root first.
func identities(t *testing.T) []who {
	t.Helper()
	ids, _ := callers(os.Geteuid())
	return ids
}

// callers returns root and an unprivileged caller when the test runs as root, or just the
// current user otherwise. The unprivileged caller is the cordon-test user when the host has it (.ci/run
// creates it) and otherwise an id that belongs to no account, as a container's arbitrary uid does, so
// that a fresh machine runs the rootless variants too. Nothing is skipped silently: forEachIdentity
// reports an identity that cannot run as a skipped subtest. euid is the test's effective uid.
func callers(euid int) (run []who, skipped map[string]string) {
	if euid != 0 {
		return []who{{name: "rootless", uid: os.Getuid(), gid: os.Getgid()}},
			map[string]string{"root": "not running as root: the root variants need root (CI runs the tests as root)"}
	}
	ids := []who{{name: "root", uid: 0, gid: 0}}
	if u, err := user.Lookup(testUserName); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return append(ids, who{name: "rootless", uid: uid, gid: gid}), nil
	}
	id, err := freeID("/etc/passwd", "/etc/group")
	if err != nil {
		return ids, map[string]string{"rootless": fmt.Sprintf("no user %q and no free id: %v", testUserName, err)}
	}
	return append(ids, who{name: "rootless", uid: id, gid: id}), nil
}

// firstFreeID is where freeID starts looking: above the ranges useradd hands out, below nobody.
const firstFreeID = 60000

// freeID is the first id from firstFreeID up that no line of the given passwd/group-format files
// names (third field), so that running as it stands for a caller who has no account.
func freeID(files ...string) (int, error) {
	used := map[int]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			return 0, fmt.Errorf("reading %s: %w", f, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if fields := strings.Split(line, ":"); len(fields) > 2 {
				if id, err := strconv.Atoi(fields[2]); err == nil {
					used[id] = true
				}
			}
		}
	}
	for id := firstFreeID; id < 65534; id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("every id from %d to 65533 is taken", firstFreeID)
}

// harness is one caller's world: a home with secrets, a project, a policy outside the project.
type harness struct {
	t      *testing.T
	who    who
	base   string // owned by the caller: the parent of home and project
	home   string
	ws     string
	canary string // random, unique to this test
	env    []string
	// tier is the isolation every `cordon run` of the harness asks for ("" for the default, native).
	tier string
}

func newHarness(t *testing.T, w who) *harness {
	t.Helper()
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	h := &harness{t: t, who: w, base: base, home: filepath.Join(base, "home"), ws: filepath.Join(base, "project"), canary: randomHex(t)}
	for _, d := range []string{h.home, h.ws, filepath.Join(h.home, ".ssh"), filepath.Join(h.home, ".config")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.writeFile(filepath.Join(h.home, ".ssh", "id_canary"), "SECRET-"+h.canary+"\n", 0o600)
	h.env = []string{
		"HOME=" + h.home, "USER=" + userName(w), "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"XDG_STATE_HOME=" + filepath.Join(h.home, ".local", "state"),
		"XDG_CONFIG_HOME=" + filepath.Join(h.home, ".config"),
		"LANG=C.UTF-8",
	}
	h.chownAll(base)
	return h
}

func userName(w who) string {
	if w.uid == 0 {
		return "root"
	}
	if u, err := user.LookupId(strconv.Itoa(w.uid)); err == nil {
		return u.Username
	}
	return "user"
}

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func (h *harness) writeFile(path, content string, mode os.FileMode) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
	os.Chown(path, h.who.uid, h.who.gid)
}

func (h *harness) chownAll(root string) {
	filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Lchown(p, h.who.uid, h.who.gid)
		}
		return nil
	})
}

// policy writes a policy file outside the project and returns its path.
func (h *harness) policy(body string) string {
	h.t.Helper()
	p := filepath.Join(h.base, fmt.Sprintf("policy-%d.yaml", time.Now().UnixNano()))
	h.writeFile(p, "version: 1\n"+body, 0o644)
	return p
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// command prepares a process as the harness's caller, with the harness's environment.
func (h *harness) command(extraEnv []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = h.ws
	cmd.Env = append(append([]string{}, h.env...), extraEnv...)
	if h.who.uid != os.Getuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(h.who.uid), Gid: uint32(h.who.gid)}}
	}
	return cmd
}

func run(t *testing.T, cmd *exec.Cmd, stdin string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	// A probe that leaves a process holding its output (an attack that half-worked) must not hang the
	// suite: give up on the pipes a while after the command itself exited.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// cordon runs `cordon ARGS...` as the caller; a run asks for the harness's tier.
func (h *harness) cordon(extraEnv []string, stdin string, args ...string) result {
	h.t.Helper()
	return run(h.t, h.command(extraEnv, cordonBin, h.tierArgs(args)...), stdin)
}

// tierArgs puts --isolation TIER after `run` or `verify` when the harness has a tier.
func (h *harness) tierArgs(args []string) []string {
	if h.tier == "" || len(args) == 0 || args[0] != "run" && args[0] != "verify" {
		return args
	}
	return append([]string{args[0], "--isolation", h.tier}, args[1:]...)
}

// sandboxed runs a shell script inside a sandbox with the given policy body.
func (h *harness) sandboxed(policyBody, script string, extraEnv ...string) result {
	h.t.Helper()
	return h.cordon(extraEnv, "", "run", "--policy", h.policy(policyBody), "--", "sh", "-c", script)
}

// plain runs the same script without any sandbox: the control that proves the attack is real.
func (h *harness) plain(script string, extraEnv ...string) result {
	h.t.Helper()
	return run(h.t, h.command(extraEnv, "sh", "-c", script), "")
}

// forEachIdentity runs f as a subtest for root and rootless; an identity this host cannot run is a
// skipped subtest with the reason, so that the summary counts it.
func forEachIdentity(t *testing.T, f func(t *testing.T, h *harness)) {
	ids, skipped := callers(os.Geteuid())
	for _, w := range ids {
		t.Run(w.name, func(t *testing.T) { f(t, newHarness(t, w)) })
	}
	for _, name := range []string{"root", "rootless"} {
		if reason, ok := skipped[name]; ok {
			t.Run(name, func(t *testing.T) { t.Skip(reason) })
		}
	}
}

// tiers are the isolation tiers the suites attacking the box run against.
var tiers = []string{"native", "gvisor"}

// forEachTier runs f as a subtest for each tier and each identity (tier/identity). The gVisor tier
// finds runsc on the caller's PATH, where the harness puts the one found here (PATH, or
// /root/go/bin where `go install` leaves it; .ci/run builds it): a missing one fails, it does not
// skip. Rootless, the gVisor tier is a skipped subtest saying why.
func forEachTier(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, tier := range tiers {
		t.Run(tier, func(t *testing.T) {
			forEachIdentity(t, func(t *testing.T, h *harness) {
				if tier == "native" {
					f(t, h)
					return
				}
				if h.who.uid != 0 {
					t.Skip("the gVisor tier needs cordon to run as root: runsc must be root in the sandbox's user namespace while the agent's uid owns the workspace there, and a user namespace made without root maps one id")
				}
				h.useGVisor(t)
				f(t, h)
			})
		})
	}
}

// useGVisor makes every `cordon run` of the harness ask for the gVisor tier, with runsc on its PATH.
func (h *harness) useGVisor(t *testing.T) {
	runsc := runscPath(t)
	h.tier = "gvisor"
	for i, kv := range h.env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			h.env[i] = "PATH=" + filepath.Dir(runsc) + ":" + v
		}
	}
}

// runscPath is the runsc the gVisor tier's tests use; its absence fails the test.
func runscPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	if _, err := os.Stat("/root/go/bin/runsc"); err == nil {
		return "/root/go/bin/runsc"
	}
	t.Fatal("runsc not found on PATH or at /root/go/bin/runsc: the gVisor tier's tests need it (.ci/run builds it)")
	return ""
}

func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (.ci/run installs it)", name)
	}
}
