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

	"golang.org/x/sys/unix"
)

// Resource probes check that limits are in force, from the kernel's own files, and make only small,
// capped attempts, so that running them unsandboxed cannot hurt the host.
func resourceProbes() []Probe {
	return []Probe{
		{"res.pids", Resources, "check a process limit holds (and spawn a few past it when it is small)", resPids},
		{"res.memory", Resources, "check a memory limit is in force (cgroup memory.max or RLIMIT_AS)", resMemory},
		{"res.cpu", Resources, "check a CPU limit is in force (cgroup cpu.max)", resCPU},
		{"res.open-files", Resources, "check the open-files limit (RLIMIT_NOFILE)", resOpenFiles},
	}
}

// cgroupLimit returns the tightest value of file over this process's cgroup and its ancestors, or
// math.MaxInt64 when none sets one ("max").
func cgroupLimit(file string) (int64, string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return math.MaxInt64, ""
	}
	var rel string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	if rel == "" {
		return math.MaxInt64, ""
	}
	best, where := int64(math.MaxInt64), ""
	for dir := filepath.Join("/sys/fs/cgroup", rel); strings.HasPrefix(dir, "/sys/fs/cgroup"); dir = filepath.Dir(dir) {
		v, err := os.ReadFile(filepath.Join(dir, file))
		if err == nil {
			f := strings.Fields(string(v))
			if len(f) > 0 && f[0] != "max" {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil && n < best {
					best, where = n, filepath.Join(dir, file)
				}
			}
		}
		if dir == "/sys/fs/cgroup" {
			break
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

// judgeLimit compares the limit found with the one the policy sets (want, zero: none set).
func judgeLimit(env *Env, what string, found int64, where string, want int64) Verdict {
	limited := found != math.MaxInt64
	switch {
	case env.Canaries.Limits != nil && want == 0:
		if limited {
			return skip("the policy sets no %s (found %d from %s)", what, found, where)
		}
		return skip("the policy sets no %s: nothing but the host bounds it", what)
	case !limited:
		return fail("no %s limit is in force", what)
	case want > 0 && found > want:
		return fail("the policy sets %s %d but %d is in force (%s)", what, want, found, where)
	}
	return pass("%s bounded at %d (%s)", what, found, where)
}

func resPids(ctx context.Context, env *Env) Verdict {
	found, where := cgroupLimit("pids.max")
	if n := rlimit(unix.RLIMIT_NPROC); os.Geteuid() != 0 && n != unix.RLIM_INFINITY && int64(n) < found {
		found, where = int64(n), "RLIMIT_NPROC"
	}
	var want int64
	if env.Canaries.Limits != nil {
		want = env.Canaries.Limits.Pids
	}
	v := judgeLimit(env, "limits.pids", found, where, want)
	if v.Status != Pass || found > 256 {
		return v
	}
	// Small enough to test without harm: spawn up to the limit plus a few.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return v
	}
	var started []*exec.Cmd
	defer func() {
		for _, c := range started {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for i := int64(0); i < found+8; i++ {
		c := exec.CommandContext(ctx, sleep, "5")
		if c.Start() != nil {
			return pass("%s; spawning stopped after %d processes", v.Evidence, len(started))
		}
		started = append(started, c)
	}
	return fail("%s, yet %d processes were spawned", v.Evidence, len(started))
}

func resMemory(_ context.Context, env *Env) Verdict {
	found, where := cgroupLimit("memory.max")
	if n := rlimit(unix.RLIMIT_AS); n != unix.RLIM_INFINITY && int64(n) < found {
		found, where = int64(n), "RLIMIT_AS (per process)"
	}
	var want int64
	if env.Canaries.Limits != nil {
		want = env.Canaries.Limits.MemoryBytes
	}
	return judgeLimit(env, "limits.memory", found, where, want)
}

func resCPU(_ context.Context, env *Env) Verdict {
	quota, where := cgroupLimit("cpu.max")
	var want int64
	if env.Canaries.Limits != nil && env.Canaries.Limits.CPU > 0 {
		want = 1 // judged below against the quota and period
	}
	v := judgeLimit(env, "limits.cpu", quota, where, want)
	if v.Status == Pass && env.Canaries.Limits != nil && env.Canaries.Limits.CPU > 0 {
		b, _ := os.ReadFile(where)
		var q, per float64
		if _, err := fmt.Sscan(string(b), &q, &per); err == nil && per > 0 {
			if got := q / per; got > env.Canaries.Limits.CPU*1.01 {
				return fail("the policy sets limits.cpu %.2f but %s allows %.2f", env.Canaries.Limits.CPU, where, got)
			}
			return pass("CPU bounded at %.2f cores (%s)", q/per, where)
		}
	}
	if v.Status == Fail && want == 1 && quota != math.MaxInt64 {
		return pass("CPU bounded (%s)", where)
	}
	return v
}

func resOpenFiles(_ context.Context, env *Env) Verdict {
	n := rlimit(unix.RLIMIT_NOFILE)
	found := int64(math.MaxInt64)
	if n != unix.RLIM_INFINITY && n < math.MaxInt64 {
		found = int64(n)
	}
	var want int64
	if env.Canaries.Limits != nil {
		want = int64(env.Canaries.Limits.OpenFiles)
	}
	return judgeLimit(env, "limits.openFiles", found, "RLIMIT_NOFILE hard limit", want)
}
