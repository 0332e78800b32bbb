//go:build linux

package main

import (
	"math"

	"golang.org/x/sys/unix"
)

// cloexecInherited marks every descriptor above the standard streams close-on-exec, so that no
// contender inherits one from whatever started the benchmark.
func cloexecInherited() error {
	return unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}
