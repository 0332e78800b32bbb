//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of the waits in Kill and Destroy: long enough for a loaded machine to reap thousands of
// processes, short enough that cordon (or its reaper) never hangs on a group that will not empty.
const (
	killTimeout    = 5 * time.Second
	destroyTimeout = 10 * time.Second
	freezeTimeout  = time.Second
)

// Kill sends SIGKILL to every process in the group, including processes that left the sandbox's
// process tree and ones that ignore or block other signals. On v2 it writes cgroup.kill, which the
// kernel applies to the whole subtree atomically; without cgroup.kill it freezes the group, signals
// every member, thaws it, and repeats until the group is empty. Kill does not wait for the processes to
// be gone except in that loop; Destroy does.
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed {
		return nil
	}
	return g.kill(time.Now().Add(killTimeout))
}

// kill does Kill's work; g.mu is held.
func (g *Group) kill(deadline time.Time) error {
	for _, d := range g.dirs {
		if !d.V2 {
			continue
		}
		err := writeFile(filepath.Join(d.Path, "cgroup.kill"), "1")
		if err == nil {
			return nil // every process of the group is in this subtree (Add puts it in every hierarchy)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("killing cgroup %s: %w", d.Path, err)
		}
		// A kernel before 5.14: no cgroup.kill; freeze with cgroup.freeze (5.2) and signal instead.
		return signalLoop([]string{d.Path}, freezerV2(d.Path), deadline)
	}
	var paths []string
	var freeze func(bool) error
	for _, d := range g.dirs {
		paths = append(paths, d.Path)
		if d.Freezer {
			freeze = freezerV1(d.Path)
		}
	}
	return signalLoop(paths, freeze, deadline)
}

// freezerV1 freezes or thaws a v1 freezer cgroup and waits for the state to settle.
func freezerV1(path string) func(bool) error {
	return func(frozen bool) error {
		state := map[bool]string{true: "FROZEN", false: "THAWED"}[frozen]
		file := filepath.Join(path, "freezer.state")
		deadline := time.Now().Add(freezeTimeout)
		for {
			// Writing FROZEN again while FREEZING retries tasks that were busy the first time.
			if err := writeFile(file, state); err != nil {
				return fmt.Errorf("setting %s to %s: %w", file, state, err)
			}
			if s, err := readString(file); err == nil && s == state {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not reach %s within %v", file, state, freezeTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// freezerV2 freezes or thaws a v2 cgroup, or returns nil when the kernel has no cgroup.freeze.
func freezerV2(path string) func(bool) error {
	if _, err := os.Stat(filepath.Join(path, "cgroup.freeze")); err != nil {
		return nil
	}
	return func(frozen bool) error {
		val := map[bool]string{true: "1", false: "0"}[frozen]
		if err := writeFile(filepath.Join(path, "cgroup.freeze"), val); err != nil {
			return err
		}
		deadline := time.Now().Add(freezeTimeout)
		for {
			ev, err := fileFields(filepath.Join(path, "cgroup.events"))
			if err == nil && ev["frozen"] == val {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not reach frozen=%s within %v", path, val, freezeTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// signalLoop kills every process in the cgroups at paths (and their descendant cgroups) by signal, for
// kernels or hierarchies without cgroup.kill. With a freezer, the tree is frozen first so that nothing
// forks between reading the members and signalling them; without one, rounds repeat until no member is
// left (a process being killed cannot fork: the kernel aborts fork when a fatal signal is pending).
// The loop is bounded by deadline.
func signalLoop(paths []string, freeze func(bool) error, deadline time.Time) error {
	for {
		var ferr error
		if freeze != nil {
			ferr = freeze(true)
		}
		n, err := signalMembers(paths)
		if freeze != nil {
			// Thaw even when signalling failed: killed tasks die only once they run again (v1).
			if terr := freeze(false); terr != nil && err == nil {
				err = terr
			}
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if ferr != nil {
				return fmt.Errorf("killing the cgroup's processes: %d still there; freezing failed: %w", n, ferr)
			}
			return fmt.Errorf("killing the cgroup's processes: %d still there at the deadline", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// signalMembers sends SIGKILL to every member of the cgroups at paths and their descendants, and returns
// how many it found. A pid read from cgroup.procs may be reused by an unrelated process before it is
// signalled; to never kill that process, each pid is pinned with a pidfd first and signalled only if
// the pid is still listed in the group after the pin: a live pinned process with a listed pid is the
// listed process.
func signalMembers(paths []string) (int, error) {
	listed, err := members(paths)
	if err != nil {
		return 0, err
	}
	if len(listed) == 0 {
		return 0, nil
	}
	pinned := map[int]int{}
	defer func() {
		for _, fd := range pinned {
			unix.Close(fd)
		}
	}()
	for _, pid := range listed {
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			pinned[pid] = fd
		case errors.Is(err, syscall.ESRCH):
			// gone already
		case errors.Is(err, syscall.ENOSYS):
			// Before Linux 5.3: no pidfds. Signal directly; the window for reuse is tiny.
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return 0, fmt.Errorf("killing pid %d: %w", pid, err)
			}
		default:
			return 0, fmt.Errorf("pinning pid %d: %w", pid, err)
		}
	}
	still, err := members(paths)
	if err != nil {
		return 0, err
	}
	for pid, fd := range pinned {
		if !slices.Contains(still, pid) {
			continue
		}
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			return 0, fmt.Errorf("killing pid %d: %w", pid, err)
		}
	}
	return len(listed), nil
}

// members lists the processes of the cgroups at paths and of all their descendant cgroups.
func members(paths []string) ([]int, error) {
	var all []int
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			pids, err := readPids(filepath.Join(path, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			all = append(all, pids...)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing the processes of cgroup %s: %w", p, err)
		}
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// populated reports whether any process is left in the group. On v2 cgroup.events says so for the
// whole subtree in one read.
func (g *Group) populated() (bool, error) {
	for _, d := range g.dirs {
		if !d.V2 {
			continue
		}
		ev, err := fileFields(filepath.Join(d.Path, "cgroup.events"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading cgroup.events of %s: %w", d.Path, err)
		}
		if ev["populated"] != "0" {
			return true, nil
		}
	}
	var paths []string
	for _, d := range g.dirs {
		paths = append(paths, d.Path)
	}
	pids, err := members(paths)
	return len(pids) > 0, err
}

// Destroy kills what is left in the group, waits (bounded) until it is empty and removes its cgroups,
// deepest first. It is idempotent, and safe to call after the reaper or another Destroy did the work:
// cgroups already gone count as removed. On error the group keeps its paths, so a later Destroy (or
// the reaper) can finish.
func (g *Group) Destroy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed {
		return nil
	}
	deadline := time.Now().Add(destroyTimeout)
	var lastKill time.Time
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		busy, err := g.populated()
		if err != nil {
			return fmt.Errorf("destroying the run's cgroup: %w", err)
		}
		if !busy {
			break
		}
		if time.Since(lastKill) > 250*time.Millisecond {
			// Kill again now and then: a process may have been added (by Add) after the last kill.
			if err := g.kill(deadline); err != nil {
				return fmt.Errorf("destroying the run's cgroup: %w", err)
			}
			lastKill = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("destroying the run's cgroup: processes still there after %v", destroyTimeout)
		}
		time.Sleep(wait)
	}
	var errs []error
	for _, d := range g.dirs {
		if err := removeTree(d.Path, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroying the run's cgroup: %w", err)
	}
	g.destroyed = true
	return nil
}

// removeTree removes the cgroup at path and any cgroups below it, deepest first. rmdir of an empty
// cgroup can fail with EBUSY for a moment after its last process exited; that is retried until deadline.
func removeTree(path string, deadline time.Time) error {
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing %s: %w", path, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(path, e.Name()), deadline); err != nil {
				return err
			}
		}
	}
	for {
		err := unix.Rmdir(path)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
