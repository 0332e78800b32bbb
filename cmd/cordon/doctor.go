package main

import (
	"context"
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/runstate"
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

	a.doctorHost(line)
	for _, s := range cordon.ServiceServers(a.env) {
		if s.Err != nil {
			line("info", "service "+s.Kind, "none: "+s.Err.Error())
		} else {
			line("ok", "service "+s.Kind, s.Version+" in "+s.Dir)
		}
	}

	// End to end: a real sandbox with a copy-on-write workspace, running /bin/true; then one with the
	// egress gateway's sockets and nftables rules, which is what a network section needs.
	detail, err := a.doctorSandbox(cordon.IsolationNative, false)
	if err != nil {
		line("FAIL", "sandbox", err.Error())
	} else {
		line("ok", "sandbox", detail)
		if _, err := a.doctorSandbox(cordon.IsolationNative, true); err != nil {
			line("warn", "nftables", "the egress rules could not be installed ("+err.Error()+"); runs with a network section will refuse to start")
		} else {
			line("ok", "nftables", "egress rules installed over netlink and verified inside a sandbox")
		}
		line("ok", "tier native", "--isolation native (the default): the command on the host's kernel")
		a.doctorGVisor(line)
	}
	if fatal {
		fmt.Fprintln(a.stdout, "cordon run cannot work on this host: see the FAIL lines above")
		return 1
	}
	return 0
}

// doctorGVisor reports whether this host can run the gVisor tier, and why not: cordon must be
// root, runsc must be found and recent enough, and a real gVisor box (with the gateway's network
// namespace) must start. Not having it is a warning: the native tier works without it.
func (a *app) doctorGVisor(line func(state, what, detail string)) {
	const what = "tier gvisor"
	if a.uid != 0 {
		line("warn", what, "--isolation gvisor needs cordon to run as root")
		return
	}
	path, version, err := cordon.FindRunsc("", a.env)
	if err != nil {
		line("warn", what, err.Error())
		return
	}
	if _, err := a.doctorSandbox(cordon.IsolationGVisor, true); err != nil {
		line("warn", what, fmt.Sprintf("runsc %s at %s, but a gVisor box could not start: %v", version, path, err))
		return
	}
	line("ok", what, fmt.Sprintf("--isolation gvisor: started /bin/true on gVisor's kernel (runsc %s at %s, systrap) with the egress gateway", version, path))
}

// doctorSandbox runs /bin/true through the library as cordon run would, with the built-in policy
// (and, for egress, a network section that allows nothing), in a throwaway project and state.
func (a *app) doctorSandbox(isolation cordon.Isolation, egress bool) (string, error) {
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
	pol := cordon.DefaultPolicy()
	pol.Filesystem.Secrets.NoScan = true
	if egress {
		pol.Network = &policy.Network{}
	}
	run, err := cordon.Start(context.Background(), cordon.Config{
		Policy: pol, Workspace: project, Command: []string{"true"}, Env: a.env, StateDir: state,
		Isolation: isolation,
	})
	if err != nil {
		return "", err
	}
	exit, err := run.Wait(context.Background())
	if err != nil {
		return "", err
	}
	if exit.Code != 0 {
		return "", fmt.Errorf("/bin/true exited %d inside the sandbox", exit.Code)
	}
	mode := "copy-on-write workspace (overlayfs)"
	if why := run.WorkspaceFallback(); why != nil {
		mode = fmt.Sprintf("workspace copies (no overlayfs in a user namespace here: %v)", why)
	}
	return "started /bin/true with all namespaces, " + mode + ", Landlock and seccomp", nil
}
