package runstate

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// This file is process identity: a pid with its start time names one process for the life of the
// system, which is how a run recorded as running is told from one whose cordon is gone.

// Alive says whether pid is still the process that started at start (clock ticks since boot).
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	got, err := ProcessStart(pid)
	return err == nil && got == start
}

// ProcessStart returns when pid started, in clock ticks since boot (field 22 of /proc/pid/stat),
// which together with the pid names one process for the life of the system.
func ProcessStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("runstate: process %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may itself contain spaces and ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("runstate: process %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("runstate: process %d: short stat", pid)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("runstate: process %d: start time: %w", pid, err)
	}
	return v, nil
}

// Self returns this process's pid and start time, for Meta.PID and Meta.PIDStart.
func Self() (pid int, start uint64, err error) {
	pid = os.Getpid()
	start, err = ProcessStart(pid)
	return pid, start, err
}
