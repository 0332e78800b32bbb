// Package gvisor is the gVisor tier of cordon's sandbox (`--isolation gvisor`): the command runs on
// gVisor's user-space kernel (runsc, systrap platform), so that its system calls reach a kernel
// written for containment instead of the host's, while everything around it is the native box's
// own. It does not build a second box: it configures the native Linux backend (package
// internal/sandbox/linux) with a linux.Runtime, so the same init makes the same network namespace
// with the gateway's sockets and rules, the same root (workspace overlay, masks, read-only paths,
// the generated /etc, an empty home), joins the same cgroup, and dies with cordon; what this package
// adds is finding and checking runsc, its flags, and the OCI spec that hands that root to it.
package gvisor
