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
// The rules for one call must agree on the OCI action (a table that breaks this is an error, never
// a weaker filter), so a call's verdict is that action when any of its rules holds. runsc tries
// entries in order, the first that holds deciding, and comparisons of one argument within an entry
// are ORed, those of different arguments ANDed; so a rule with several conditions is one entry per
// combination of their values, and a condition "none of" (arg not in V), which no entry can say,
// is said by order: entries allowing the rule's other conditions with arg in V, then one refusing
// the other conditions. That is exact only where no rule emitted later could hold for what those
// entries allow, which render checks (the rule it renders so must contradict every rule still to
// come); where none can be placed so, a "none of" becomes the aligned blocks of values that make
// up its complement, each one MASKED_EQ (up to 32 entries per value).
func Seccomp(opts seccomp.Options) (*ociSeccomp, error) {
	rules := seccomp.Rules(opts)
	if len(rules) == 0 {
		return nil, fmt.Errorf("seccomp: no syscall table for this architecture")
	}
	var order []string
	groups := map[string][]seccomp.Rule{}
	for _, r := range rules {
		if _, ok := groups[r.Syscall]; !ok {
			order = append(order, r.Syscall)
		}
		groups[r.Syscall] = append(groups[r.Syscall], r)
	}
	traced := false
	for _, r := range rules {
		traced = traced || r.Action == seccomp.ActENOSYS
	}
	if traced {
		guard := seccomp.Rule{Syscall: "ptrace", Nr: unix.SYS_PTRACE, Action: seccomp.ActEPERM,
			Reason: "a tracer with PTRACE_O_TRACESECCOMP could let a call the filter answers with TRACE (ENOSYS) run",
			When: []seccomp.Cond{
				{Arg: 0, Mask: 0xffffffff, Op: seccomp.OneOf, Values: []seccomp.Const{{Name: "PTRACE_SETOPTIONS", Value: unix.PTRACE_SETOPTIONS}}},
				{Arg: 3, Mask: ptraceOTraceSeccomp, Op: seccomp.OneOf, Values: []seccomp.Const{{Name: "PTRACE_O_TRACESECCOMP", Value: ptraceOTraceSeccomp}}},
			}}
		if _, ok := groups["ptrace"]; !ok {
			order = append(order, "ptrace")
		}
		groups["ptrace"] = append(groups["ptrace"], guard)
	}
	// A call refused outright shares one entry with every other call refused so with the same
	// action: runsc builds a rule set per entry, and fewer make its program quicker to build.
	out := &ociSeccomp{DefaultAction: ociAllow}
	whole := map[string]int{}
	var rest []ociSyscall
	for _, name := range order {
		entries, err := render(groups[name])
		if err != nil {
			return nil, fmt.Errorf("seccomp: %s: %w", name, err)
		}
		if len(entries) != 1 || len(entries[0].Args) > 0 {
			rest = append(rest, entries...)
			continue
		}
		e := entries[0]
		if i, ok := whole[e.Action]; ok {
			out.Syscalls[i].Names = append(out.Syscalls[i].Names, e.Names...)
			continue
		}
		whole[e.Action] = len(out.Syscalls)
		out.Syscalls = append(out.Syscalls, e)
	}
	out.Syscalls = append(out.Syscalls, rest...)
	return out, nil
}

// render turns the rules of one call into OCI entries, in the order runsc must try them.
func render(rules []seccomp.Rule) ([]ociSyscall, error) {
	act, err := ociAction(rules[0].Action)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rules[0], err)
	}
	var out []ociSyscall
	emit := func(action string, conds []seccomp.Cond) error {
		terms, err := dnf(conds)
		if err != nil {
			return err
		}
		for _, args := range terms {
			out = append(out, ociSyscall{Names: []string{rules[0].Syscall}, Action: action, Args: args})
		}
		return nil
	}
	// Rules without "none of" first: any of them holding decides, whatever follows.
	var pending []seccomp.Rule
	for _, r := range rules {
		if a, err := ociAction(r.Action); err != nil || a != act {
			return nil, fmt.Errorf("%s: its action (%v) differs from an earlier rule's (%s): the OCI filter's order would decide", r, r.Action, act)
		}
		if noneOf(r) < 0 {
			if err := emit(act, r.When); err != nil {
				return nil, fmt.Errorf("%s: %w", r, err)
			}
		} else {
			pending = append(pending, r)
		}
	}
	for len(pending) > 0 {
		i := slices.IndexFunc(pending, func(r seccomp.Rule) bool { return allowsSafely(r, pending) })
		if i < 0 {
			// No rule can be said by order: the first becomes refusals of its complement's blocks.
			if err := emit(act, pending[0].When); err != nil {
				return nil, fmt.Errorf("%s: %w", pending[0], err)
			}
			pending = pending[1:]
			continue
		}
		r := pending[i]
		pending = slices.Delete(pending, i, i+1)
		n := noneOf(r)
		c := r.When[n]
		allow := slices.Clone(r.When)
		allow[n] = seccomp.Cond{Arg: c.Arg, Mask: c.Mask, Op: seccomp.OneOf, Values: c.Values}
		rest := slices.Delete(slices.Clone(r.When), n, n+1)
		if err := emit(ociAllow, allow); err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		if err := emit(act, rest); err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
	}
	return out, nil
}

// noneOf is the index of r's one "none of" condition, or -1; a rule with two is rendered whole as
// blocks (allowsSafely refuses it).
func noneOf(r seccomp.Rule) int {
	return slices.IndexFunc(r.When, func(c seccomp.Cond) bool { return c.Op == seccomp.NoneOf })
}

// allowsSafely reports whether r's "none of" may be said by order: every call its allowing entries
// let through (its other conditions, with the argument one of the values) must be one that every
// other rule in pending refuses to hold for, through a condition on the same argument and mask that
// the value contradicts.
func allowsSafely(r seccomp.Rule, pending []seccomp.Rule) bool {
	n := noneOf(r)
	if n < 0 || slices.IndexFunc(r.When[n+1:], func(c seccomp.Cond) bool { return c.Op == seccomp.NoneOf }) >= 0 {
		return false
	}
	c := r.When[n]
	for _, o := range pending {
		if o.Reason == r.Reason && slices.EqualFunc(o.When, r.When, func(a, b seccomp.Cond) bool { return a.String() == b.String() }) {
			continue // r itself
		}
		for _, v := range c.Values {
			if !contradicts(o, r.When, n, v.Value) {
				return false
			}
		}
	}
	return true
}

// contradicts reports whether rule o cannot hold for a call meeting conds with conds[n]'s argument
// (masked) equal to v: o has a condition on an argument and mask that conds fix to values o's
// condition excludes.
func contradicts(o seccomp.Rule, conds []seccomp.Cond, n int, v uint32) bool {
	fixed := func(arg int, mask uint32) ([]uint32, bool) {
		if conds[n].Arg == arg && conds[n].Mask == mask {
			return []uint32{v}, true
		}
		for i, c := range conds {
			if i != n && c.Arg == arg && c.Mask == mask && c.Op == seccomp.OneOf {
				var vs []uint32
				for _, k := range c.Values {
					vs = append(vs, k.Value)
				}
				return vs, true
			}
		}
		return nil, false
	}
	for _, oc := range o.When {
		vs, ok := fixed(oc.Arg, oc.Mask)
		if !ok {
			continue
		}
		excluded := true
		for _, x := range vs {
			in := slices.ContainsFunc(oc.Values, func(k seccomp.Const) bool { return k.Value == x })
			if in == (oc.Op == seccomp.OneOf) {
				excluded = false
			}
		}
		if excluded {
			return true
		}
	}
	return false
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
