//go:build linux && !amd64 && !arm64

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
)

// errUnsupportedArch is returned where cordon has no audited syscall table, so the sandbox refuses to
// start rather than run the command without a filter.
var errUnsupportedArch = errors.New("seccomp filter has no syscall table for this architecture")

func nativeABI() (abi, error) {
	return abi{}, fmt.Errorf("GOARCH %s: %w", runtime.GOARCH, errUnsupportedArch)
}

// Rules is empty where there is no table; Program and Install fail instead.
func Rules(Options) []Rule { return nil }
