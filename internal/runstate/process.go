package runstate

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// This file is process identity: a pid with its start time names one process for the life of the
// system, which is how a run recorded as running is told from one whose cordon is gone.

// Alive says whether pid is still the process that started at start (clock ticks since boot) and
// has not ended. A process that ended but was not yet reaped by its parent (a zombie: the cordon was
// killed and its parent, a shell or a supervisor, has not waited for it) keeps its pid and start
// time, so the state in /proc decides too: a zombie runs nothing and will never finish the run.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := procStat(pid)
	return err == nil && st.start == start && !st.ended()
}

// ProcessStart returns when pid started, in clock ticks since boot (field 22 of /proc/pid/stat),
// which together with the pid names one process for the life of the system.
func ProcessStart(pid int) (uint64, error) {
	st, err := procStat(pid)
	return st.start, err
}

// stat is what /proc/pid/stat says about a process that process identity needs.
type stat struct {
	state byte   // field 3: R, S, D, Z (zombie), X (dead), ...
	start uint64 // field 22: start time in clock ticks since boot
}

// ended says whether the process has exited: a zombie or a dead process awaiting removal.
func (s stat) ended() bool { return s.state == 'Z' || s.state == 'X' || s.state == 'x' }

func procStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, fmt.Errorf("runstate: process %d: %w", pid, err)
	}
	return parseStat(pid, string(b))
}

func parseStat(pid int, s string) (stat, error) {
	// The command name (field 2) is in parentheses and may itself contain spaces and ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("runstate: process %d: malformed stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, fmt.Errorf("runstate: process %d: short stat", pid)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("runstate: process %d: start time: %w", pid, err)
	}
	return stat{state: f[0][0], start: v}, nil
}

// Self returns this process's pid and start time, for Meta.PID and Meta.PIDStart.
func Self() (pid int, start uint64, err error) {
	pid = os.Getpid()
	start, err = ProcessStart(pid)
	return pid, start, err
}
