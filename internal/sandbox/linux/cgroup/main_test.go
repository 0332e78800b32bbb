//go:build linux

package cgroup

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the helper processes the tests need, dispatched on os.Args[1] before the
// testing package parses flags: the reaper itself, a process that holds a reaper's keepalive and gets
// SIGKILLed, a memory allocator, and a process that moves itself into a leaf cgroup.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "__reaper":
			os.Exit(ReaperMain())
		case "__holder":
			os.Exit(holderMain(os.Args[2]))
		case "__alloc":
			os.Exit(allocMain(os.Args[2]))
		case "__leaf":
			os.Exit(leafMain(os.Args[2], os.Args[3]))
		}
	}
	os.Exit(m.Run())
}

// holderReport is what holderMain prints once its group, reaper and sleeping child are set up.
type holderReport struct {
	Paths []string `json:"paths"`
	Dirs  []dir    `json:"dirs"`
	Child int      `json:"child"`
	Err   string   `json:"err,omitempty"`
}

// holderMain plays cordon: it creates a group, starts the reaper, puts a sleeping child in the group,
// reports, and waits to be SIGKILLed. With name ending in "-clean" it instead exits normally:
// Destroy, then close the keepalive.
func holderMain(name string) int {
	report := func(r holderReport) { _ = json.NewEncoder(os.Stdout).Encode(r) }
	g, _, err := New(name, Limits{Pids: 64})
	if err != nil {
		report(holderReport{Err: err.Error()})
		return 1
	}
	keep, err := StartReaper(os.Args[0], []string{os.Args[0], "__reaper"}, g)
	if err != nil {
		_ = g.Destroy()
		report(holderReport{Err: err.Error()})
		return 1
	}
	child := exec.Command("sleep", "1000")
	if err := child.Start(); err != nil {
		report(holderReport{Err: err.Error()})
		return 1
	}
	if err := g.Add(child.Process.Pid); err != nil {
		report(holderReport{Err: err.Error()})
		return 1
	}
	report(holderReport{Paths: g.Paths(), Dirs: g.dirs, Child: child.Process.Pid})
	if strings.HasSuffix(name, "-clean") {
		// Give the test time to see the group alive before the normal exit.
		time.Sleep(300 * time.Millisecond)
		if err := g.Destroy(); err != nil {
			return 1
		}
		keep.Close()
		return 0
	}
	select {} // until SIGKILL
}

// allocMain waits for a byte on stdin (the parent adds it to a cgroup meanwhile), then allocates and
// touches mib MiB, and exits 0 if it survived.
func allocMain(mib string) int {
	n, err := strconv.Atoi(mib)
	if err != nil {
		return 2
	}
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
		return 2
	}
	b := make([]byte, n<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("allocated", len(b))
	return 0
}

// leafMain moves itself into cur (as if started there), then asks enableV2 for controller c, allowing the
// move into a leaf, and prints which controllers got enabled and where it ended up.
func leafMain(cur, c string) int {
	if err := writeFile(filepath.Join(cur, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	h := &host{pid: os.Getpid()}
	g := &Group{why: map[string]string{}}
	enabled := enableV2(h, cur, []string{c}, true, g)
	self, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("enabled=%s why=%q\n", strings.Join(enabled, ","), g.why[c])
	for _, l := range strings.Split(string(self), "\n") {
		if strings.HasPrefix(l, "0::") {
			fmt.Println("cgroup=" + strings.TrimPrefix(l, "0::"))
		}
	}
	_, _ = os.Stdin.Read(make([]byte, 1)) // stay until the test has looked
	return 0
}

// needRoot skips tests that create real cgroups when not root.
func needRoot(t *testing.T) *host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root (or a delegated cgroup); skipping")
	}
	h, err := readHost()
	if err != nil {
		t.Skipf("no cgroup hierarchy here: %v", err)
	}
	return h
}

// needController skips unless controller c is usable here.
func needController(t *testing.T, c string) {
	t.Helper()
	info, err := Detect()
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if !info.Controllers[c] {
		t.Skipf("the %s controller is not usable here: %s", c, info.Reasons[c])
	}
}

// testName returns a cgroup name unique to this test and process.
func testName(t *testing.T) string {
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, t.Name())
	return fmt.Sprintf("cordon-test-%d-%s", os.Getpid(), safe)
}

// newTestGroup is New with cleanup and no unenforced limit allowed.
func newTestGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	g, unenforced, err := New(testName(t), l)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	for _, u := range unenforced {
		t.Fatalf("limit %s unenforced: %s", u, g.Why(u))
	}
	return g
}

// startGated starts cmd with a stdin pipe it waits on, adds it to g, and lets it go.
func startGated(t *testing.T, g *Group, cmd *exec.Cmd) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if g != nil {
		if err := g.Add(cmd.Process.Pid); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	if _, err := in.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	in.Close()
}

// pidfd pins a process so that its death can be observed without pid-reuse races.
func pidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// exited waits up to d for the process behind pidfd fd to exit. A signal (the SIGCHLD of a holder
// that died) interrupts the wait, which then goes on for the time left.
func exited(fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(max(time.Until(deadline), 0)/time.Millisecond))
		if err != unix.EINTR {
			return err == nil && n == 1
		}
	}
}

// lines reads the lines cmd writes to its stdout as they come.
func lines(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	return ch
}

// onlyHierarchy shapes a view of the host with only the hierarchies keep accepts, to exercise one
// mechanism (cgroup.kill, the v1 freezer, plain signals) on a host that has several.
func onlyHierarchy(h *host, keep func(hierarchy) bool) *host {
	c := *h
	c.hierarchies = slices.DeleteFunc(slices.Clone(h.hierarchies), func(x hierarchy) bool { return !keep(x) })
	return &c
}
