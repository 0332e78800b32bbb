//go:build linux

package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// foreignArch is the ABI an amd64 process reaches with int 0x80.
const foreignArch = unix.AUDIT_ARCH_I386

// archDenied are the calls only x86-64 has that the brief requires denied.
func archDenied() []namedNr {
	return []namedNr{{"iopl", unix.SYS_IOPL}, {"ioperm", unix.SYS_IOPERM}, {"uselib", unix.SYS_USELIB}}
}

// TestVMX32 checks that x32 numbers are killed while the negative numbers the kernel never dispatches
// (-1 is how a tracer skips a call) are left to the kernel's ENOSYS.
func TestVMX32(t *testing.T) {
	const x32 = 0x40000000
	tests := []struct {
		name string
		nr   uint32
		want Action
	}{
		{"x32 read", x32 | unix.SYS_READ, ActKillProcess},
		{"x32 getpid", x32 | unix.SYS_GETPID, ActKillProcess},
		{"x32 mount", x32 | unix.SYS_MOUNT, ActKillProcess},
		{"x32 ioctl (x32's own number 514)", x32 | 514, ActKillProcess},
		{"x32 top of range", 0x7fffffff, ActKillProcess},
		{"-1 (tracer skip)", 0xffffffff, ActAllow},
		{"negative with bit 30", 0xc0000000 | unix.SYS_MOUNT, ActAllow},
		{"just below x32", x32 - 1, ActAllow},
	}
	for _, o := range []Options{{}, {AllowNesting: true}} {
		v := newVM(t, o)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := v.run(t, native(tt.nr)); got != tt.want {
					t.Errorf("nr %#x: got %v, want %v", tt.nr, got, tt.want)
				}
			})
		}
	}
}
