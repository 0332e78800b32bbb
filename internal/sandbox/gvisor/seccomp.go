//go:build linux

package gvisor

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/seccomp"
)

// The OCI spec's linux.seccomp, as far as runsc reads it (runsc/specutils/seccomp): it honours the
// default action, the names, the actions and the argument operators, and ignores architectures
// (gVisor runs native calls only; a foreign ABI kills the thread) and errnoRet.
type (
	ociSeccomp struct {
		DefaultAction string       `json:"defaultAction"`
		Syscalls      []ociSyscall `json:"syscalls"`
	}
	ociSyscall struct {
		Names  []string `json:"names"`
		Action string   `json:"action"`
		Args   []ociArg `json:"args,omitempty"`
	}
	// ociArg is one comparison; cordon uses only SCMP_CMP_MASKED_EQ: (arg & Value) == ValueTwo.
	ociArg struct {
		Index    int    `json:"index"`
		Value    uint64 `json:"value"`
		ValueTwo uint64 `json:"valueTwo"`
		Op       string `json:"op"`
	}
)

// The OCI actions cordon's verdicts become under runsc.
const (
	ociAllow = "SCMP_ACT_ALLOW"
	// ociErrno fails the call with EPERM: runsc ignores errnoRet and always returns EPERM.
	ociErrno = "SCMP_ACT_ERRNO"
	// ociTrace, with no tracer, fails the call with ENOSYS without running it (gVisor's Sentry
	// follows Linux here); ptraceSeccompGuard keeps any tracer from being asked instead.
	ociTrace    = "SCMP_ACT_TRACE"
	ociKill     = "SCMP_ACT_KILL"
	ociMaskedEq = "SCMP_CMP_MASKED_EQ"
	// ptraceOTraceSeccomp is PTRACE_O_TRACESECCOMP, the option that makes a tracer the judge of a
	// SECCOMP_RET_TRACE verdict.
	ptraceOTraceSeccomp = 0x80
)

// Seccomp renders the native box's filter for opts (seccomp.Rules) as the OCI spec's linux.seccomp,
// which runsc with --oci-seccomp installs for the command inside gVisor's kernel: the same filter,
// without a process of cordon's started inside the sandbox to install it (which cost tens of
// milliseconds of every start). The translation keeps what each rule refuses exactly, because runsc
// evaluates MASKED_EQ on the whole 64-bit argument and a mask of the low half ignores the high half
// as cordon's own filter does; what changes is the errno of a refusal:
//
//   - EPERM stays EPERM; EAFNOSUPPORT and EPROTONOSUPPORT (socket families and netlink protocols)
//     become EPERM, the only errno runsc returns: the call is refused all the same.
//   - ENOSYS (clone3, whose flags seccomp cannot read) becomes SCMP_ACT_TRACE, which without a
//     tracer is ENOSYS, so libc still falls back to clone; since a tracer asked about the call could
//     let it run, PTRACE_SETOPTIONS with PTRACE_O_TRACESECCOMP is refused (PTRACE_SEIZE, the other
//     way to set it, already is).
//
// A condition "none of" is expressed as the aligned blocks of values that make up its complement,
// each one MASKED_EQ, and a rule with several conditions as one OCI entry per combination (runsc ORs
// comparisons of one argument within an entry and ANDs those of different arguments). Rules for one
// call must agree on the OCI action, so that the order runsc tries entries in cannot change a verdict;
// a table that breaks this, or has two conditions on one argument, is an error, never a weaker filter.
func Seccomp(opts seccomp.Options) (*ociSeccomp, error) {
	rules := seccomp.Rules(opts)
	if len(rules) == 0 {
		return nil, fmt.Errorf("seccomp: no syscall table for this architecture")
	}
	out := &ociSeccomp{DefaultAction: ociAllow}
	actions := map[string]string{}
	traced := false
	add := func(r seccomp.Rule) error {
		act, err := ociAction(r.Action)
		if err != nil {
			return fmt.Errorf("seccomp: %s: %w", r, err)
		}
		if prev, ok := actions[r.Syscall]; ok && prev != act {
			return fmt.Errorf("seccomp: %s: %s here but %s in an earlier rule: the OCI filter's order would decide", r, act, prev)
		}
		actions[r.Syscall] = act
		traced = traced || act == ociTrace
		terms, err := dnf(r.When)
		if err != nil {
			return fmt.Errorf("seccomp: %s: %w", r, err)
		}
		for _, args := range terms {
			out.Syscalls = append(out.Syscalls, ociSyscall{Names: []string{r.Syscall}, Action: act, Args: args})
		}
		return nil
	}
	for _, r := range rules {
		if err := add(r); err != nil {
			return nil, err
		}
	}
	if traced {
		guard := seccomp.Rule{Syscall: "ptrace", Nr: unix.SYS_PTRACE, Action: seccomp.ActEPERM,
			Reason: "a tracer with PTRACE_O_TRACESECCOMP could let a call the filter answers with TRACE (ENOSYS) run",
			When: []seccomp.Cond{
				{Arg: 0, Mask: 0xffffffff, Op: seccomp.OneOf, Values: []seccomp.Const{{Name: "PTRACE_SETOPTIONS", Value: unix.PTRACE_SETOPTIONS}}},
				{Arg: 3, Mask: ptraceOTraceSeccomp, Op: seccomp.OneOf, Values: []seccomp.Const{{Name: "PTRACE_O_TRACESECCOMP", Value: ptraceOTraceSeccomp}}},
			}}
		if err := add(guard); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ociAction is the OCI action runsc gives for a verdict of cordon's table.
func ociAction(a seccomp.Action) (string, error) {
	switch a {
	case seccomp.ActAllow:
		return ociAllow, nil
	case seccomp.ActEPERM, seccomp.ActEAFNOSUPPORT, seccomp.ActEPROTONOSUPPORT:
		return ociErrno, nil
	case seccomp.ActENOSYS:
		return ociTrace, nil
	case seccomp.ActKillProcess:
		return ociKill, nil
	}
	return "", fmt.Errorf("no OCI action for %v", a)
}

// dnf turns a rule's conditions (all must hold) into alternatives (any may hold), each a list of
// comparisons on distinct arguments (all must hold). No conditions: one empty alternative.
func dnf(conds []seccomp.Cond) ([][]ociArg, error) {
	terms := [][]ociArg{nil}
	seen := map[int]bool{}
	for _, c := range conds {
		if seen[c.Arg] {
			return nil, fmt.Errorf("two conditions on argument %d cannot be one OCI entry", c.Arg)
		}
		seen[c.Arg] = true
		alts, err := alternatives(c)
		if err != nil {
			return nil, err
		}
		var next [][]ociArg
		for _, t := range terms {
			for _, a := range alts {
				next = append(next, append(slices.Clip(t), a))
			}
		}
		terms = next
	}
	return terms, nil
}

// alternatives are the comparisons of which one holds exactly when c does.
func alternatives(c seccomp.Cond) ([]ociArg, error) {
	cmp := func(mask, value uint32) ociArg {
		return ociArg{Index: c.Arg, Value: uint64(mask), ValueTwo: uint64(value), Op: ociMaskedEq}
	}
	var out []ociArg
	switch c.Op {
	case seccomp.OneOf:
		for _, v := range c.Values {
			out = append(out, cmp(c.Mask, v.Value))
		}
	case seccomp.NoneOf:
		if c.Mask != 0xffffffff {
			return nil, fmt.Errorf("%s: \"none of\" is rendered for a whole low half only", c)
		}
		vals := make([]uint32, 0, len(c.Values))
		for _, v := range c.Values {
			vals = append(vals, v.Value)
		}
		for _, b := range complementBlocks(vals) {
			out = append(out, cmp(b.mask, b.value))
		}
	default:
		return nil, fmt.Errorf("%s: unknown operator", c)
	}
	return out, nil
}

// block is the set of 32-bit values x with x&mask == value, mask being leading ones.
type block struct{ mask, value uint32 }

// complementBlocks covers every 32-bit value not in vals with aligned blocks, at most 32 per value:
// it halves each block that holds one of vals until the halves hold none or are that one value.
func complementBlocks(vals []uint32) []block {
	var out []block
	var walk func(prefix uint64, free uint, in []uint32)
	walk = func(prefix uint64, free uint, in []uint32) {
		if len(in) == 0 {
			out = append(out, block{mask: uint32(0xffffffff << free), value: uint32(prefix)})
			return
		}
		if free == 0 {
			return // the one value of the block is in vals
		}
		half := prefix + 1<<(free-1)
		var lo, hi []uint32
		for _, v := range in {
			if uint64(v) < half {
				lo = append(lo, v)
			} else {
				hi = append(hi, v)
			}
		}
		walk(prefix, free-1, lo)
		walk(half, free-1, hi)
	}
	walk(0, 32, slices.Compact(slices.Sorted(slices.Values(vals))))
	return out
}
