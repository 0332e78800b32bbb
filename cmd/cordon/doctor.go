package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-sandbox/cordon/internal/workspace"
)

// cmdDoctor says, one line per capability, what this host supports and what cordon will use or fall
// back on. It ends by starting a real sandbox, because a host can pass every individual check and still
// refuse the combination. It exits 1 when `cordon run` could not work here at all.
func (a *app) cmdDoctor(args []string) int {
	fl := a.flags("doctor", "doctor")
	if code, ok := a.parse(fl, "doctor", args); !ok {
		return code
	}
	fatal := false
	line := func(state, what, detail string) {
		fmt.Fprintf(a.stdout, "%-5s %-24s %s\n", state, what, detail)
		if state == "FAIL" {
			fatal = true
		}
	}

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

	// End to end: a real sandbox with a copy-on-write workspace, running /bin/true; then one with the
	// egress gateway's sockets and nftables rules, which is what a network section needs.
	detail, err := a.doctorSandbox(false)
	if err != nil {
		line("FAIL", "sandbox", err.Error())
	} else {
		line("ok", "sandbox", detail)
		if _, err := a.doctorSandbox(true); err != nil {
			line("warn", "nftables", "the egress rules could not be installed ("+err.Error()+"); runs with a network section will refuse to start")
		} else {
			line("ok", "nftables", "egress rules installed over netlink and verified inside a sandbox")
		}
	}
	if fatal {
		fmt.Fprintln(a.stdout, "cordon run cannot work on this host: see the FAIL lines above")
		return 1
	}
	return 0
}

func (a *app) doctorSandbox(egress bool) (string, error) {
	project, err := os.MkdirTemp("", "cordon-doctor-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(project)
	state, err := os.MkdirTemp("", "cordon-doctor-state-")
	if err != nil {
		return "", err
	}
	defer runstate.RemoveAll(state)
	run, err := runstate.Store{Root: state}.Create(runstate.Meta{Project: project, Command: []string{"true"}})
	if err != nil {
		return "", err
	}
	ws, err := workspace.Prepare(run, project)
	if err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer devnull.Close()
	spec := &sandbox.Spec{
		Args: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: project,
		Workspace: ws, User: a.identity(), Stdin: devnull, Stdout: devnull, Stderr: devnull,
	}
	if egress {
		p := gateway.Ports()
		spec.Egress = &sandbox.EgressPorts{Transparent: p.Transparent, Proxy: p.Proxy, DNS: p.DNS}
	}
	var warnings []string
	b := &linux.Backend{Warn: func(s string) { warnings = append(warnings, s) }}
	sb, err := b.Start(context.Background(), spec)
	mode := "copy-on-write workspace (overlayfs)"
	var se *sandbox.SetupError
	if errors.As(err, &se) && se.Step == linux.StepOverlay {
		mode = fmt.Sprintf("workspace copies (no overlayfs in a user namespace here: %v)", se.Err)
		if spec.Workspace, err = workspace.FallbackToCopy(run, se.Err); err == nil {
			sb, err = b.Start(context.Background(), spec)
		}
	}
	if err != nil {
		return "", err
	}
	files, _ := sb.EgressSockets()
	for _, f := range files {
		f.Close()
	}
	st, err := sb.Wait()
	if err != nil {
		return "", err
	}
	if st.Code != 0 {
		return "", fmt.Errorf("/bin/true exited %d inside the sandbox", st.Code)
	}
	return "started /bin/true with all namespaces, " + mode + ", Landlock and seccomp", nil
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
