//go:build !linux

package main

import "runtime"

// doctorHost reports that this platform has no sandbox backend; the end-to-end check then fails with
// the library's ErrUnsupported.
func (a *app) doctorHost(line func(state, what, detail string)) {
	line("FAIL", "platform", "cordon has no sandbox backend for "+runtime.GOOS+" yet")
}
