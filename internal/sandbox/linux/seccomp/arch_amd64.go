//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// nativeABI is x86-64. i386 calls (int 0x80, sysenter) arrive as AUDIT_ARCH_I386 and x32 calls as
// AUDIT_ARCH_X86_64 with bit 30 set in the number; the filter kills both.
func nativeABI() (abi, error) {
	return abi{goarch: "amd64", auditArch: unix.AUDIT_ARCH_X86_64, x32: true}, nil
}

// archRules are the denials for calls only x86-64 has.
func archRules() []Rule {
	return []Rule{
		deny("iopl", unix.SYS_IOPL, "raises the I/O privilege level: direct access to hardware ports"),
		deny("ioperm", unix.SYS_IOPERM, "grants direct access to hardware I/O ports"),
		deny("uselib", unix.SYS_USELIB, "legacy a.out library loader; no modern program uses it"),
	}
}
