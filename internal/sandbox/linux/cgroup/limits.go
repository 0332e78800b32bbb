//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Limits are the resource limits of one run. Zero means "no limit" for each field.
type Limits struct {
	// MemoryBytes caps the memory (and, where the host accounts it, memory plus swap) of the whole run.
	MemoryBytes int64
	// Pids caps the number of processes and threads of the whole run, which is what stops fork bombs.
	Pids int64
	// CPU is the CPU time the run may use, in CPUs (1.5 = one and a half cores' worth per period).
	CPU float64
}

// Names of the limits, as returned in New's unenforced list and used as keys of Info.Controllers.
// They are also the names of the cgroup controllers that enforce them.
const (
	Memory = "memory"
	Pids   = "pids"
	CPU    = "cpu"
)

// cpuPeriodUS is the CFS period used for the CPU limit: the kernel's default, 100 ms.
const cpuPeriodUS = 100000

// minCPUQuotaUS is the smallest quota the kernel accepts (1 ms).
const minCPUQuotaUS = 1000

func (l Limits) validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("memory limit %d: must not be negative", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("pids limit %d: must not be negative", l.Pids)
	case l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0):
		return fmt.Errorf("cpu limit %v: must be a finite, non-negative number of CPUs", l.CPU)
	case l.CPU > 0 && l.CPU*cpuPeriodUS > math.MaxInt64/2:
		return fmt.Errorf("cpu limit %v: too large", l.CPU)
	}
	return nil
}

// wanted lists the controllers the limits need, in a fixed order.
func (l Limits) wanted() []string {
	var w []string
	if l.MemoryBytes > 0 {
		w = append(w, Memory)
	}
	if l.Pids > 0 {
		w = append(w, Pids)
	}
	if l.CPU > 0 {
		w = append(w, CPU)
	}
	return w
}

// write is one value written to one file of a cgroup.
type write struct {
	file, value string
	// optional files may be missing on this kernel; a missing one is skipped. When leak is set, a
	// missing file means the limit does not hold completely, and it is reported as unenforced.
	optional bool
	leak     string
}

// limitWrites returns what enforces controller c's part of l, for a v2 or v1 hierarchy. probe asks for
// the "no limit" values instead, which Detect writes to prove it could write a real one.
func limitWrites(v2 bool, c string, l Limits, swap, probe bool) []write {
	switch c {
	case Memory:
		val := strconv.FormatInt(l.MemoryBytes, 10)
		if v2 {
			swapMax := "0"
			if probe {
				val, swapMax = "max", "max"
			}
			w := []write{{file: "memory.max", value: val}}
			sw := write{file: "memory.swap.max", value: swapMax, optional: true}
			if swap {
				sw.leak = "memory.swap.max is missing (no swap accounting), so swap is not limited"
			}
			// memory.oom.group makes the OOM killer kill the whole run, not one process of it, so a
			// sandbox never limps on with a random process missing.
			return append(w, sw, write{file: "memory.oom.group", value: "1", optional: true})
		}
		if probe {
			val = "-1"
		}
		// memsw (memory+swap) must be at least the memory limit, so it is written second.
		sw := write{file: "memory.memsw.limit_in_bytes", value: val, optional: true}
		if swap {
			sw.leak = "memory.memsw.limit_in_bytes is missing (boot with swapaccount=1), so swap is not limited"
		}
		return []write{{file: "memory.limit_in_bytes", value: val}, sw}
	case Pids:
		val := strconv.FormatInt(l.Pids, 10)
		if probe {
			val = "max"
		}
		return []write{{file: "pids.max", value: val}}
	case CPU:
		quota := int64(math.Round(l.CPU * cpuPeriodUS))
		if quota < minCPUQuotaUS {
			quota = minCPUQuotaUS
		}
		if v2 {
			val := fmt.Sprintf("%d %d", quota, cpuPeriodUS)
			if probe {
				val = fmt.Sprintf("max %d", cpuPeriodUS)
			}
			return []write{{file: "cpu.max", value: val}}
		}
		val := strconv.FormatInt(quota, 10)
		if probe {
			val = "-1"
		}
		return []write{
			{file: "cpu.cfs_period_us", value: strconv.Itoa(cpuPeriodUS)},
			{file: "cpu.cfs_quota_us", value: val},
		}
	}
	return nil
}

// applyWrites writes ws into dir. It returns an error when the limit cannot be set, and a non-empty
// leak when it was set but does not hold completely.
func applyWrites(dir string, ws []write) (leak string, err error) {
	for _, w := range ws {
		err := writeFile(filepath.Join(dir, w.file), w.value)
		if w.optional && errors.Is(err, fs.ErrNotExist) {
			if w.leak != "" {
				leak = w.leak
			}
			continue
		}
		if err != nil {
			return "", err
		}
	}
	return leak, nil
}

// writeFile writes value to an existing cgroup file in a single write, as cgroup files require. It
// never creates the file: a missing control file means the kernel lacks the feature.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(value))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("writing %q: %w", value, werr) // a *PathError: it names the file
	}
	if cerr != nil {
		return fmt.Errorf("writing %q: %w", value, cerr)
	}
	return nil
}
