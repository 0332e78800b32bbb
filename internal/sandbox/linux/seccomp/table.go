//go:build linux && (amd64 || arm64)

package seccomp

import "golang.org/x/sys/unix"

// Values from <linux/personality.h>, which golang.org/x/sys/unix does not carry.
const (
	perLinux     = 0x0000
	perLinux32   = 0x0008
	perUname26   = 0x0020000
	perQuery     = 0xffffffff
	sockTypeMask = 0xf // SOCK_TYPE_MASK: SOCK_NONBLOCK and SOCK_CLOEXEC are ORed above it
)

// Rules returns the table in force for opts on the build's GOARCH, in the order the filter tries it.
// Each call builds a fresh table, so a caller may keep or change what it gets without touching the
// filter.
func Rules(opts Options) []Rule {
	var rules []Rule
	rules = append(rules, mountRules()...)
	rules = append(rules, namespaceRules(opts)...)
	rules = append(rules, processRules()...)
	rules = append(rules, kernelRules()...)
	rules = append(rules, hostRules()...)
	rules = append(rules, archRules()...)
	rules = append(rules, terminalRules()...)
	rules = append(rules, socketRules("socket", unix.SYS_SOCKET)...)
	rules = append(rules, socketRules("socketpair", unix.SYS_SOCKETPAIR)...)
	return rules
}

// mountRules keep the file system view the sandbox built: the command must not add, remove or move
// mounts, nor change its root. The new mount API gets the same treatment as mount(2).
func mountRules() []Rule {
	const api = "new mount API: does what mount(2) does"
	return []Rule{
		deny("mount", unix.SYS_MOUNT, "would rewrite the sandbox's view of the file system"),
		deny("umount2", unix.SYS_UMOUNT2, "would uncover what the sandbox's mounts hide"),
		deny("pivot_root", unix.SYS_PIVOT_ROOT, "changing the root is a classic step out of a mount namespace"),
		deny("chroot", unix.SYS_CHROOT, "changing the root is a classic step out of a mount namespace"),
		deny("open_tree", unix.SYS_OPEN_TREE, api+" (clones mount trees)"),
		deny("open_tree_attr", unix.SYS_OPEN_TREE_ATTR, api+" (clones mount trees, Linux 6.15)"),
		deny("move_mount", unix.SYS_MOVE_MOUNT, api),
		deny("fsopen", unix.SYS_FSOPEN, api),
		deny("fsconfig", unix.SYS_FSCONFIG, api),
		deny("fsmount", unix.SYS_FSMOUNT, api),
		deny("fspick", unix.SYS_FSPICK, api),
		deny("mount_setattr", unix.SYS_MOUNT_SETATTR, api+" (could make read-only binds writable)"),
	}
}

// namespaceRules keep the command in the sandbox's namespaces. A new user namespace hands its creator
// every capability inside it and so opens kernel code otherwise reachable only by root (netfilter,
// mounting file systems), a rich source of privilege escalations; it is allowed only for nesting.
func namespaceRules(opts Options) []Rule {
	rules := []Rule{
		deny("setns", unix.SYS_SETNS, "joining another namespace would leave the sandbox's; denied even with nesting"),
	}
	if opts.AllowNesting {
		return rules
	}
	newUser := argIn(0, unix.CLONE_NEWUSER, k("CLONE_NEWUSER", unix.CLONE_NEWUSER))
	return append(rules,
		deny("unshare", unix.SYS_UNSHARE, "a new user namespace grants every capability inside it; nesting is off", newUser),
		deny("clone", unix.SYS_CLONE, "a new user namespace grants every capability inside it; nesting is off", newUser),
		Rule{Syscall: "clone3", Nr: unix.SYS_CLONE3, Action: ActENOSYS,
			Reason: "flags sit behind a pointer seccomp cannot read; ENOSYS makes libc fall back to clone"},
	)
}

// processRules stop the command from reading or steering processes it did not start itself, any of
// which might hold a secret (cordon's init, a credential helper) or act for the user.
func processRules() []Rule {
	return []Rule{
		deny("ptrace", unix.SYS_PTRACE, "attaching to a process it did not start; PTRACE_TRACEME (debuggers) still works",
			argIn(0, 0xffffffff, k("PTRACE_ATTACH", unix.PTRACE_ATTACH), k("PTRACE_SEIZE", unix.PTRACE_SEIZE))),
		deny("process_vm_readv", unix.SYS_PROCESS_VM_READV, "reads another process's memory without attaching"),
		deny("process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, "writes another process's memory without attaching"),
		deny("kcmp", unix.SYS_KCMP, "inspects other processes' kernel objects; only checkpoint tools need it, Mesa falls back"),
		deny("pidfd_getfd", unix.SYS_PIDFD_GETFD, "copies a file descriptor out of another process, as ptrace could"),
	}
}

// kernelRules close the kernel interfaces that are large, rarely needed by a coding agent and a
// frequent source of exploitable bugs, or that load code into or replace the kernel.
func kernelRules() []Rule {
	const uring = "io_uring does I/O from kernel workers seccomp never sees, and is a frequent source of kernel bugs"
	const keys = "kernel keyrings are not isolated by the sandbox and may hold the user's keys"
	return []Rule{
		deny("bpf", unix.SYS_BPF, "loads programs into the kernel: a leading source of kernel exploits"),
		deny("perf_event_open", unix.SYS_PERF_EVENT_OPEN, "kernel performance counters: large attack surface and side channels"),
		deny("userfaultfd", unix.SYS_USERFAULTFD, "lets a process stall kernel page faults at will, a staple of kernel race exploits"),
		deny("io_uring_setup", unix.SYS_IO_URING_SETUP, uring),
		deny("io_uring_enter", unix.SYS_IO_URING_ENTER, uring),
		deny("io_uring_register", unix.SYS_IO_URING_REGISTER, uring),
		deny("keyctl", unix.SYS_KEYCTL, keys),
		deny("add_key", unix.SYS_ADD_KEY, keys),
		deny("request_key", unix.SYS_REQUEST_KEY, keys),
		deny("init_module", unix.SYS_INIT_MODULE, "loads code into the kernel"),
		deny("finit_module", unix.SYS_FINIT_MODULE, "loads code into the kernel"),
		deny("delete_module", unix.SYS_DELETE_MODULE, "unloads kernel code"),
		deny("kexec_load", unix.SYS_KEXEC_LOAD, "replaces the running kernel"),
		deny("kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, "replaces the running kernel"),
		deny("open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, "opens files by handle, skipping the path walk and so the mount view (the shocker escape)"),
		deny("name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, "makes handles for open_by_handle_at; nothing a coding agent does needs it"),
		deny("lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, "profiler interface mapping kernel cookies to paths (removed in Linux 6.8)"),
		deny("fanotify_init", unix.SYS_FANOTIFY_INIT, "watches file access mount- or file-system-wide, beyond the sandbox's view"),
		deny("personality", unix.SYS_PERSONALITY, "other personalities switch on exploit aids (READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ADDR_NO_RANDOMIZE)",
			Cond{Arg: 0, Mask: 0xffffffff, Op: NoneOf, Values: []Const{
				k("PER_LINUX", perLinux), k("PER_LINUX32", perLinux32), k("UNAME26", perUname26),
				k("PER_LINUX32|UNAME26", perLinux32|perUname26), k("query", perQuery),
			}}),
	}
}

// hostRules deny the administration of the host, which is shared with everything outside the sandbox.
func hostRules() []Rule {
	const clock = "the clock is the host's; nothing in the sandbox may set or tune it"
	return []Rule{
		deny("acct", unix.SYS_ACCT, "process accounting is host administration"),
		deny("swapon", unix.SYS_SWAPON, "swap is host administration"),
		deny("swapoff", unix.SYS_SWAPOFF, "swap is host administration"),
		deny("reboot", unix.SYS_REBOOT, "rebooting is host administration"),
		deny("syslog", unix.SYS_SYSLOG, "the kernel log leaks kernel addresses and host activity"),
		deny("quotactl", unix.SYS_QUOTACTL, "disk quotas are host administration"),
		deny("quotactl_fd", unix.SYS_QUOTACTL_FD, "disk quotas are host administration"),
		deny("settimeofday", unix.SYS_SETTIMEOFDAY, clock),
		deny("clock_settime", unix.SYS_CLOCK_SETTIME, clock),
		deny("clock_adjtime", unix.SYS_CLOCK_ADJTIME, clock),
		deny("adjtimex", unix.SYS_ADJTIMEX, clock),
		deny("vhangup", unix.SYS_VHANGUP, "hangs up the terminal, which the sandbox shares with the user"),
	}
}

// terminalRules stop the command from typing into the terminal it shares with the user, where the
// input would run as the user, outside the sandbox, once the agent exits.
func terminalRules() []Rule {
	return []Rule{
		deny("ioctl", unix.SYS_IOCTL, "TIOCSTI fakes terminal input that runs outside the sandbox; TIOCLINUX does so on a console",
			argIn(1, 0xffffffff, k("TIOCSTI", unix.TIOCSTI), k("TIOCLINUX", unix.TIOCLINUX))),
	}
}

// socketRules keep every packet on the path the egress gateway controls and the kernel's socket code
// small. The family is an allowlist, not a denylist: unix, IPv4, IPv6 and netlink are all a coding
// agent uses, and every other family either is not network-namespaced (vsock reaches the hypervisor
// and other VMs around the netns and the gateway) or leaves the IP path the gateway sees (packet,
// bluetooth, CAN, TIPC, RDS, XDP), or is kernel attack surface nothing here needs (AF_ALG, AF_KEY,
// KCM). Refused families get EAFNOSUPPORT, so programs act as on a kernel built without them. A family
// added to Linux later is refused too. Netlink is kept to route (getaddrinfo, getifaddrs,
// if_nameindex, ip) and sock_diag (ss), both confined to the sandbox's netns; the rest (netfilter,
// xfrm, generic netlink, audit, uevents, crypto) is host administration or large attack surface, and
// EPROTONOSUPPORT makes libaudit and libudev carry on as without the protocol. Within IPv4 and IPv6:
// no raw sockets, which forge traffic past the redirection, and no MPTCP or SMC, which Landlock's TCP
// rules do not cover. socketpair gets the same conditions; the kernel refuses most of them there
// already, so the rules cost nothing and keep the two calls in step.
func socketRules(name string, nr uint32) []Rule {
	inet := argIn(0, 0xffffffff, k("AF_INET", unix.AF_INET), k("AF_INET6", unix.AF_INET6))
	return []Rule{
		{Syscall: name, Nr: nr, Action: ActEAFNOSUPPORT,
			Reason: "only unix, IPv4, IPv6 and netlink: vsock escapes the netns, packet and the rest bypass the gateway or are unneeded attack surface",
			When: []Cond{{Arg: 0, Mask: 0xffffffff, Op: NoneOf, Values: []Const{
				k("AF_UNIX", unix.AF_UNIX), k("AF_INET", unix.AF_INET), k("AF_INET6", unix.AF_INET6), k("AF_NETLINK", unix.AF_NETLINK),
			}}}},
		{Syscall: name, Nr: nr, Action: ActEPROTONOSUPPORT,
			Reason: "netlink only for route and sock_diag, confined to the netns; netfilter, xfrm, generic, audit, uevent are host administration or attack surface",
			When: []Cond{argIn(0, 0xffffffff, k("AF_NETLINK", unix.AF_NETLINK)), {Arg: 2, Mask: 0xffffffff, Op: NoneOf, Values: []Const{
				k("NETLINK_ROUTE", unix.NETLINK_ROUTE), k("NETLINK_SOCK_DIAG", unix.NETLINK_SOCK_DIAG),
			}}}},
		deny(name, nr, "raw sockets forge IP past the gateway; AF_INET+SOCK_PACKET is a packet socket; netlink and unix raw are harmless",
			inet, argIn(1, sockTypeMask, k("SOCK_RAW", unix.SOCK_RAW), k("SOCK_PACKET", unix.SOCK_PACKET))),
		deny(name, nr, "MPTCP and SMC sockets are not covered by Landlock's TCP rules",
			inet, argIn(2, 0xffffffff, k("IPPROTO_MPTCP", unix.IPPROTO_MPTCP), k("IPPROTO_SMC", unix.IPPROTO_SMC))),
	}
}

// deny is a rule that fails the call with EPERM when all conditions hold.
func deny(name string, nr uint32, reason string, when ...Cond) Rule {
	return Rule{Syscall: name, Nr: nr, When: when, Action: ActEPERM, Reason: reason}
}

// argIn is the condition "the argument's low half, masked, is one of values".
func argIn(arg int, mask uint32, values ...Const) Cond {
	return Cond{Arg: arg, Mask: mask, Op: OneOf, Values: values}
}

// k names a constant for the table.
func k(name string, v uint32) Const { return Const{Name: name, Value: v} }
