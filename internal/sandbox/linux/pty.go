//go:build linux

package linux

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tiocgptpeer is TIOCGPTPEER (_IO('T', 0x41)), which x/sys does not name.
const tiocgptpeer = 0x5441

// openPTY creates a pseudo-terminal in the sandbox's own devpts, so that the command's terminal is
// one of the sandbox's (ttyname and /dev/pts work inside) and never the caller's. The master goes to
// cordon outside, which relays it to the user's terminal.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	// TIOCGPTPEER opens the slave through the master itself, immune to path games in /dev/pts.
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), tiocgptpeer, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		master.Close()
		return nil, nil, fmt.Errorf("open pty peer: %w", errno)
	}
	slave = os.NewFile(sfd, "pty")
	if rows > 0 && cols > 0 {
		if err := unix.IoctlSetWinsize(int(sfd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
			master.Close()
			slave.Close()
			return nil, nil, fmt.Errorf("set window size: %w", err)
		}
	}
	return master, slave, nil
}
