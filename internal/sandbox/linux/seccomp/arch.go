//go:build linux

package seccomp

// abi describes the system call interface the filter guards: which audit architecture the kernel
// reports for native calls, and whether a second ABI shares it.
type abi struct {
	// goarch names the ABI as GOARCH does, for golden file names and messages.
	goarch string
	// auditArch is seccomp_data.arch for native calls; any other value is a foreign ABI.
	auditArch uint32
	// x32 is set where the x32 ABI shares auditArch and is told apart by x32Bit in the number.
	x32 bool
}

// x32Bit marks an x32 system call number on amd64 (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000
