// Package console decides what the sandbox gets as its standard streams, so that it never holds the
// caller's terminal itself. A terminal is a two-way channel into the user's session: a process that
// holds it can inject keystrokes (TIOCSTI), retitle the window or read what the user types next. When
// stdin is a terminal the sandbox gets a fresh pseudo-terminal whose other end cordon relays; when only
// stdout or stderr is one, it gets a pipe that cordon copies; plain pipes and files pass through.
package console

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/creack/pty"
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

// Attach decides the sandbox's streams for the caller's stdin, stdout and stderr.
func Attach(stdin, stdout, stderr *os.File) (*Streams, error) {
	s := &Streams{stop: make(chan struct{})}
	if term.IsTerminal(int(stdin.Fd())) {
		s.TTY, s.term, s.termOut = true, stdin, stdout
		if ws, err := pty.GetsizeFull(stdin); err == nil {
			s.Rows, s.Cols = ws.Rows, ws.Cols
		}
		return s, nil
	}
	s.Stdin = stdin
	var err error
	if s.Stdout, err = s.relayIfTerminal(stdout); err != nil {
		return nil, err
	}
	if s.Stderr, err = s.relayIfTerminal(stderr); err != nil {
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

func (s *Streams) relayIfTerminal(f *os.File) (*os.File, error) {
	if !term.IsTerminal(int(f.Fd())) {
		return f, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating an output pipe: %w", err)
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
