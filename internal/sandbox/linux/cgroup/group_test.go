//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Detect on this host, as whoever runs the tests: it must agree with the mount table, give a reason for
// every unusable controller, and leave no probe behind. As root, a controller with a v1 hierarchy of its
// own must be usable (v1 has no delegation rules to get in the way).
func TestDetectThisHost(t *testing.T) {
	h, err := readHost()
	if err != nil {
		t.Skipf("no cgroup hierarchy here: %v", err)
	}
	info, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", info)
	if info.Version != h.version() || info.Version == "none" {
		t.Errorf("Version = %q, host is %q", info.Version, h.version())
	}
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil && h.v1(Memory) != nil && info.Version != "hybrid" {
		t.Errorf("v1 memory plus /sys/fs/cgroup/unified is hybrid, got %q", info.Version)
	}
	for _, c := range []string{Memory, Pids, CPU} {
		if _, ok := info.Controllers[c]; !ok {
			t.Errorf("Controllers lacks %s", c)
		}
		if !info.Controllers[c] && info.Reasons[c] == "" {
			t.Errorf("%s unusable without a reason", c)
		}
		if os.Geteuid() == 0 && h.v1(c) != nil && !info.Controllers[c] {
			t.Errorf("%s has a v1 hierarchy but is unusable as root: %s", c, info.Reasons[c])
		}
	}
	if os.Geteuid() == 0 && h.v2() != nil && exists(filepath.Join(h.v2().cur, "cgroup.kill")) && info.Kill != "cgroup.kill" {
		t.Errorf("Kill = %q on a kernel with cgroup.kill", info.Kill)
	}
	// The probe is gone.
	for _, p := range info.Parents {
		matches, _ := filepath.Glob(filepath.Join(p, fmt.Sprintf("cordon-probe-%d-*", os.Getpid())))
		if len(matches) > 0 {
			t.Errorf("probe left behind: %v", matches)
		}
	}
}

// The limit files hold what was asked, read back from the kernel.
func TestLimitsWritten(t *testing.T) {
	needRoot(t)
	for _, c := range []string{Memory, Pids, CPU} {
		needController(t, c)
	}
	g := newTestGroup(t, Limits{MemoryBytes: 64 << 20, Pids: 50, CPU: 1.5})
	g.mu.Lock()
	defer g.mu.Unlock()
	check := func(c, file, want string) {
		d := g.dirFor(c)
		if d == nil {
			t.Fatalf("no directory for %s", c)
		}
		got, err := readString(filepath.Join(d.Path, file))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s/%s = %q, want %q", d.Path, file, got, want)
		}
	}
	check(Pids, "pids.max", "50")
	if d := g.dirFor(Memory); d.V2 {
		check(Memory, "memory.max", "67108864")
		check(Memory, "memory.oom.group", "1")
		check(CPU, "cpu.max", "150000 100000")
	} else {
		check(Memory, "memory.limit_in_bytes", "67108864")
		if exists(filepath.Join(d.Path, "memory.memsw.limit_in_bytes")) {
			check(Memory, "memory.memsw.limit_in_bytes", "67108864")
		}
		check(CPU, "cpu.cfs_quota_us", "150000")
		check(CPU, "cpu.cfs_period_us", "100000")
	}
	for _, p := range g.dirs {
		if rel, err := filepath.Rel(filepath.Dir(p.Path), p.Path); err != nil || rel != testName(t) {
			t.Errorf("%s is not named after the run", p.Path)
		}
	}
}

// forkLoop is a shell that starts up to n sleeping children, printing the count after each; when a fork
// fails the shell stops. The last number it prints is how many it managed.
const forkLoop = `read x; i=0; while [ $i -lt %d ]; do sleep 30 >/dev/null 2>&1 </dev/null & i=$((i+1)); echo $i; done`

func forkCount(t *testing.T, g *Group, n int) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", fmt.Sprintf(forkLoop, n))
	out := lines(t, cmd)
	startGated(t, g, cmd)
	last := 0
	for l := range out {
		if v, err := strconv.Atoi(l); err == nil {
			last = v
		}
	}
	_ = cmd.Wait()
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	return last
}

func TestPidsLimitHoldsAForkLoop(t *testing.T) {
	needRoot(t)
	needController(t, Pids)
	const max = 12
	limited := newTestGroup(t, Limits{Pids: max})
	// The control runs in a group without a pids limit, so its children are killed all the same.
	free, _, err := New(testName(t)+"-control", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = free.Destroy() })

	got := forkCount(t, limited, 3*max)
	control := forkCount(t, free, 3*max)
	t.Logf("with pids.max=%d: %d children; without: %d", max, got, control)
	// The shell itself counts: it stops one short of pids.max.
	if got > max-1 || got < max-3 {
		t.Errorf("limited fork loop made %d children, want about %d", got, max-1)
	}
	if control != 3*max {
		t.Errorf("control made %d children, want %d: the comparison proves nothing", control, 3*max)
	}
}

func TestMemoryLimitOOMKills(t *testing.T) {
	needRoot(t)
	needController(t, Memory)
	g := newTestGroup(t, Limits{MemoryBytes: 64 << 20})
	run := func(mib int) error {
		cmd := exec.Command(os.Args[0], "__alloc", strconv.Itoa(mib))
		startGated(t, g, cmd)
		return cmd.Wait()
	}
	if err := run(8); err != nil {
		t.Fatalf("control allocating 8 MiB under a 64 MiB limit failed: %v", err)
	}
	err := run(256)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("allocating 256 MiB under a 64 MiB limit: %v, want death by SIGKILL (OOM)", err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v", st)
	if st.OOMKills == 0 {
		t.Errorf("OOMKills = 0 after an OOM kill")
	}
	if st.MemoryPeak > 64<<20+1<<20 {
		t.Errorf("MemoryPeak %d exceeds the limit", st.MemoryPeak)
	}
}

// treeScript starts a tree that ignores SIGTERM at every level: a subshell, a shell that loops forever,
// and a plain sleep, then reports ready and waits.
const treeScript = `read x; trap '' TERM
(trap '' TERM; sleep 1000) &
sh -c 'trap "" TERM INT HUP; while :; do sleep 1; done' &
sleep 1000 &
echo ready; wait`

// Kill must take the whole tree, whatever mechanism this host's group uses. Each variant builds the group
// on a host view that leaves only that mechanism.
func TestKillTakesTheTree(t *testing.T) {
	real := needRoot(t)
	variants := map[string]*host{}
	if real.v2() != nil {
		variants["cgroup.kill"] = onlyHierarchy(real, func(x hierarchy) bool { return x.v2 })
	}
	if real.v1("freezer") != nil {
		variants["v1 freezer"] = onlyHierarchy(real, func(x hierarchy) bool { return x.has("freezer") })
	}
	if real.v1(Pids) != nil {
		variants["signal rounds"] = onlyHierarchy(real, func(x hierarchy) bool { return x.has(Pids) && !x.has("freezer") })
	}
	if len(variants) == 0 {
		t.Skip("no hierarchy to test")
	}
	for name, h := range variants {
		t.Run(name, func(t *testing.T) {
			g, _, err := create(h, testName(t), Limits{Pids: 1000}, options{})
			if err != nil {
				t.Skipf("cannot create a group here: %v", err)
			}
			if len(g.dirs) != 1 {
				t.Fatalf("dirs %+v, want exactly the one under test", g.dirs)
			}
			t.Cleanup(func() { _ = g.Destroy() })
			cmd := exec.Command("sh", "-c", treeScript)
			out := lines(t, cmd)
			startGated(t, g, cmd)
			if l := <-out; l != "ready" {
				t.Fatalf("tree said %q", l)
			}
			pids, err := members(g.Paths())
			if err != nil {
				t.Fatal(err)
			}
			if len(pids) < 4 {
				t.Fatalf("tree has %d processes, want at least 4: %v", len(pids), pids)
			}
			var fds []int
			for _, p := range pids {
				fds = append(fds, pidfd(t, p))
				_ = syscall.Kill(p, syscall.SIGTERM)
			}
			// SIGTERM left the tree alive, so a Kill that merely terminated would fail below. (The
			// loop's "sleep 1" may end on its own, hence "at least 3" rather than all.)
			time.Sleep(50 * time.Millisecond)
			alive := 0
			for _, fd := range fds {
				if !exited(fd, 0) {
					alive++
				}
			}
			if alive < 3 || exited(pidfd(t, cmd.Process.Pid), 0) {
				t.Fatalf("SIGTERM killed the tree (%d of %d alive): the test proves nothing", alive, len(fds))
			}
			start := time.Now()
			if err := g.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			t.Logf("Kill took %v", time.Since(start))
			for i, fd := range fds {
				if !exited(fd, 2*time.Second) {
					t.Errorf("pid %d survived Kill", pids[i])
				}
			}
			if err := g.Destroy(); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
		})
	}
}

func TestDestroyLeavesNothing(t *testing.T) {
	needRoot(t)
	g, _, err := New(testName(t), Limits{Pids: 100, MemoryBytes: 256 << 20, CPU: 1})
	if err != nil {
		t.Fatal(err)
	}
	paths := g.Paths()
	cmd := exec.Command("sh", "-c", "read x; sleep 1000 & sleep 1000")
	startGated(t, g, cmd)
	// A sub-cgroup made inside the run (a delegated sandbox may do that) goes too.
	if err := os.Mkdir(filepath.Join(paths[0], "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if err := g.Add(os.Getpid()); err == nil {
		t.Error("Add after Destroy succeeded")
	}
	if err := g.Kill(); err != nil {
		t.Errorf("Kill after Destroy: %v", err)
	}
}

// What this host's cgroup2 mount allows on its own: create, add, cgroup.kill, rmdir.
func TestV2Lifecycle(t *testing.T) {
	real := needRoot(t)
	if real.v2() == nil {
		t.Skip("no cgroup2 mount here")
	}
	h := onlyHierarchy(real, func(x hierarchy) bool { return x.v2 })
	g, _, err := create(h, testName(t), Limits{}, options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Destroy() })
	p := g.Paths()[0]
	if !strings.HasPrefix(p, real.v2().cur+"/") {
		t.Fatalf("%s is not under the current v2 cgroup %s", p, real.v2().cur)
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd := pidfd(t, cmd.Process.Pid)
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if pids, _ := readPids(filepath.Join(p, "cgroup.procs")); len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("cgroup.procs = %v, want [%d]", pids, cmd.Process.Pid)
	}
	if ev, _ := fileFields(filepath.Join(p, "cgroup.events")); ev["populated"] != "1" {
		t.Errorf("cgroup.events populated = %q", ev["populated"])
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if !exited(fd, 2*time.Second) {
		t.Fatal("cgroup.kill did not kill")
	}
	_ = cmd.Wait()
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if exists(p) {
		t.Errorf("%s left behind", p)
	}
}

// On v2, controllers cannot be enabled for children of a cgroup that holds processes. cordon moves
// itself into a leaf when it is alone, and refuses to when it is not. Exercised with whatever controller
// this host's v2 root offers, in a test cgroup made for the purpose.
func TestV2SelfMoveToLeaf(t *testing.T) {
	real := needRoot(t)
	v2 := real.v2()
	if v2 == nil {
		t.Skip("no cgroup2 mount here")
	}
	avail, _ := readString(filepath.Join(v2.cur, "cgroup.controllers"))
	if avail == "" {
		t.Skip("the v2 hierarchy offers no controller to enable")
	}
	c := strings.Fields(avail)[0]
	ctl := filepath.Join(v2.cur, "cgroup.subtree_control")
	before, _ := readString(ctl)
	if !strings.Contains(" "+before+" ", " "+c+" ") {
		if err := writeFile(ctl, "+"+c); err != nil {
			t.Skipf("cannot enable %s in %s: %v", c, ctl, err)
		}
		t.Cleanup(func() { _ = writeFile(ctl, "-"+c) })
	}
	for _, alone := range []bool{true, false} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			cur := filepath.Join(v2.cur, testName(t))
			if err := os.Mkdir(cur, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				g := &Group{dirs: []dir{{Path: cur, V2: true}}}
				if err := g.Destroy(); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
			if !alone {
				other := exec.Command("sleep", "1000")
				if err := other.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
				if err := writeFile(filepath.Join(cur, "cgroup.procs"), strconv.Itoa(other.Process.Pid)); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(os.Args[0], "__leaf", cur, c)
			out := lines(t, cmd)
			in, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
			got := <-out + " " + <-out
			t.Log(got)
			sub, _ := readString(filepath.Join(cur, "cgroup.subtree_control"))
			rel := strings.TrimPrefix(cur, v2.mount)
			if alone {
				if !strings.Contains(got, "enabled="+c+" ") || sub != c || !strings.Contains(got, "cgroup="+rel+"/"+leafName) {
					t.Errorf("alone: got %q, subtree_control %q; want %s enabled and the process in %s", got, sub, c, leafName)
				}
			} else {
				if !strings.Contains(got, "enabled= ") || sub != "" || !strings.Contains(got, "holds processes") || !strings.HasSuffix(got, "cgroup="+rel) {
					t.Errorf("not alone: got %q, subtree_control %q; want nothing enabled and no move", got, sub)
				}
			}
		})
	}
}
