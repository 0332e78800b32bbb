//go:build linux

package seccomp

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Options are the choices the policy makes about the filter. The zero value is the strictest filter.
type Options struct {
	// AllowNesting lets the command create user namespaces (unshare and clone with CLONE_NEWUSER, and
	// clone3), for tools that sandbox themselves. setns stays denied either way.
	AllowNesting bool
}

// Action is the filter's verdict on a system call. It holds the raw SECCOMP_RET_* value the BPF program
// returns, so the table, the program and the tests speak the kernel's language.
type Action uint32

// The verdicts a rule may give. Denials are errnos so that tools see an ordinary failure and degrade.
const (
	// ActAllow lets the call through. It is the filter's default.
	ActAllow = Action(unix.SECCOMP_RET_ALLOW)
	// ActEPERM fails the call with EPERM, what a tool sees when it lacks a privilege, so most carry on.
	ActEPERM = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	// ActENOSYS fails the call with ENOSYS, which tells callers to fall back to an older interface
	// (glibc falls back from clone3 to clone, which the filter can inspect).
	ActENOSYS = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	// ActEAFNOSUPPORT fails socket(2) with EAFNOSUPPORT, what a kernel built without the address
	// family says, so programs take the path they take on such kernels (no vsock, no bluetooth).
	ActEAFNOSUPPORT = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT))
	// ActEPROTONOSUPPORT fails socket(2) with EPROTONOSUPPORT, what the kernel says of a netlink
	// protocol it lacks; libaudit, for one, then carries on as on a kernel without audit.
	ActEPROTONOSUPPORT = Action(unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT))
	// ActKillProcess kills the whole process with SIGSYS, for calls no legitimate program makes.
	ActKillProcess = Action(unix.SECCOMP_RET_KILL_PROCESS)
)

// String names the verdict as the golden files and test failures show it.
func (a Action) String() string {
	switch a {
	case ActAllow:
		return "ALLOW"
	case ActEPERM:
		return "EPERM"
	case ActENOSYS:
		return "ENOSYS"
	case ActEAFNOSUPPORT:
		return "EAFNOSUPPORT"
	case ActEPROTONOSUPPORT:
		return "EPROTONOSUPPORT"
	case ActKillProcess:
		return "KILL_PROCESS"
	}
	return fmt.Sprintf("action(%#x)", uint32(a))
}

func (a Action) known() bool {
	switch a {
	case ActAllow, ActEPERM, ActENOSYS, ActEAFNOSUPPORT, ActEPROTONOSUPPORT, ActKillProcess:
		return true
	}
	return false
}

// Const is a named value a condition compares against, so that the rendered table reads "TIOCSTI"
// rather than 0x5412.
type Const struct {
	Name  string
	Value uint32
}

// CondOp says how a condition's masked argument relates to its values.
type CondOp uint8

// The two tests a condition can make: membership (deny these) and exclusion (deny all but these).
const (
	// OneOf holds when the masked argument equals one of the values.
	OneOf CondOp = iota + 1
	// NoneOf holds when the masked argument equals none of the values. Use it only on arguments the
	// kernel itself reads as 32 bits (int, unsigned int): the filter looks at the low half alone, and
	// for a wider argument a caller could pass an allowed low half with a high half the kernel honours.
	NoneOf
)

// Cond is a test on one argument of a call.
//
// seccomp sees each 64-bit argument as two 32-bit halves, and a Cond looks only at the low half. Every
// argument the table inspects is either an int or unsigned int that the kernel truncates to 32 bits
// (ioctl's command, socket's family, type and protocol, personality), so the high half is the caller's
// to fill with anything and must not decide the verdict (ioctl(fd, 0x100005412) is TIOCSTI), or a
// flags word whose bits of interest lie in the low half (clone, unshare). For a OneOf test on a wider
// argument (ptrace's request is a long) looking at the low half alone denies a superset, which fails
// closed.
type Cond struct {
	// Arg is the index of the argument, 0 to 5.
	Arg int
	// Mask is ANDed with the argument's low half before comparing (0xffffffff: the whole half).
	Mask uint32
	// Op is the comparison.
	Op CondOp
	// Values are what the masked argument is compared with; each must lie within Mask.
	Values []Const
}

// String renders the condition for the table, for example "arg1&0xf in {SOCK_RAW, SOCK_PACKET}".
func (c Cond) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "arg%d", c.Arg)
	if c.Mask != 0xffffffff {
		fmt.Fprintf(&b, "&%#x", c.Mask)
	}
	switch c.Op {
	case OneOf:
		b.WriteString(" in {")
	case NoneOf:
		b.WriteString(" not in {")
	default:
		fmt.Fprintf(&b, " op(%d) {", c.Op)
	}
	for i, v := range c.Values {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%#x", v.Name, v.Value)
	}
	b.WriteString("}")
	return b.String()
}

// Rule is one row of the filter's table: what call, under what condition, gets which verdict, and why.
// Rules for the same call are tried in table order and the first whose conditions all hold decides; a
// call no rule matches is allowed.
type Rule struct {
	// Syscall is the call's name as in syscalls(2).
	Syscall string
	// Nr is the call's number for the build's GOARCH, from golang.org/x/sys/unix.
	Nr uint32
	// When lists conditions that must all hold; with none the rule matches every call.
	When []Cond
	// Action is the verdict.
	Action Action
	// Reason says in one line why the rule exists, for reviewers and for cordon's reports.
	Reason string
}

// String renders the rule as one line of the table.
func (r Rule) String() string {
	when := "always"
	if len(r.When) > 0 {
		parts := make([]string, len(r.When))
		for i, c := range r.When {
			parts[i] = c.String()
		}
		when = strings.Join(parts, " && ")
	}
	return fmt.Sprintf("%s(%d)\t%s\t%s\t%s", r.Syscall, r.Nr, when, r.Action, r.Reason)
}

// validate rejects a table that would compile into a filter that does not say what the table says:
// a condition that can never hold, a rule that can never be reached, a verdict the kernel does not
// know. It is the compiler's guard, so a mistake in the table is a build error, not a silent hole.
func validate(rules []Rule) error {
	names := map[uint32]string{}
	unconditional := map[uint32]bool{}
	for i, r := range rules {
		where := fmt.Sprintf("rule %d (%s)", i, r.Syscall)
		switch {
		case r.Syscall == "":
			return fmt.Errorf("rule %d: no syscall name", i)
		case r.Reason == "":
			return fmt.Errorf("%s: no reason given", where)
		case !r.Action.known():
			return fmt.Errorf("%s: unknown action %v", where, r.Action)
		case r.Nr >= x32Bit:
			return fmt.Errorf("%s: syscall number %#x is outside the native range", where, r.Nr)
		}
		if n, ok := names[r.Nr]; ok && n != r.Syscall {
			return fmt.Errorf("%s: number %d is already %s", where, r.Nr, n)
		}
		names[r.Nr] = r.Syscall
		if unconditional[r.Nr] {
			return fmt.Errorf("%s: unreachable, an earlier rule for %s matches every call", where, r.Syscall)
		}
		if len(r.When) == 0 {
			unconditional[r.Nr] = true
		}
		for _, c := range r.When {
			if err := c.validate(); err != nil {
				return fmt.Errorf("%s: %s: %w", where, c, err)
			}
		}
	}
	return nil
}

func (c Cond) validate() error {
	switch {
	case c.Arg < 0 || c.Arg > 5:
		return fmt.Errorf("argument index %d out of range 0..5", c.Arg)
	case c.Mask == 0:
		return fmt.Errorf("zero mask")
	case c.Op != OneOf && c.Op != NoneOf:
		return fmt.Errorf("unknown operator %d", c.Op)
	case len(c.Values) == 0:
		return fmt.Errorf("no values")
	}
	for _, v := range c.Values {
		if v.Value&^c.Mask != 0 {
			return fmt.Errorf("value %s=%#x has bits outside mask %#x and can never match", v.Name, v.Value, c.Mask)
		}
	}
	return nil
}
