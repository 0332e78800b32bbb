//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// foreignArch is the ABI an arm64 process reaches from AArch32 code.
const foreignArch = unix.AUDIT_ARCH_ARM

// archDenied: arm64 has no calls of its own in the brief.
func archDenied() []namedNr { return nil }
