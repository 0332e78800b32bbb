//go:build linux

package probe

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Resource probes check that limits are in force, from the kernel's own files, and make only small,
// capped attempts, so that running them unsandboxed cannot hurt the host.
func resourceProbes() []Probe {
	return []Probe{
		{"res.pids", Resources, "check a process limit holds (and spawn a few past it when it is small)", resPids},
		{"res.memory", Resources, "check a memory limit is in force (cgroup memory.max, RLIMIT_DATA or RLIMIT_AS)", resMemory},
		{"res.cpu", Resources, "check a CPU limit is in force (cgroup cpu.max)", resCPU},
		{"res.open-files", Resources, "open files past the open-files limit (RLIMIT_NOFILE), raising it first", resOpenFiles},
		{"res.core-dumps", Resources, "raise the core-dump limit and crash a process (SIGSEGV, SIGQUIT): no core file may be written", resCoreDumps},
	}
}

// AllocMain is the res.memory child's main.
func AllocMain(args []string) int {
	if len(args) != 1 {
		return 2
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return 2
	}
	fmt.Println("STARTED")
	b := make([]byte, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
		if i%(64<<20) == 0 {
			fmt.Println("TOUCHED", i)
		}
	}
	fmt.Println("ALLOCATED", len(b))
	return 0
}

// unlimited is the value cgroup v1 reports for "no limit" (rounded to a page), and beyond.
const unlimited = int64(1) << 62

// cgroupLimit returns the tightest value of a controller's limit file over this process's cgroup and
// its ancestors, in cgroup v2 (file2) or v1 (controller/file1), or math.MaxInt64 when none is visible.
func cgroupLimit(controller, file2, file1 string) (int64, string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return math.MaxInt64, ""
	}
	best, where := int64(math.MaxInt64), ""
	try := func(root, rel, file string) {
		for dir := filepath.Join(root, rel); strings.HasPrefix(dir, root); dir = filepath.Dir(dir) {
			v, err := os.ReadFile(filepath.Join(dir, file))
			if err == nil {
				f := strings.Fields(string(v))
				if len(f) > 0 && f[0] != "max" {
					if n, err := strconv.ParseInt(f[0], 10, 64); err == nil && n >= 0 && n < unlimited && n < best {
						best, where = n, filepath.Join(dir, file)
					}
				}
			}
			if dir == root {
				break
			}
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			try("/sys/fs/cgroup", parts[2], file2)
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				try("/sys/fs/cgroup/"+parts[1], parts[2], file1)
			}
		}
	}
	return best, where
}

func rlimit(res int) uint64 {
	var r unix.Rlimit
	if unix.Getrlimit(res, &r) != nil {
		return unix.RLIM_INFINITY
	}
	return r.Max
}

// wanted is the policy's limit when cordon verify passed the policy's limits; ok is false when the
// probe runs alone.
func wanted(env *Env, f func(*Limits) int64) (int64, bool) {
	if env.Canaries.Limits == nil {
		return 0, false
	}
	return f(env.Canaries.Limits), true
}

// pidsBound is the largest process limit res.pids accepts when it runs alone: above it a fork bomb
// still hurts the host.
const pidsBound = 4096

// spawnTimeout bounds res.pids' attempt, inside the runner's timeout.
const spawnTimeout = 6 * time.Second

func resPids(ctx context.Context, env *Env) Verdict {
	want, known := wanted(env, func(l *Limits) int64 { return l.Pids })
	if known && want == 0 {
		return skip("the policy sets no limits.pids: a fork bomb inside is bounded only by the host")
	}
	if !known {
		// Alone, judge by what the kernel shows: spawning thousands to find out would hurt the host.
		found, where := cgroupLimit("pids", "pids.max", "pids.max")
		if n := rlimit(unix.RLIMIT_NPROC); os.Geteuid() != 0 && n != unix.RLIM_INFINITY && int64(n) < found {
			found, where = int64(n), "RLIMIT_NPROC"
		}
		if found > pidsBound {
			if found == math.MaxInt64 {
				return fail("no process limit is in force (no cgroup pids.max, no RLIMIT_NPROC)")
			}
			return fail("the process limit is %d (%s): a fork bomb can still hurt the host", found, where)
		}
		return pass("processes bounded at %d (%s)", found, where)
	}
	// The policy's limit is small enough to test: spawn a few past it.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return skip("no sleep binary to spawn")
	}
	var started []*exec.Cmd
	defer func() {
		for _, c := range started {
			c.Process.Kill()
			c.Wait()
		}
	}()
	deadline := time.Now().Add(spawnTimeout)
	for i := int64(0); i < min(want, pidsBound)+8; i++ {
		if time.Now().After(deadline) {
			return skip("too slow to judge here: %d processes spawned in %s, short of the limit %d", len(started), spawnTimeout, want)
		}
		c := exec.CommandContext(ctx, sleep, "10")
		if err := c.Start(); err != nil {
			return pass("spawning stopped after %d processes: %v", len(started), err)
		}
		started = append(started, c)
	}
	return fail("the policy sets limits.pids %d, yet %d processes were spawned", want, len(started))
}

// allocCap bounds res.memory's attempt: above it the probe judges from the limit files alone.
const allocCap = 2 << 30

// allocTimeout bounds res.memory's attempt.
const allocTimeout = 4 * time.Second

func resMemory(ctx context.Context, env *Env) Verdict {
	want, known := wanted(env, func(l *Limits) int64 { return l.MemoryBytes })
	if known && want == 0 {
		return skip("the policy sets no limits.memory: nothing but the host bounds it")
	}
	found, where := cgroupLimit("memory", "memory.max", "memory.limit_in_bytes")
	for _, rl := range []struct {
		res  int
		name string
	}{{unix.RLIMIT_AS, "RLIMIT_AS (per process)"}, {unix.RLIMIT_DATA, "RLIMIT_DATA (per process)"}} {
		if n := rlimit(rl.res); n != unix.RLIM_INFINITY && int64(n) < found {
			found, where = int64(n), rl.name
		}
	}
	if want > 0 && env.Canaries.Limits.MemoryWholeBox {
		return skip("limits.memory %d bounds the whole box from the host (this tier's kernel keeps no limit of its own), so an allocation past it would end the probes too; it is attacked from outside (cmd/cordon TestLimits/gvisor/memory)", want)
	}
	if want > 0 && want <= allocCap {
		// Allocate a little more than the limit in a child: it must not succeed.
		// A kernel that reclaims hard before killing can hold the child at the limit for a long time:
		// the attempt is bounded, and judged by how far it got.
		size := want + 64<<20
		actx, cancel := context.WithTimeout(ctx, allocTimeout)
		defer cancel()
		cmd := exec.CommandContext(actx, "/proc/self/exe", strconv.FormatInt(size, 10))
		cmd.Args[0] = AllocArg0
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "ALLOCATED") {
			return fail("the policy sets limits.memory %d, yet a process allocated and touched %d bytes", want, size)
		}
		if !strings.Contains(string(out), "STARTED") {
			return skip("the allocating child did not start (%v), so the limit was not tested", err)
		}
		reached := int64(-1)
		if i := strings.LastIndex(string(out), "TOUCHED "); i >= 0 {
			reached, _ = strconv.ParseInt(strings.Fields(string(out)[i+len("TOUCHED "):])[0], 10, 64)
		}
		if actx.Err() != nil {
			// Still running: held near the limit (the kernel reclaiming), or this machine is slow.
			if reached >= want-64<<20 {
				return pass("a child asking for %d bytes was held at the limit: it had touched %d bytes after %s", size, reached, allocTimeout)
			}
			return skip("too slow to judge here: a child had touched only %d of %d bytes after %s", reached, size, allocTimeout)
		}
		return pass("a child asking for %d bytes was stopped after touching %d: %v", size, max(reached, 0), err)
	}
	if found == math.MaxInt64 {
		if known {
			return skip("no memory limit is visible from inside, and %d bytes is too much to try", want)
		}
		return fail("no memory limit is in force (no cgroup limit visible, no RLIMIT_DATA or RLIMIT_AS)")
	}
	if want > 0 && found > want {
		return fail("the policy sets limits.memory %d but %d is in force (%s)", want, found, where)
	}
	return pass("memory bounded at %d (%s)", found, where)
}

func resCPU(_ context.Context, env *Env) Verdict {
	want, known := wanted(env, func(l *Limits) int64 { return int64(l.CPU * 1000) })
	if known && want == 0 {
		return skip("the policy sets no limits.cpu: nothing but the host bounds it")
	}
	quota, where := cgroupLimit("cpu", "cpu.max", "cpu.cfs_quota_us")
	if quota == math.MaxInt64 {
		if known {
			return skip("the CPU quota is not visible from inside (no cgroup file); it cannot be judged here")
		}
		return fail("no CPU limit is in force (no cgroup quota visible)")
	}
	return pass("CPU quota %d (%s)", quota, where)
}

// filesBound is the largest open-files limit res.open-files opens files up to; above it the probe
// judges by the limit alone.
const filesBound = 1 << 16

// FilesMain is res.open-files' child's main: it sets its open-files limit, soft and hard, to args[0]
// (past the hard limit that takes a privilege a sandbox must not hold) or, refused, its soft limit to
// the hard one, then opens /dev/null until the kernel refuses or args[0] descriptors are open, and
// prints how far it got.
func FilesMain(args []string) int {
	if len(args) != 1 {
		return 2
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || n == 0 {
		return 2
	}
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		fmt.Println("ERROR getrlimit:", err)
		return 1
	}
	raised := "allowed"
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		raised = "refused:" + errName(err)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: r.Max, Max: r.Max}); err != nil {
			fmt.Println("ERROR setrlimit:", err)
			return 1
		}
	} else {
		r.Max = n
	}
	highest, stop := -1, "reached the count"
	for i := uint64(0); i < n; i++ {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			stop = errName(err)
			break
		}
		highest = max(highest, fd)
	}
	fmt.Printf("HARD %s LIMIT %d HIGHEST %d STOPPED %s\n", raised, r.Max, highest, strings.ReplaceAll(stop, " ", "-"))
	return 0
}

func resOpenFiles(ctx context.Context, env *Env) Verdict {
	want, known := wanted(env, func(l *Limits) int64 { return int64(l.OpenFiles) })
	n := rlimit(unix.RLIMIT_NOFILE)
	switch {
	case known && want == 0:
		return skip("the policy sets no limits.openFiles (the hard limit here is %d)", n)
	case n == unix.RLIM_INFINITY:
		return fail("no open-files limit")
	}
	limit := uint64(want)
	if !known {
		limit = n
	}
	if limit <= filesBound {
		// Open past the limit in a child, after raising it there: the descriptors must stop at it.
		try := limit + 64
		cmd := exec.CommandContext(ctx, "/proc/self/exe", strconv.FormatUint(try, 10))
		cmd.Args[0] = FilesArg0
		out, err := cmd.Output()
		f := strings.Fields(string(out))
		if err != nil || len(f) != 8 || f[0] != "HARD" {
			return skip("the child opening files did not report (%v): %s", err, strings.TrimSpace(string(out)))
		}
		highest, _ := strconv.Atoi(f[5])
		if highest >= int(limit) {
			return fail("the limit is %d, yet a process opened descriptor %d (setting its hard limit to %d: %s; the limit it then had: %s)", limit, highest, try, f[1], f[3])
		}
		if want > 0 && n > uint64(want) {
			return fail("the policy sets limits.openFiles %d but the hard limit is %d", want, n)
		}
		return pass("a process opening %d files stopped at descriptor %d (%s); setting its hard limit to %d: %s", try, highest, f[7], try, f[1])
	}
	if want > 0 && n > uint64(want) {
		return fail("the policy sets limits.openFiles %d but the hard limit is %d", want, n)
	}
	return pass("open files bounded at %d (RLIMIT_NOFILE hard limit; above %d, not tried)", n, uint64(filesBound))
}

// crashSignals are the signals whose default action dumps core that res.core-dumps kills with.
var crashSignals = []unix.Signal{unix.SIGSEGV, unix.SIGQUIT}

// resCoreDumps: no core dump may be written, whatever the command does with its limits. A dump holds
// the crashed process's memory (tokens, keys) and lands where the kernel's core_pattern says: in the
// workspace, or on the host through a pipe to a collector.
func resCoreDumps(ctx context.Context, env *Env) Verdict {
	var found []string
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CORE, &r); err != nil {
		return skip("getrlimit: %v", err)
	}
	if r.Cur != 0 || r.Max != 0 {
		found = append(found, fmt.Sprintf("RLIMIT_CORE is %s (soft) and %s (hard)", rlimString(r.Cur), rlimString(r.Max)))
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return skip("no sleep binary to crash")
	}
	d, done, err := scratch(env)
	if err != nil {
		return skip("%v", err)
	}
	defer done()
	var notes []string
	for _, sig := range crashSignals {
		cmd := exec.CommandContext(ctx, sleep, "10")
		cmd.Dir = d
		if err := cmd.Start(); err != nil {
			return skip("cannot start a process to crash: %v", err)
		}
		pid := cmd.Process.Pid
		// Raise the child's limit as far as it goes: to unlimited, else to the hard limit.
		raised := unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}, nil)
		if raised == nil {
			if sig == crashSignals[0] {
				found = append(found, "raised a process's RLIMIT_CORE to unlimited")
			}
		} else {
			unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{Cur: r.Max, Max: r.Max}, nil)
		}
		cmd.Process.Signal(sig)
		if cmd.Wait(); cmd.ProcessState == nil {
			return skip("the crashed process could not be waited for")
		}
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ws.CoreDump() {
			found = append(found, fmt.Sprintf("a process killed by %s dumped core", unix.SignalName(sig)))
		}
		if raised != nil {
			notes = append(notes, fmt.Sprintf("%s: %s, raising the limit: %s", unix.SignalName(sig), ws.Signal(), errName(raised)))
		}
	}
	if ents, _ := os.ReadDir(d); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		found = append(found, fmt.Sprintf("left %s in the crashed processes' directory", strings.Join(names, ", ")))
	}
	if len(found) > 0 {
		return fail("%s: a crash writes the process's memory to disk", strings.Join(found, "; "))
	}
	return pass("RLIMIT_CORE is 0 (soft and hard); %s; no core dumped, none in the directory", strings.Join(notes, "; "))
}

// rlimString names a limit's value.
func rlimString(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}
