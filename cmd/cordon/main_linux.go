package main

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
func closeInheritedOnExec() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("marking inherited descriptors close-on-exec (needs Linux 5.11): %w", err)
	}
	return nil
}
