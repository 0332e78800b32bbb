//go:build linux

package seccomp

import (
	"fmt"
	"sort"

	"golang.org/x/net/bpf"
)

// Offsets into struct seccomp_data: nr (int), arch (u32), instruction_pointer (u64), args[6] (u64).
// Both supported architectures are little-endian, so an argument's low half comes first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
	// maxInstructions is BPF_MAXINSNS, the kernel's limit on a classic BPF program.
	maxInstructions = 4096
)

// Program returns the assembled filter for runtime.GOARCH and opts, ready for seccomp(2).
func Program(opts Options) ([]bpf.RawInstruction, error) {
	a, err := nativeABI()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	l, err := compile(a, Rules(opts))
	if err != nil {
		return nil, fmt.Errorf("seccomp: compile %s filter: %w", a.goarch, err)
	}
	raw, err := bpf.Assemble(l.ins)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble %s filter: %w", a.goarch, err)
	}
	return raw, nil
}

// listing is a compiled filter with one note per instruction saying what it is for, which the golden
// files print beside the disassembly.
type listing struct {
	ins   []bpf.Instruction
	notes []string
}

// compile turns the table into a classic BPF program:
//
//	arch != native                  -> KILL_PROCESS
//	(amd64) x32 number              -> KILL_PROCESS
//	for each syscall in the table:  nr == N -> try its rules in order, first match decides, else ALLOW
//	                                (syscalls with argument conditions first, see groupByNr)
//	otherwise                       -> ALLOW
//
// Calls the table does not name are decided from nr and arch alone, so the kernel's per-syscall
// action cache (Linux 5.11) allows them without running the filter at all.
func compile(a abi, rules []Rule) (listing, error) {
	if err := validate(rules); err != nil {
		return listing{}, err
	}
	b := &builder{}
	kill := b.newLabel()

	b.emit(bpf.LoadAbsolute{Off: offArch, Size: 4}, "A = arch")
	b.jump(bpf.JumpEqual, a.auditArch, next, kill, "native "+a.goarch+"? otherwise a foreign ABI: kill")
	b.emit(bpf.LoadAbsolute{Off: offNr, Size: 4}, "A = syscall number")
	if a.x32 {
		// The kernel dispatches a number to x32 only if it lies in [x32Bit, x32Bit+N); a negative one
		// (bit 31, -1 being how a tracer skips a call) reaches no handler and gets ENOSYS.
		dispatch := b.newLabel()
		b.jump(bpf.JumpBitsSet, 0x80000000, dispatch, next, "negative: no such call, kernel says ENOSYS")
		b.jump(bpf.JumpBitsSet, x32Bit, kill, next, "x32 ABI: kill")
		b.bind(dispatch)
	}

	for _, g := range groupByNr(rules) {
		nextSyscall := b.newLabel()
		b.jump(bpf.JumpEqual, g[0].Nr, next, nextSyscall, g[0].Syscall)
		for _, r := range g {
			fail := b.newLabel()
			for _, c := range r.When {
				b.cond(c, fail)
			}
			b.emit(bpf.RetConstant{Val: uint32(r.Action)}, r.Action.String()+": "+r.Syscall)
			b.bind(fail)
		}
		if len(g[len(g)-1].When) > 0 {
			b.emit(bpf.RetConstant{Val: uint32(ActAllow)}, "ALLOW: no rule for "+g[0].Syscall+" matched")
		}
		b.bind(nextSyscall)
	}
	b.emit(bpf.RetConstant{Val: uint32(ActAllow)}, "ALLOW: default")
	b.bind(kill)
	b.emit(bpf.RetConstant{Val: uint32(ActKillProcess)}, "KILL_PROCESS: foreign ABI")

	ins, err := b.resolve()
	if err != nil {
		return listing{}, err
	}
	if len(ins) > maxInstructions {
		return listing{}, fmt.Errorf("%d instructions, over the kernel's limit of %d", len(ins), maxInstructions)
	}
	return listing{ins: ins, notes: b.notes}, nil
}

// groupByNr gathers the rules for each syscall, keeping table order within a syscall. Syscalls with
// argument conditions come first (in table order), then the rest (in table order): only the former run
// the filter on every call (ioctl, socket and clone are frequent), while the kernel's action cache
// answers every call the filter allows on nr alone without running it.
func groupByNr(rules []Rule) [][]Rule {
	index := map[uint32]int{}
	var groups [][]Rule
	for _, r := range rules {
		i, ok := index[r.Nr]
		if !ok {
			i = len(groups)
			index[r.Nr] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	conditional := func(g []Rule) bool {
		for _, r := range g {
			if len(r.When) > 0 {
				return true
			}
		}
		return false
	}
	sort.SliceStable(groups, func(i, j int) bool { return conditional(groups[i]) && !conditional(groups[j]) })
	return groups
}

// label names a position in the program that jumps refer to before it is known.
type label int

// next is the instruction after the jump.
const next label = -1

// builder assembles instructions with forward jumps to labels, which resolve turns into the relative
// 8-bit skips classic BPF uses.
type builder struct {
	ins   []bpf.Instruction
	notes []string
	at    []int // label -> instruction index, -1 until bound
	jumps []pendingJump
}

type pendingJump struct {
	index       int
	onTrue, els label
}

func (b *builder) newLabel() label {
	b.at = append(b.at, -1)
	return label(len(b.at) - 1)
}

func (b *builder) bind(l label) { b.at[l] = len(b.ins) }

func (b *builder) emit(ins bpf.Instruction, note string) {
	b.ins = append(b.ins, ins)
	b.notes = append(b.notes, note)
}

func (b *builder) jump(cond bpf.JumpTest, val uint32, onTrue, els label, note string) {
	b.jumps = append(b.jumps, pendingJump{index: len(b.ins), onTrue: onTrue, els: els})
	b.emit(bpf.JumpIf{Cond: cond, Val: val}, note)
}

// cond emits the test for c, falling through when it holds and jumping to fail when it does not.
func (b *builder) cond(c Cond, fail label) {
	b.emit(bpf.LoadAbsolute{Off: uint32(offArgs + 8*c.Arg), Size: 4}, fmt.Sprintf("A = arg%d (low half)", c.Arg))
	if c.Mask != 0xffffffff {
		b.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: c.Mask}, fmt.Sprintf("A &= %#x", c.Mask))
	}
	switch c.Op {
	case OneOf:
		holds := b.newLabel()
		for i, v := range c.Values {
			if i == len(c.Values)-1 {
				b.jump(bpf.JumpEqual, v.Value, next, fail, v.Name)
			} else {
				b.jump(bpf.JumpEqual, v.Value, holds, next, v.Name)
			}
		}
		b.bind(holds)
	case NoneOf:
		for _, v := range c.Values {
			b.jump(bpf.JumpEqual, v.Value, fail, next, "not "+v.Name)
		}
	}
}

// resolve fills in every jump's skips. Classic BPF jumps only forward and at most 255 instructions;
// a table that needs more is an error, never a wrong jump.
func (b *builder) resolve() ([]bpf.Instruction, error) {
	ins := append([]bpf.Instruction(nil), b.ins...)
	skip := func(from int, l label) (uint8, error) {
		if l == next {
			return 0, nil
		}
		to := b.at[l]
		if to < 0 {
			return 0, fmt.Errorf("instruction %d jumps to an unbound label", from)
		}
		d := to - from - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("instruction %d would jump %d instructions; classic BPF allows 0 to 255", from, d)
		}
		return uint8(d), nil
	}
	for _, j := range b.jumps {
		t, err := skip(j.index, j.onTrue)
		if err != nil {
			return nil, err
		}
		f, err := skip(j.index, j.els)
		if err != nil {
			return nil, err
		}
		ji := ins[j.index].(bpf.JumpIf)
		ji.SkipTrue, ji.SkipFalse = t, f
		ins[j.index] = ji
	}
	return ins, nil
}
