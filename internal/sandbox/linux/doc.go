// Package linux is cordon's native sandbox backend: user, mount, pid, network, ipc, uts and cgroup
// namespaces, a root file system built from nothing, Landlock, seccomp and cgroups, with cordon's own
// init as pid 1.
//
// It follows runc's two-stage shape: the parent (Backend.Launch) clones a new process into fresh
// namespaces by re-executing the cordon binary as "cordon-init"; that init, while the caller still
// prepares the run, does what needs no spec (loopback, the gateway's sockets and rules, the base of
// the root); Start sends it a declarative config over a pipe, and it builds the rest of the boundary
// from inside (where it holds capabilities only over the new namespaces), drops every privilege, and
// only then executes the command. Any failure before the command runs is reported over the status
// socket and the command never starts. The messages between the two are typed (message.go).
//
// The package is Linux-only; on other platforms it is empty, and sandbox.Unsupported stands in.
package linux
