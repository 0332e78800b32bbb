package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress/proxy/kernelrelay"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/cgroup"
)

// doctorHost reports the kernel features the native sandbox is built from, one line each.
func (a *app) doctorHost(line func(state, what, detail string)) {
	if a.uid == 0 {
		line("ok", "user namespaces", "running as root")
	} else {
		clone := readSysctl("/proc/sys/kernel/unprivileged_userns_clone")
		max := readSysctl("/proc/sys/user/max_user_namespaces")
		aa := readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
		switch {
		case clone == "0":
			line("FAIL", "user namespaces", "unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0); enable them or run as root")
		case max == "0":
			line("FAIL", "user namespaces", "user.max_user_namespaces is 0; raise it or run as root")
		case aa == "1":
			line("warn", "user namespaces", "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1); the end-to-end check below tells whether cordon is allowed")
		default:
			line("ok", "user namespaces", "unprivileged user namespaces allowed (max "+max+")")
		}
	}

	if abi := linux.LandlockABI(); abi > 0 {
		line("ok", "landlock", fmt.Sprintf("ABI %d: file system rules and IPC scoping as a second layer", abi))
	} else {
		line("warn", "landlock", "not available; the sandbox relies on its mount namespace and seccomp alone")
	}

	if st, err := os.ReadFile("/proc/self/status"); err == nil && strings.Contains(string(st), "Seccomp_filters:") {
		line("ok", "seccomp", "filter mode available")
	} else {
		line("FAIL", "seccomp", "this kernel has no seccomp filter support")
	}

	if info, err := cgroup.Detect(); err != nil {
		line("warn", "cgroups", "not usable ("+err.Error()+"); limits fall back to rlimits: pids per user, memory per process, no CPU limit")
	} else {
		var usable, missing []string
		for _, c := range []string{"memory", "pids", "cpu"} {
			if info.Controllers[c] {
				usable = append(usable, c)
			} else {
				missing = append(missing, c)
			}
		}
		state, detail := "ok", fmt.Sprintf("%s; usable controllers: %s", info.Version, strings.Join(usable, ", "))
		if len(missing) > 0 {
			state = "warn"
			detail += "; not usable: " + strings.Join(missing, ", ") + " (limits fall back to rlimits)"
		}
		line(state, "cgroups", detail)
	}

	// The gateway's byte relay stays in user space either way: on the kernels measured (6.18), the
	// sockmap's redirect is slower than copying (bench/RESULTS.md), so this line says what a kernel
	// relay could use here, not a fallback.
	if r, err := kernelrelay.New(); err != nil {
		line("ok", "kernel relay", "no eBPF sockmap here ("+err.Error()+"); the gateway relays in user space")
	} else {
		r.Close()
		line("ok", "kernel relay", "eBPF sockmap available, unused: its redirect measured slower than the gateway's user-space relay")
	}
}

func readSysctl(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(s); err != nil {
		return ""
	}
	return s
}
