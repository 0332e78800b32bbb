// Package seccomp builds and installs the seccomp-BPF filter that cordon puts on the sandboxed command.
//
// Namespaces, Landlock and an unprivileged uid decide what the command can reach; this filter narrows
// how it can talk to the kernel, as a second line of defence should one of those layers leak. The policy
// is default allow: a coding agent runs compilers, package managers and test suites whose system calls
// nobody can list ahead of time, so the filter denies only what such work never needs: mounting,
// attaching to other processes, loading kernel code, faking terminal input, raw IP sockets, new user
// namespaces unless nesting is allowed. The one allowlist is socket families, a short and stable list
// (unix, IP, netlink), since a family the sandbox has no use for (vsock, which is not namespaced, or
// packet) is a way around the network boundary. Denied calls fail with EPERM, which tools already
// handle as a missing privilege, or for socket families and netlink protocols with EAFNOSUPPORT and
// EPROTONOSUPPORT, as on a kernel without them, rather than killing the process; only a call through
// a foreign ABI (i386 int 0x80 on amd64, x32, AArch32), which could otherwise slip past every rule, is
// killed.
//
// Following gVisor's practice the rules are data, a table of (syscall, argument condition, action,
// reason), compiled into a classic BPF program. The table and the program's disassembly are kept in
// testdata/*.golden, so any change to the filter shows up as a diff in review.
package seccomp
