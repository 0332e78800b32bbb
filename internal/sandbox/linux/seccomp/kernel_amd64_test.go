//go:build linux

package seccomp

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
)

// Machine code for the foreign-ABI test programs: each makes one call through another ABI, then
// exits 0 through the native one.
var (
	exit0      = []byte{0xb8, 0xe7, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05}                   // mov eax,231 (exit_group); xor edi,edi; syscall
	i386Getpid = []byte{0xb8, 20, 0, 0, 0, 0xcd, 0x80}                                 // mov eax,20 (i386 getpid); int 0x80
	x32Getpid  = []byte{0xb8, 39, 0, 0, 0x40, 0x0f, 0x05}                              // mov eax,0x40000027 (x32 getpid); syscall
	testElves  = map[string][]byte{"exit0": nil, "i386": i386Getpid, "x32": x32Getpid} // name -> code before exit0
)

// archAttempts run the foreign-ABI programs. Without the filter the i386 call works where the kernel
// has IA-32 emulation (elsewhere int 0x80 faults, SIGSEGV, and the attempt is skipped) and the x32
// call gets ENOSYS (no x32 ABI) or works; either way the program exits 0. The control program shows
// that the test programs run at all under the filter.
func archAttempts() []attempt {
	run := func(name string) func(e childEnv) string {
		return func(e childEnv) string { return runResult(nil, filepath.Join(e.dir, name)) }
	}
	return []attempt{
		{"exec static program (control)", run("exit0"), "ok", "", "ok", ""},
		{"i386 int 0x80 getpid", run("i386"), "signal SIGSYS", "", "ok", "signal SIGSEGV"},
		{"x32 getpid", run("x32"), "signal SIGSYS", "", "ok", ""},
	}
}

// writeTestBinaries writes the test programs into dir as minimal static x86-64 ELF executables.
func writeTestBinaries(dir string) error {
	for name, code := range testElves {
		if err := os.WriteFile(filepath.Join(dir, name), tinyELF(append(append([]byte(nil), code...), exit0...)), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// tinyELF wraps code in an ELF header and one loadable segment, entry at the code.
func tinyELF(code []byte) []byte {
	const base = 0x400000
	hdrSize, phSize := binary.Size(elf.Header64{}), binary.Size(elf.Prog64{})
	total := uint64(hdrSize + phSize + len(code))
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Entry: base + uint64(hdrSize+phSize), Phoff: uint64(hdrSize),
		Ehsize: uint16(hdrSize), Phentsize: uint16(phSize), Phnum: 1,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	p := elf.Prog64{
		Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X),
		Vaddr: base, Paddr: base, Filesz: total, Memsz: total, Align: 0x1000,
	}
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, h) // writes to a bytes.Buffer cannot fail
	_ = binary.Write(&buf, binary.LittleEndian, p)
	buf.Write(code)
	return buf.Bytes()
}
