//go:build linux

package cgroup

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReaperFD is the descriptor on which the reaper inherits the read end of its keepalive pipe.
const ReaperFD = 3

// maxInstructions bounds the reaper's instructions. They are written before the reaper starts, so they
// must fit in the pipe's buffer (64 KiB on Linux); a run uses a handful of short paths.
const maxInstructions = 32 << 10

// instructions is what cordon tells its reaper: the directories of the group to remove.
type instructions struct {
	Dirs []dir `json:"dirs"`
}

// StartReaper starts the reaper for g: exe re-executed with argv args (args[0] is its argv[0], on which
// cordon's main dispatches to ReaperMain; exe alone when args is empty), in a session of its own (so the
// terminal's ^C and hang-up do not reach it), with "/" as working directory (so it pins no mount),
// outside the run's cgroups. It hands the reaper g's directories and the read end of a pipe, and returns
// the write end. When cordon exits by any means, even SIGKILL, the kernel closes the write end, the
// reaper reads end of file, and it kills what is left in the group, waits until it is empty and removes
// it. Normal exits call g.Destroy() first, so the reaper finds nothing.
//
// The caller must keep keepalive referenced for as long as the run lives (a collected *os.File is
// closed by its finalizer, which would end the run), must not pass it to any child (it is close-on-exec),
// and closes it after Destroy.
func StartReaper(exe string, args []string, g *Group) (keepalive *os.File, err error) {
	g.mu.Lock()
	msg, err := json.Marshal(instructions{Dirs: g.dirs})
	g.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("starting the cgroup reaper: encoding its instructions: %w", err)
	}
	if len(msg) >= maxInstructions {
		return nil, fmt.Errorf("starting the cgroup reaper: instructions of %d bytes are too long", len(msg))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the cgroup reaper: creating its pipe: %w", err)
	}
	defer r.Close()
	if _, err := w.Write(append(msg, '\n')); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the cgroup reaper: writing its instructions: %w", err)
	}
	if len(args) == 0 {
		args = []string{exe}
	}
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        args,
		Dir:         "/",
		Stderr:      os.Stderr, // for its failure messages only; it is silent on success
		ExtraFiles:  []*os.File{r},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the cgroup reaper %s: %w", exe, err)
	}
	// Collect its exit status whenever it comes, so that it never lingers as a zombie of a long-lived
	// cordon (it exits right after the keepalive closes).
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// ReaperMain is the reaper's body, called by cordon's main when re-executed by StartReaper. It reads its
// instructions from descriptor ReaperFD, then blocks, doing nothing, until the pipe reaches end of file
// (cordon is gone), then destroys the group: kills what is left, waits until it is empty (bounded) and
// removes its cgroups. It logs only failures, to stderr, and returns the process's exit code.
func ReaperMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "cordon cgroup reaper")
	// The terminal's signals are for cordon; the reaper's job starts when cordon is gone.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	f := os.NewFile(ReaperFD, "cordon-reaper-keepalive")
	if f == nil {
		log.Error("no keepalive descriptor", "fd", ReaperFD)
		return 2
	}
	defer f.Close()
	g, err := readInstructions(f)
	if err != nil {
		log.Error("cannot read instructions; the run's cgroup will not be cleaned up by the reaper", "err", err)
		return 2
	}
	// Wait for end of file: every read blocks until cordon writes (it does not) or exits.
	if _, err := io.Copy(io.Discard, f); err != nil {
		log.Warn("keepalive read failed; cleaning up now", "err", err)
	}
	if err := g.Destroy(); err != nil {
		log.Error("cannot clean up the run's cgroup", "paths", g.Paths(), "err", err)
		return 1
	}
	return 0
}

// readInstructions reads the first line from r and turns it into the group to clean up. The directories
// are checked to be cgroup directories: the reaper kills what cgroup.procs lists and removes directories,
// so it must not be pointed at anything else.
func readInstructions(r io.Reader) (*Group, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, maxInstructions), maxInstructions).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("reading the instructions: %w", err)
	}
	var in instructions
	if err := json.Unmarshal(line, &in); err != nil {
		return nil, fmt.Errorf("decoding the instructions: %w", err)
	}
	if len(in.Dirs) == 0 {
		return nil, errors.New("the instructions name no cgroup")
	}
	for _, d := range in.Dirs {
		if err := checkCgroupDir(d.Path); err != nil {
			return nil, err
		}
	}
	return &Group{dirs: in.Dirs, why: map[string]string{}}, nil
}

// checkCgroupDir accepts an absolute, clean path that is a directory on a cgroup or cgroup2 file
// system other than a hierarchy's root, or that does not exist (already removed).
func checkCgroupDir(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return fmt.Errorf("cgroup path %q: not a clean absolute path", path)
	}
	var st unix.Statfs_t
	err := unix.Statfs(path, &st)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup path %s: %w", path, err)
	}
	if st.Type != unix.CGROUP_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("cgroup path %s: not on a cgroup file system", path)
	}
	var self, parent unix.Stat_t
	if err := unix.Stat(path, &self); err != nil {
		return fmt.Errorf("cgroup path %s: %w", path, err)
	}
	if err := unix.Stat(filepath.Dir(path), &parent); err != nil || parent.Dev != self.Dev {
		return fmt.Errorf("cgroup path %s: is the root of a cgroup hierarchy", path)
	}
	return nil
}
