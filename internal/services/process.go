package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// process is a running server.
type process struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{} // closed when it has exited
	err     error         // its exit, once done
	log     string        // its log file
	stopSig syscall.Signal
	pidFile string
}

// spawn starts a server as ids in namespaces of its own (see sysProcAttr), its output appended to
// logPath, and records its pid beside it for Sweep.
func spawn(ids IDs, logPath string, stopSig syscall.Signal, env []string, argv ...string) (*process, error) {
	return spawnOn(ids, nil, logPath, stopSig, env, argv...)
}

// nsOverlay is an overlay the server's helper mounts in the server's own mount namespace (see
// MountMain): Lower, the template, is never written; Upper and Work are the run's.
type nsOverlay struct{ Lower, Upper, Work, Target string }

// spawnOn is spawn, with ov (when not nil) mounted in a mount namespace of the server's own before
// it runs: the program is this binary's own, as MountArg0, which mounts and then execs argv.
func spawnOn(ids IDs, ov *nsOverlay, logPath string, stopSig syscall.Signal, env []string, argv ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	if cmd.SysProcAttr, err = sysProcAttr(ids, true); err != nil {
		return nil, err
	}
	if ov != nil {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this program for the overlay helper: %w", err)
		}
		cmd.Path = self
		cmd.Args = append([]string{MountArg0, ov.Lower, ov.Upper, ov.Work, ov.Target}, argv...)
		helperAttr(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(argv[0]), err)
	}
	p := &process{name: filepath.Base(argv[0]), cmd: cmd, done: make(chan struct{}), log: logPath, stopSig: stopSig,
		pidFile: strings.TrimSuffix(logPath, ".log") + ".pid"}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if start, err := runstate.ProcessStart(cmd.Process.Pid); err == nil {
		// Best effort: Sweep kills by this only what Pdeathsig did not.
		_ = writeNoFollow(p.pidFile, fmt.Appendf(nil, "%d %d\n", cmd.Process.Pid, start))
	}
	return p, nil
}

// exited returns an error saying the server ended, with the end of its log, if it has.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v): %s", p.name, p.err, logTail(p.log))
	default:
		return nil
	}
}

// exitCode is the server's exit status once it has exited, else -1 (also for no server).
func (p *process) exitCode() int {
	if p == nil {
		return -1
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// stop asks the server to end with its stop signal, kills it after a moment, and waits.
func (p *process) stop() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(p.stopSig)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within 5s and was killed", p.name)
}

// waitReady polls ready until it says so, the server exits, or ctx (bounded to a minute) ends.
func (p *process) waitReady(ctx context.Context, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		if err := p.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w; its log: %s", p.name, ctx.Err(), logTail(p.log))
		case <-tick.C:
		}
	}
	return nil
}

// runClient runs a client program (psql, pg_restore) as ids in the servers' kind of namespaces, with
// stdin from in, and returns its standard error when it fails.
func runClient(ctx context.Context, ids IDs, env []string, in io.Reader, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin = in
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var err error
	if cmd.SysProcAttr, err = sysProcAttr(ids, false); err != nil {
		return err
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return &clientError{msg: msg}
	}
	return nil
}

// clientError is what a client program printed when it failed.
type clientError struct{ msg string }

func (e *clientError) Error() string { return e.msg }

// logTail is the last lines of a log, for an error message.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// killRecorded kills the servers a run's directory records, where they still run. Only a pid file
// cordon wrote counts: a template's work directory belongs to the servers' id, and a file or link
// of theirs must not make root kill a process of someone else's.
func killRecorded(dir string) {
	pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	for _, f := range pids {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if pid, start, ok := readPidFile(f); ok && runstate.Alive(pid, start) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// copyTree copies a template directory, keeping owners and modes, sharing blocks where the file
// system can (reflink).
func copyTree(ctx context.Context, src, dst string) error {
	cp, err := hosttool.System("cp") // cordon may be root here: the system's cp, never the caller's PATH's
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	out, err := exec.CommandContext(ctx, cp, "-a", "--reflink=auto", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s: %v: %s", src, err, bytes.TrimSpace(out))
	}
	return nil
}

// chownTree gives the servers' id a directory tree cordon made (as root); a no-op otherwise.
func chownTree(ids IDs, dir string) error {
	if !ids.Switch {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, ids.UID, ids.GID)
	})
}

// privateDir makes a 0700 directory that belongs to the servers' id.
func privateDir(ids IDs, dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if ids.Switch {
		return os.Chown(dir, ids.UID, ids.GID)
	}
	return nil
}

// writeNoFollow writes a 0600 file as os.WriteFile does, but never through a symbolic link: the
// directories a template is made in and a service's own belong to the servers' id, and cordon, as
// root, must not write where a link the servers' id put there leads.
func writeNoFollow(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writePrivate writes a 0600 file that belongs to the servers' id.
func writePrivate(ids IDs, path string, data []byte) error {
	if err := writeNoFollow(path, data); err != nil {
		return err
	}
	if ids.Switch {
		return os.Lchown(path, ids.UID, ids.GID)
	}
	return nil
}

// checkFixtures checks a service's fixtures before anything starts: a path that leads out of the
// project, or to no regular file, stops it.
func checkFixtures(opts Options, files []string) error {
	for _, f := range files {
		if _, err := resolveFixture(opts.Project, f); err != nil {
			return err
		}
	}
	return nil
}

// serviceDir makes a service's own directory below runDir (privateDir) and returns it with the
// path of the socket sockName in it, which must fit a unix socket's address.
func serviceDir(opts Options, runDir, name, sockName string) (dir, sock string, err error) {
	dir = filepath.Join(runDir, name)
	if err := privateDir(opts.IDs, dir); err != nil {
		return "", "", err
	}
	sock = filepath.Join(dir, sockName)
	if err := checkSocketPath(sock); err != nil {
		return "", "", err
	}
	return dir, sock, nil
}

// maxSocketPath is the longest path a unix socket can be bound at (sun_path less its NUL).
const maxSocketPath = 107

func checkSocketPath(p string) error {
	if len(p) > maxSocketPath {
		return fmt.Errorf("the socket path %s is %d bytes, longer than a unix socket allows (%d); use a shorter state directory", p, len(p), maxSocketPath)
	}
	return nil
}
