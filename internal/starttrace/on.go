//go:build cordontrace

package starttrace

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Enabled says whether this build prints its marks.
const Enabled = true

// Mark prints the step's CLOCK_MONOTONIC time and the process's pid on standard error, where
// bench/timeline reads the lines of both processes (init's standard error is the command's,
// relayed to cordon's).
func Mark(step string) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s %d.%09d %d %s\n", Prefix, ts.Sec, ts.Nsec, os.Getpid(), step)
}
