// Package cgroup puts one sandbox run into cgroups of its own, so that its memory, process count and CPU
// time can be limited as a whole, every process in it can be killed at once (including the ones that left
// the sandbox's process tree or ignore signals), and nothing of it is left on the host afterwards.
//
// Why cgroups and not only rlimits: rlimits are per process (RLIMIT_AS) or per user (RLIMIT_NPROC), so a
// sandbox escapes them by forking; a cgroup counts the whole tree and the kernel enforces it.
//
// The package works on the three layouts Linux hosts have: pure cgroup v2 (controllers enabled through
// cgroup.subtree_control, possibly in a subtree delegated to an unprivileged user), pure v1 (one mount per
// controller) and hybrid (v1 controllers plus a cgroup2 mount that carries few or no controllers). It
// never creates cgroups at a hierarchy's root unless the caller is there: every cgroup is a child of the
// caller's own current cgroup in that hierarchy, which is what a delegated subtree permits and keeps runs
// accounted to whoever started them. On hybrid hosts the cgroup2 hierarchy is used even when it carries
// no controllers, because its cgroup.kill kills a whole tree atomically, without the races of signalling
// pids read from a file.
//
// Cleanup survives cordon's own death: [StartReaper] starts a small process, outside the run's cgroups,
// that holds the read end of a pipe whose write end only cordon has; when cordon exits by any means,
// even SIGKILL, the pipe reaches end of file and the reaper kills and removes what is left.
package cgroup
