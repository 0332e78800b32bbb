//go:build linux

package probe

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestClassifyStream opens each kind of descriptor a sandbox might be handed and checks the verdict:
// only an anonymous pipe, a pseudo-terminal of the devpts at /dev/pts, or nothing, may be held.
func TestClassifyStream(t *testing.T) {
	dir := t.TempDir()
	keep := func(t *testing.T, f *os.File) int {
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	openPath := func(path string, flag int) func(t *testing.T) int {
		return func(t *testing.T) int {
			f, err := os.OpenFile(path, flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			return keep(t, f)
		}
	}
	tests := []struct {
		name string
		fd   func(t *testing.T) int
		ok   bool
		what string
	}{
		{"pipe", func(t *testing.T) int {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			keep(t, r)
			return keep(t, w)
		}, true, "a pipe"},
		{"regular file", openPath(filepath.Join(dir, "log"), os.O_RDWR|os.O_CREATE), false, "a regular file"},
		{"directory", openPath(dir, os.O_RDONLY), false, "a directory"},
		{"/dev/null", openPath(os.DevNull, os.O_RDWR), false, "a character device 1:3"},
		{"named FIFO", func(t *testing.T) int {
			p := filepath.Join(dir, "fifo")
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return openPath(p, os.O_RDWR)(t)
		}, false, "a named FIFO"},
		{"socket", func(t *testing.T) int {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fds[1])
			return keep(t, os.NewFile(uintptr(fds[0]), "socket"))
		}, false, "a socket"},
		{"not open", func(*testing.T) int { return 1 << 20 }, true, "not open"},
		{"pseudo-terminal of this devpts", func(t *testing.T) int {
			m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
			if err != nil {
				t.Skipf("no pseudo-terminals here: %v", err)
			}
			keep(t, m)
			if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
				t.Skip(err)
			}
			n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
			if err != nil {
				t.Skip(err)
			}
			return openPath("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY)(t)
		}, true, "a pseudo-terminal of this devpts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, what := classifyStream(tt.fd(t))
			if ok != tt.ok || !strings.HasPrefix(what, tt.what) {
				t.Errorf("got (%v, %q), want (%v, %q...)", ok, what, tt.ok, tt.what)
			}
		})
	}
}
