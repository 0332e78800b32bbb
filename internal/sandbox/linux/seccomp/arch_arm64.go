//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// nativeABI is AArch64. AArch32 compat calls arrive as AUDIT_ARCH_ARM; the filter kills them.
func nativeABI() (abi, error) {
	return abi{goarch: "arm64", auditArch: unix.AUDIT_ARCH_AARCH64}, nil
}

// archRules are the denials for calls only arm64 has: none (iopl, ioperm and uselib do not exist).
func archRules() []Rule { return nil }
