//go:build linux

package seccomp

// archAttempts: an AArch32 test program would need a compat-capable arm64 host; the VM tests cover
// the arch check there.
func archAttempts() []attempt { return nil }

func writeTestBinaries(string) error { return nil }
