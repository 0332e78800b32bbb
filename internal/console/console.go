// Package console decides what the sandbox gets as its standard streams, so that it never holds a
// descriptor of the caller's other than a plain pipe. A terminal is a two-way channel into the user's
// session: a process that holds it can inject keystrokes (TIOCSTI), retitle the window or read what the
// user types next. A regular file (a log) is an inode on the host: a process that holds it can fchmod,
// fchown or truncate it, seek back and overwrite what was written before it, or reopen it through
// /proc/self/fd for reading. A socket is a channel to whatever is at its other end. So when stdin is a
// terminal the sandbox gets a fresh pseudo-terminal whose other end cordon relays; any other stream
// that is not an anonymous pipe (a file, a socket, a device, a named FIFO, a terminal on stdout alone)
// reaches the sandbox through a pipe that cordon relays. Anonymous pipes pass as they are: the
// sandbox can do nothing to one but read or write it (its inode lives in the kernel's pipefs, so a
// chmod changes nothing anyone looks at).
package console

import (
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// Streams are the sandbox's standard streams and what it takes to relay them.
type Streams struct {
	Stdin, Stdout, Stderr *os.File
	// TTY says that the sandbox should create its own pseudo-terminal; its master is then handed to
	// RelayTerminal. Rows and Cols are the caller's terminal size.
	TTY        bool
	Rows, Cols uint16

	term       *os.File // the caller's terminal, in TTY mode
	termOut    *os.File
	closeChild []*os.File // our copies of the sandbox's ends, closed once the sandbox has them
	restore    func()
	copies     sync.WaitGroup
	stop       chan struct{}
}

// Attach decides the sandbox's streams for the caller's stdin, stdout and stderr. When stdout and
// stderr are the same file (`>log 2>&1`), both get the same relay pipe, so that the command's output
// and errors keep their order in it.
func Attach(stdin, stdout, stderr *os.File) (*Streams, error) {
	s := &Streams{stop: make(chan struct{})}
	if term.IsTerminal(int(stdin.Fd())) {
		s.TTY, s.term, s.termOut = true, stdin, stdout
		if ws, err := pty.GetsizeFull(stdin); err == nil {
			s.Rows, s.Cols = ws.Rows, ws.Cols
		}
		return s, nil
	}
	var err error
	if s.Stdin, err = s.relayIn(stdin); err == nil {
		if s.Stdout, err = s.relayOut(stdout, "standard output"); err == nil {
			if s.Stdout != stdout && sameFile(stdout, stderr) {
				s.Stderr = s.Stdout
			} else {
				s.Stderr, err = s.relayOut(stderr, "standard error")
			}
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// RelayTerminal connects the caller's terminal to the master side of the sandbox's pseudo-terminal:
// the caller's terminal goes raw (the sandbox's line discipline does the work), keystrokes go in,
// output comes out, and window size changes follow.
func (s *Streams) RelayTerminal(master *os.File) error {
	state, err := term.MakeRaw(int(s.term.Fd()))
	if err != nil {
		return fmt.Errorf("setting the terminal to raw mode: %w", err)
	}
	pty.InheritSize(s.term, master)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for {
			select {
			case <-winch:
				pty.InheritSize(s.term, master)
			case <-s.stop:
				signal.Stop(winch)
				return
			}
		}
	}()
	go io.Copy(master, s.term) // ends with the process; a blocked read of a terminal cannot be cancelled
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		io.Copy(s.termOut, master) // EIO once every holder of the slave is gone
	}()
	s.restore = func() {
		term.Restore(int(s.term.Fd()), state)
		master.Close()
	}
	return nil
}

// relayOut returns what the sandbox gets for the output stream f: f itself if it is an anonymous pipe,
// else the write end of a pipe that cordon copies into f. If writing to f fails, the copy closes the
// pipe, so the command sees EPIPE as it would on a pipe whose reader went away, rather than blocking.
func (s *Streams) relayOut(f *os.File, name string) (*os.File, error) {
	if ok, err := passes(f, name); ok || err != nil {
		return f, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating a pipe for %s: %w", name, err)
	}
	s.closeChild = append(s.closeChild, w)
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		io.Copy(f, r)
		r.Close()
	}()
	return w, nil
}

// relayIn returns what the sandbox gets for stdin: f itself if it is an anonymous pipe, else the read
// end of a pipe that cordon fills from f. Close does not wait for this copy, as a read of a socket or
// device may block for ever; it ends when f ends or when the sandbox, the pipe's only reader, is gone.
func (s *Streams) relayIn(f *os.File) (*os.File, error) {
	if ok, err := passes(f, "standard input"); ok || err != nil {
		return f, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating a pipe for standard input: %w", err)
	}
	s.closeChild = append(s.closeChild, r)
	go func() {
		defer w.Close()
		copyIn(w, f)
	}()
	return r, nil
}

// copyIn copies f into w. A regular file is read with pread from its current offset, which never
// moves: a shell loop reading the same file (while read l; do cordon run ...; done <list) keeps its
// place, however much cordon buffered into the pipe.
func copyIn(w io.Writer, f *os.File) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		io.Copy(w, f)
		return
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return
	}
	io.Copy(w, io.NewSectionReader(f, off, math.MaxInt64-off))
}

// passes reports whether f may be handed to the sandbox as it is: only an anonymous pipe may. A named
// FIFO is S_IFIFO too but an inode on a real file system, which fchmod would change; pipefs tells the
// two apart. A descriptor that cannot be examined (closed by the caller) is an error: cordon does not
// hand the sandbox what it cannot name.
func passes(f *os.File, name string) (bool, error) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("%s (fd %d): %w", name, fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false, nil
	}
	anon, err := onPipeFS(fd)
	if err != nil {
		return false, fmt.Errorf("%s (fd %d): %w", name, fd, err)
	}
	return anon, nil
}

// sameFile reports whether a and b are the same file (device and inode).
func sameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// Started closes cordon's copies of the sandbox's ends of the streams, so that output relays end
// when the sandbox's last holder exits.
func (s *Streams) Started() {
	for _, f := range s.closeChild {
		f.Close()
	}
	s.closeChild = nil
}

// Close waits for the output relays to drain and restores the caller's terminal.
func (s *Streams) Close() {
	s.Started()
	s.copies.Wait()
	close(s.stop)
	if s.restore != nil {
		s.restore()
	}
}
