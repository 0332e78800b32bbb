//go:build linux

package console

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// isPipe reports whether f is an anonymous pipe (pipefs), what the sandbox may hold.
func isPipe(t *testing.T, f *os.File) bool {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		t.Fatal(err)
	}
	return fs.Type == unix.PIPEFS_MAGIC
}

// TestAttachRelaysAllButPipes hands Attach each kind of stream a caller can have and checks what the
// sandbox would get: the caller's own descriptor only for an anonymous pipe, a fresh pipe otherwise.
func TestAttachRelaysAllButPipes(t *testing.T) {
	dir := t.TempDir()
	open := func(t *testing.T, path string, flag int) *os.File {
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	tests := []struct {
		name   string
		stream func(t *testing.T) *os.File
		passes bool
	}{
		{"anonymous pipe", func(t *testing.T) *os.File {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			return w
		}, true},
		{"regular file", func(t *testing.T) *os.File {
			return open(t, filepath.Join(dir, "log"), os.O_RDWR|os.O_CREATE)
		}, false},
		{"named FIFO", func(t *testing.T) *os.File {
			p := filepath.Join(dir, "fifo")
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return open(t, p, os.O_RDWR) // O_RDWR: does not wait for a peer
		}, false},
		{"unix socket", func(t *testing.T) *os.File {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fds[1])
			f := os.NewFile(uintptr(fds[0]), "socket")
			t.Cleanup(func() { f.Close() })
			return f
		}, false},
		{"/dev/null", func(t *testing.T) *os.File { return open(t, os.DevNull, os.O_RDWR) }, false},
		{"directory", func(t *testing.T) *os.File { return open(t, dir, os.O_RDONLY) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.stream(t)
			null := open(t, os.DevNull, os.O_RDWR)
			for _, slot := range []string{"stdin", "stdout", "stderr"} {
				in, out, errs := null, null, null
				switch slot {
				case "stdin":
					in = f
				case "stdout":
					out = f
				default:
					errs = f
				}
				s, err := Attach(in, out, errs)
				if err != nil {
					t.Fatalf("%s: %v", slot, err)
				}
				got := map[string]*os.File{"stdin": s.Stdin, "stdout": s.Stdout, "stderr": s.Stderr}[slot]
				switch {
				case tt.passes && got != f:
					t.Errorf("%s: a pipe of the caller's was replaced", slot)
				case !tt.passes && (got == f || !isPipe(t, got)):
					t.Errorf("%s: the sandbox would hold the caller's %s (same=%v)", slot, tt.name, got == f)
				}
				for _, g := range []*os.File{s.Stdin, s.Stdout, s.Stderr} {
					if g != f && g != null && !isPipe(t, g) {
						t.Errorf("%s: a /dev/null stream was handed over as it is", slot)
					}
				}
				s.Close()
			}
		})
	}
}

// TestRelayedLogCannotBeRewritten runs a real process on the streams Attach gives for a log file
// (stdout and stderr both, as `>log 2>&1`): it tries to chmod, truncate, seek back over and reopen the
// log through its descriptor. The log must keep its mode and earlier content and gain the output in the
// order it was written; the exit status is the process's.
func TestRelayedLogCannotBeRewritten(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	log := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(log, []byte("EARLIER\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	s, err := Attach(devnull, f, f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Stdout != s.Stderr {
		t.Error("stdout and stderr are one file but got two pipes: their order in it would be lost")
	}
	script := `
import os, fcntl, sys
def tryit(name, f):
    try:
        f(); print(name, "ok", flush=True)
    except OSError as e:
        print(name, "refused", e.strerror, flush=True)
tryit("fchmod", lambda: os.fchmod(1, 0o777))
tryit("ftruncate", lambda: os.ftruncate(1, 0))
tryit("lseek", lambda: os.lseek(1, 0, 0))
tryit("append-off", lambda: fcntl.fcntl(1, fcntl.F_SETFL, 0))
def reopen():
    fd = os.open("/proc/self/fd/1", os.O_RDONLY | os.O_NONBLOCK)
    print("reopen read back", b"EARLIER" in os.read(fd, 4096), flush=True)
tryit("reopen", reopen)
for i in range(50):
    os.write(1 if i % 2 == 0 else 2, b"line %d\n" % i)
sys.exit(7)
`
	cmd := exec.Command(python, "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.Stdin, s.Stdout, s.Stderr
	err = cmd.Start()
	s.Started()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	s.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("exit: %v, want status 7", err)
	}
	st, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("the log's mode became %v", st.Mode().Perm())
	}
	b, _ := os.ReadFile(log)
	got := string(b)
	if !strings.HasPrefix(got, "EARLIER\n") {
		t.Errorf("the earlier content was overwritten:\n%s", got)
	}
	var want strings.Builder
	for i := 0; i < 50; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if !strings.HasSuffix(got, want.String()) {
		t.Errorf("the output did not arrive in order after the earlier content:\n%s", got)
	}
	if strings.Contains(got, "read back True") {
		t.Errorf("the process read the log back through /proc/self/fd/1:\n%s", got)
	}
}

// TestRelayedStdinKeepsTheOffset: a regular file on stdin is read without moving its offset, so a shell
// loop reading the same file keeps its place.
func TestRelayedStdinKeepsTheOffset(t *testing.T) {
	p := filepath.Join(t.TempDir(), "list")
	if err := os.WriteFile(p, []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(4, 0); err != nil { // the loop has read "one\n"
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	s, err := Attach(f, out, out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cat")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.Stdin, s.Stdout, s.Stderr
	err = cmd.Start()
	s.Started()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, _ := os.ReadFile(out.Name()); string(b) != "two\nthree\n" {
		t.Errorf("the command read %q, want the rest of the file", b)
	}
	if off, _ := f.Seek(0, 1); off != 4 {
		t.Errorf("stdin's offset moved to %d, want 4", off)
	}
}

// TestAttachRefusesAClosedStream: a stream the caller closed (>&-) is an error, not a descriptor cordon
// cannot name handed to the sandbox.
func TestAttachRefusesAClosedStream(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	closed := os.NewFile(1<<20, "closed") // above any descriptor limit: never open
	if _, err := Attach(r, closed, w); err == nil || !strings.Contains(err.Error(), "standard output") {
		t.Fatalf("Attach with a closed stdout: got %v, want an error naming standard output", err)
	}
}
