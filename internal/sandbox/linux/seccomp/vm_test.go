//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// call is a hand-built struct seccomp_data.
type call struct {
	arch uint32
	nr   uint32
	args [6]uint64
}

// vmInput lays out c for x/net/bpf's VM. The kernel loads seccomp_data's 32-bit words in host order
// (little-endian on amd64 and arm64) while the VM loads them big-endian, as for network packets; so each
// 32-bit field, including each half of an argument, is written big-endian at its kernel offset, and
// every aligned 4-byte load sees what the kernel's would. The filter makes no other kind of load.
func (c call) vmInput() []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[offNr:], c.nr)
	binary.BigEndian.PutUint32(b[offArch:], c.arch)
	for i, a := range c.args {
		binary.BigEndian.PutUint32(b[offArgs+8*i:], uint32(a))       // low half
		binary.BigEndian.PutUint32(b[offArgs+8*i+4:], uint32(a>>32)) // high half
	}
	return b
}

func (c call) String() string {
	return fmt.Sprintf("{arch %#x nr %#x args %#x}", c.arch, c.nr, c.args)
}

// native is a call through the build's own ABI.
func native(nr uint32, args ...uint64) call {
	a, _ := nativeABI()
	c := call{arch: a.auditArch, nr: nr}
	copy(c.args[:], args)
	return c
}

// vm runs the assembled filter, as Install would load it, in x/net/bpf's interpreter.
type vm struct{ *bpf.VM }

func newVM(t *testing.T, opts Options) vm {
	t.Helper()
	raw, err := Program(opts)
	if err != nil {
		t.Fatal(err)
	}
	ins, complete := bpf.Disassemble(raw)
	if !complete {
		t.Fatal("program does not disassemble")
	}
	v, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	return vm{v}
}

func (v vm) run(t *testing.T, c call) Action {
	t.Helper()
	n, err := v.Run(c.vmInput())
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	return Action(uint32(n))
}

// TestVMPolicy checks the policy the brief sets out, call by call, written independently of the table:
// a rule missing from the table or a condition that lets a neighbour through fails here.
func TestVMPolicy(t *testing.T) {
	const (
		hi      = 0xdead_beef_0000_0000 // garbage the kernel ignores in a 32-bit argument
		sigchld = uint64(unix.SIGCHLD)
	)
	a, _ := nativeABI()
	both := []Options{{}, {AllowNesting: true}}
	off, on := []Options{{}}, []Options{{AllowNesting: true}}
	tests := []struct {
		name string
		c    call
		opts []Options
		want Action
	}{
		// Ordinary calls pass.
		{"read", native(unix.SYS_READ, 0, 0, 0), both, ActAllow},
		{"openat", native(unix.SYS_OPENAT, 0, 0, 0), both, ActAllow},
		{"execve", native(unix.SYS_EXECVE), both, ActAllow},
		{"getpid", native(unix.SYS_GETPID), both, ActAllow},
		{"seccomp (stacking filters only narrows)", native(unix.SYS_SECCOMP), both, ActAllow},

		// Foreign ABIs die before any rule.
		{"wrong arch getpid", call{arch: foreignArch, nr: unix.SYS_GETPID}, both, ActKillProcess},
		{"wrong arch mount", call{arch: foreignArch, nr: unix.SYS_MOUNT}, both, ActKillProcess},
		{"arch zero", call{arch: 0, nr: unix.SYS_READ}, both, ActKillProcess},
		{"arch with a bit flipped", call{arch: a.auditArch ^ 1, nr: unix.SYS_READ}, both, ActKillProcess},

		// ioctl: only TIOCSTI and TIOCLINUX, judged on the low 32 bits the kernel keeps.
		{"ioctl TCGETS", native(unix.SYS_IOCTL, 0, unix.TCGETS), both, ActAllow},
		{"ioctl TIOCGWINSZ", native(unix.SYS_IOCTL, 0, unix.TIOCGWINSZ), both, ActAllow},
		{"ioctl TIOCSTI", native(unix.SYS_IOCTL, 0, unix.TIOCSTI), both, ActEPERM},
		{"ioctl TIOCSTI high bit 0x100005412", native(unix.SYS_IOCTL, 0, 0x1_0000_5412), both, ActEPERM},
		{"ioctl TIOCSTI high garbage", native(unix.SYS_IOCTL, 0, hi|unix.TIOCSTI), both, ActEPERM},
		{"ioctl TIOCLINUX", native(unix.SYS_IOCTL, 0, unix.TIOCLINUX), both, ActEPERM},
		{"ioctl TIOCLINUX high garbage", native(unix.SYS_IOCTL, 0, hi|unix.TIOCLINUX), both, ActEPERM},
		{"ioctl TIOCSTI in arg2 is just data", native(unix.SYS_IOCTL, 0, unix.TCGETS, unix.TIOCSTI), both, ActAllow},

		// socket and socketpair.
		{"socket inet stream cloexec", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0), both, ActAllow},
		{"socket inet tcp", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP), both, ActAllow},
		{"socket inet6 udp", native(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0), both, ActAllow},
		{"socket unix stream", native(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0), both, ActAllow},
		{"socket unix raw (kernel makes it dgram)", native(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_RAW, 0), both, ActAllow},
		{"socket netlink raw route (getifaddrs)", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE), both, ActAllow},
		{"socket netlink dgram route", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_ROUTE), both, ActAllow},
		{"socket netlink sock_diag (ss)", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG), both, ActAllow},
		{"socket netlink route, high garbage in protocol", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, hi|unix.NETLINK_ROUTE), both, ActAllow},
		{"socket netlink audit", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT), both, ActEPROTONOSUPPORT},
		{"socket netlink netfilter", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER), both, ActEPROTONOSUPPORT},
		{"socket netlink generic", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC), both, ActEPROTONOSUPPORT},
		{"socket netlink xfrm", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM), both, ActEPROTONOSUPPORT},
		{"socket netlink uevent", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT), both, ActEPROTONOSUPPORT},
		{"socket netlink crypto", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_CRYPTO), both, ActEPROTONOSUPPORT},
		{"socket netlink netfilter, route in the high half", native(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, 1<<32|unix.NETLINK_NETFILTER), both, ActEPROTONOSUPPORT},
		{"socket packet", native(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0x300), both, ActEAFNOSUPPORT},
		{"socket packet dgram", native(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socket packet high garbage", native(unix.SYS_SOCKET, hi|unix.AF_PACKET, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socket vsock stream", native(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0), both, ActEAFNOSUPPORT},
		{"socket vsock dgram", native(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socket vsock seqpacket", native(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_SEQPACKET, 0), both, ActEAFNOSUPPORT},
		{"socket vsock, unix in the high half", native(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK, unix.SOCK_STREAM, 0), both, ActEAFNOSUPPORT},
		{"socket unix, vsock in the high half (kernel reads unix)", native(unix.SYS_SOCKET, unix.AF_VSOCK<<32|unix.AF_UNIX, unix.SOCK_STREAM, 0), both, ActAllow},
		{"socket alg", native(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0), both, ActEAFNOSUPPORT},
		{"socket key", native(unix.SYS_SOCKET, unix.AF_KEY, unix.SOCK_RAW, 2), both, ActEAFNOSUPPORT},
		{"socket xdp", native(unix.SYS_SOCKET, unix.AF_XDP, unix.SOCK_RAW, 0), both, ActEAFNOSUPPORT},
		{"socket bluetooth", native(unix.SYS_SOCKET, unix.AF_BLUETOOTH, unix.SOCK_RAW, 1), both, ActEAFNOSUPPORT},
		{"socket can", native(unix.SYS_SOCKET, unix.AF_CAN, unix.SOCK_RAW, 1), both, ActEAFNOSUPPORT},
		{"socket tipc", native(unix.SYS_SOCKET, unix.AF_TIPC, unix.SOCK_RDM, 0), both, ActEAFNOSUPPORT},
		{"socket rds", native(unix.SYS_SOCKET, unix.AF_RDS, unix.SOCK_SEQPACKET, 0), both, ActEAFNOSUPPORT},
		{"socket llc", native(unix.SYS_SOCKET, unix.AF_LLC, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socket kcm", native(unix.SYS_SOCKET, unix.AF_KCM, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socket smc", native(unix.SYS_SOCKET, unix.AF_SMC, unix.SOCK_STREAM, 0), both, ActEAFNOSUPPORT},
		{"socket mctp", native(unix.SYS_SOCKET, unix.AF_MCTP, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socket unspec", native(unix.SYS_SOCKET, unix.AF_UNSPEC, unix.SOCK_STREAM, 0), both, ActEAFNOSUPPORT},
		{"socket a family Linux may add later", native(unix.SYS_SOCKET, 46, unix.SOCK_STREAM, 0), both, ActEAFNOSUPPORT},
		{"socket family 0xffffffff", native(unix.SYS_SOCKET, 0xffffffff, unix.SOCK_STREAM, 0), both, ActEAFNOSUPPORT},
		{"socket inet raw", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP), both, ActEPERM},
		{"socket inet raw nonblock", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, unix.IPPROTO_ICMP), both, ActEPERM},
		{"socket inet raw cloexec nonblock", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0), both, ActEPERM},
		{"socket inet6 raw", native(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6), both, ActEPERM},
		{"socket inet SOCK_PACKET (becomes AF_PACKET)", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_PACKET, 0x300), both, ActEPERM},
		{"socket raw with netlink in the high half", native(unix.SYS_SOCKET, 1<<32|unix.AF_INET, unix.SOCK_RAW, 0), both, ActEPERM},
		{"socket inet mptcp", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), both, ActEPERM},
		{"socket inet6 mptcp cloexec", native(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP), both, ActEPERM},
		{"socket inet mptcp high garbage", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, hi|unix.IPPROTO_MPTCP), both, ActEPERM},
		{"socket unix protocol 262 (not MPTCP)", native(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), both, ActAllow},
		{"socket inet smc", native(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SMC), both, ActEPERM},
		{"socket inet6 smc high garbage", native(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, hi|unix.IPPROTO_SMC), both, ActEPERM},
		{"socket unix protocol 256 (not SMC)", native(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, unix.IPPROTO_SMC), both, ActAllow},
		{"socketpair unix stream", native(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0), both, ActAllow},
		{"socketpair unix dgram", native(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM, 0), both, ActAllow},
		{"socketpair packet", native(unix.SYS_SOCKETPAIR, unix.AF_PACKET, unix.SOCK_DGRAM, 0), both, ActEAFNOSUPPORT},
		{"socketpair vsock", native(unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0), both, ActEAFNOSUPPORT},
		{"socketpair tipc", native(unix.SYS_SOCKETPAIR, unix.AF_TIPC, unix.SOCK_SEQPACKET, 0), both, ActEAFNOSUPPORT},
		{"socketpair netlink audit", native(unix.SYS_SOCKETPAIR, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT), both, ActEPROTONOSUPPORT},
		{"socketpair inet raw nonblock", native(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, 0), both, ActEPERM},
		{"socketpair inet mptcp", native(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), both, ActEPERM},

		// User namespaces: denied unless nesting, setns always.
		{"clone fork", native(unix.SYS_CLONE, sigchld), both, ActAllow},
		{"clone vfork", native(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_VFORK|sigchld), both, ActAllow},
		{"clone thread", native(unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS|unix.CLONE_PARENT_SETTID|unix.CLONE_CHILD_CLEARTID), both, ActAllow},
		{"clone newuser", native(unix.SYS_CLONE, unix.CLONE_NEWUSER|sigchld), off, ActEPERM},
		{"clone newuser newns newpid", native(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWPID|sigchld), off, ActEPERM},
		{"clone newuser nesting", native(unix.SYS_CLONE, unix.CLONE_NEWUSER|sigchld), on, ActAllow},
		{"unshare newuser", native(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), off, ActEPERM},
		{"unshare newuser|newns", native(unix.SYS_UNSHARE, unix.CLONE_NEWUSER|unix.CLONE_NEWNS), off, ActEPERM},
		{"unshare newuser high garbage", native(unix.SYS_UNSHARE, hi|unix.CLONE_NEWUSER), off, ActEPERM},
		{"unshare newuser nesting", native(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), on, ActAllow},
		{"unshare files", native(unix.SYS_UNSHARE, unix.CLONE_FILES), both, ActAllow},
		{"unshare newns (needs CAP_SYS_ADMIN anyway)", native(unix.SYS_UNSHARE, unix.CLONE_NEWNS), both, ActAllow},
		{"clone3", native(unix.SYS_CLONE3, 0, 88), off, ActENOSYS},
		{"clone3 nesting", native(unix.SYS_CLONE3, 0, 88), on, ActAllow},
		{"setns", native(unix.SYS_SETNS, 3, 0), both, ActEPERM},
		{"setns newuser", native(unix.SYS_SETNS, 3, unix.CLONE_NEWUSER), both, ActEPERM},

		// ptrace: own children yes, others no.
		{"ptrace traceme", native(unix.SYS_PTRACE, unix.PTRACE_TRACEME), both, ActAllow},
		{"ptrace peekdata", native(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, 42), both, ActAllow},
		{"ptrace cont", native(unix.SYS_PTRACE, unix.PTRACE_CONT, 42), both, ActAllow},
		{"ptrace attach", native(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 42), both, ActEPERM},
		{"ptrace seize", native(unix.SYS_PTRACE, unix.PTRACE_SEIZE, 42), both, ActEPERM},
		{"ptrace attach high garbage (superset)", native(unix.SYS_PTRACE, hi|unix.PTRACE_ATTACH, 42), both, ActEPERM},

		// personality: the usual values only.
		{"personality query", native(unix.SYS_PERSONALITY, 0xffffffff), both, ActAllow},
		{"personality linux", native(unix.SYS_PERSONALITY, 0), both, ActAllow},
		{"personality linux32", native(unix.SYS_PERSONALITY, 8), both, ActAllow},
		{"personality uname26", native(unix.SYS_PERSONALITY, 0x20000), both, ActAllow},
		{"personality linux, high garbage (kernel reads 0)", native(unix.SYS_PERSONALITY, hi), both, ActAllow},
		{"personality ADDR_NO_RANDOMIZE", native(unix.SYS_PERSONALITY, 0x0040000), both, ActEPERM},
		{"personality READ_IMPLIES_EXEC", native(unix.SYS_PERSONALITY, 0x0400000), both, ActEPERM},
		{"personality MMAP_PAGE_ZERO", native(unix.SYS_PERSONALITY, 0x0100000), both, ActEPERM},
		{"personality query|ADDR_NO_RANDOMIZE", native(unix.SYS_PERSONALITY, 0xffffffff&^0x0040000), both, ActEPERM},
	}
	for _, name := range briefDenied() {
		tests = append(tests, struct {
			name string
			c    call
			opts []Options
			want Action
		}{name.name, native(name.nr), both, ActEPERM})
	}
	vms := map[Options]vm{}
	for _, o := range both {
		vms[o] = newVM(t, o)
	}
	for _, tt := range tests {
		for _, o := range tt.opts {
			t.Run(fmt.Sprintf("%s/nesting=%v", tt.name, o.AllowNesting), func(t *testing.T) {
				if got := vms[o].run(t, tt.c); got != tt.want {
					t.Errorf("%v: got %v, want %v", tt.c, got, tt.want)
				}
			})
		}
	}
}

// namedNr is a syscall the brief requires denied outright.
type namedNr struct {
	name string
	nr   uint32
}

// briefDenied lists the calls denied whatever their arguments, on every architecture.
func briefDenied() []namedNr {
	return append([]namedNr{
		{"mount", unix.SYS_MOUNT}, {"umount2", unix.SYS_UMOUNT2}, {"pivot_root", unix.SYS_PIVOT_ROOT},
		{"chroot", unix.SYS_CHROOT}, {"open_tree", unix.SYS_OPEN_TREE}, {"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
		{"move_mount", unix.SYS_MOVE_MOUNT}, {"fsopen", unix.SYS_FSOPEN}, {"fsconfig", unix.SYS_FSCONFIG},
		{"fsmount", unix.SYS_FSMOUNT}, {"fspick", unix.SYS_FSPICK}, {"mount_setattr", unix.SYS_MOUNT_SETATTR},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV}, {"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
		{"kcmp", unix.SYS_KCMP}, {"pidfd_getfd", unix.SYS_PIDFD_GETFD},
		{"bpf", unix.SYS_BPF}, {"perf_event_open", unix.SYS_PERF_EVENT_OPEN}, {"userfaultfd", unix.SYS_USERFAULTFD},
		{"kexec_load", unix.SYS_KEXEC_LOAD}, {"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
		{"init_module", unix.SYS_INIT_MODULE}, {"finit_module", unix.SYS_FINIT_MODULE}, {"delete_module", unix.SYS_DELETE_MODULE},
		{"keyctl", unix.SYS_KEYCTL}, {"add_key", unix.SYS_ADD_KEY}, {"request_key", unix.SYS_REQUEST_KEY},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP}, {"io_uring_enter", unix.SYS_IO_URING_ENTER},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER}, {"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
		{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT}, {"acct", unix.SYS_ACCT}, {"swapon", unix.SYS_SWAPON},
		{"swapoff", unix.SYS_SWAPOFF}, {"reboot", unix.SYS_REBOOT}, {"syslog", unix.SYS_SYSLOG},
		{"quotactl", unix.SYS_QUOTACTL}, {"quotactl_fd", unix.SYS_QUOTACTL_FD}, {"settimeofday", unix.SYS_SETTIMEOFDAY},
		{"clock_settime", unix.SYS_CLOCK_SETTIME}, {"clock_adjtime", unix.SYS_CLOCK_ADJTIME}, {"adjtimex", unix.SYS_ADJTIMEX},
		{"vhangup", unix.SYS_VHANGUP}, {"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE}, {"fanotify_init", unix.SYS_FANOTIFY_INIT},
		{"setns", unix.SYS_SETNS},
	}, archDenied()...)
}

// TestVMMatchesTable compares the compiled program with a direct reading of the table on many
// generated calls: each condition's values with random high halves and random bits outside the mask,
// their near misses, and random arguments. A compiler bug (a wrong skip, a condition dropped or
// inverted) shows as a disagreement.
func TestVMMatchesTable(t *testing.T) {
	a, _ := nativeABI()
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the test is deterministic
	for _, set := range optionSets() {
		rules := Rules(set.opts)
		v := newVM(t, set.opts)
		for _, g := range groupByNr(rules) {
			for i := 0; i < 300; i++ {
				c := native(g[0].Nr)
				for arg := range c.args {
					c.args[arg] = pickArg(rng, g, arg)
				}
				want := evalTable(a, rules, c)
				if got := v.run(t, c); got != want {
					t.Errorf("%s %s: %v: program says %v, table says %v", set.name, g[0].Syscall, c, got, want)
				}
			}
		}
	}
}

// pickArg draws an argument that is, with good odds, near the values the rules test.
func pickArg(rng *rand.Rand, rules []Rule, arg int) uint64 {
	var interesting []Cond
	for _, r := range rules {
		for _, c := range r.When {
			if c.Arg == arg {
				interesting = append(interesting, c)
			}
		}
	}
	if len(interesting) == 0 || rng.IntN(4) == 0 {
		return rng.Uint64() >> rng.UintN(64)
	}
	c := interesting[rng.IntN(len(interesting))]
	v := c.Values[rng.IntN(len(c.Values))].Value
	switch rng.IntN(4) {
	case 0: // random bits outside the mask, which must not matter
		v |= rng.Uint32() &^ c.Mask
	case 1: // a near miss inside the mask
		v ^= c.Mask & (1 << rng.UintN(32))
	}
	if rng.IntN(2) == 0 { // a high half, which must not matter either
		return uint64(rng.Uint32())<<32 | uint64(v)
	}
	return uint64(v)
}

// evalTable is the table's meaning written plainly in Go: the reference the program must agree with.
func evalTable(a abi, rules []Rule, c call) Action {
	if c.arch != a.auditArch {
		return ActKillProcess
	}
	if a.x32 && int32(c.nr) >= x32Bit {
		return ActKillProcess
	}
rules:
	for _, r := range rules {
		if r.Nr != c.nr {
			continue
		}
		for _, cond := range r.When {
			v := uint32(c.args[cond.Arg]) & cond.Mask
			in := false
			for _, x := range cond.Values {
				in = in || v == x.Value
			}
			if in != (cond.Op == OneOf) {
				continue rules
			}
		}
		return r.Action
	}
	return ActAllow
}

// TestVMEveryRuleFires makes each rule's own condition true and checks the rule's verdict comes out,
// so no rule in the table is shadowed by an earlier one or lost in compilation.
func TestVMEveryRuleFires(t *testing.T) {
	a, _ := nativeABI()
	for _, set := range optionSets() {
		rules := Rules(set.opts)
		v := newVM(t, set.opts)
		for i, r := range rules {
			c := native(r.Nr)
			for _, cond := range r.When {
				c.args[cond.Arg] = uint64(satisfy(cond))
			}
			if got := v.run(t, c); got != r.Action {
				t.Errorf("%s rule %d %s: %v got %v, want %v", set.name, i, r, c, got, r.Action)
			}
			if got := evalTable(a, rules, c); got != r.Action {
				t.Errorf("%s rule %d %s is shadowed by an earlier rule (table gives %v)", set.name, i, r, got)
			}
		}
	}
}

// satisfy returns a value for which c holds.
func satisfy(c Cond) uint32 {
	if c.Op == OneOf {
		return c.Values[0].Value
	}
	for v := uint32(1); ; v++ {
		ok := true
		for _, x := range c.Values {
			ok = ok && v&c.Mask != x.Value
		}
		if ok {
			return v
		}
	}
}
