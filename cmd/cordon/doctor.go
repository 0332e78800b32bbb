package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/kube"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// cmdDoctor says, one line per capability, what this host supports and what cordon will use or fall
// back on. It ends by starting a real sandbox, because a host can pass every individual check and still
// refuse the combination. It exits 1 when `cordon run` could not work here at all.
func (a *app) cmdDoctor(args []string) int {
	fl := a.flags("doctor", doctorUsage)
	backend := fl.String("backend", "native", "the `BACKEND` to check: native (this host) or kubernetes (the kubeconfig's cluster)")
	var rf runFlags
	fl.StringVar(&rf.kube.kubeconfig, "kubeconfig", "", "kubernetes: the kubeconfig `FILE`")
	fl.StringVar(&rf.kube.context, "context", "", "kubernetes: the kubeconfig `CONTEXT`")
	fl.StringVar(&rf.kube.namespace, "namespace", "", "kubernetes: the `NAMESPACE`")
	if code, ok := a.parse(fl, doctorUsage, args); !ok {
		return code
	}
	fatal := false
	line := func(state, what, detail string) {
		fmt.Fprintf(a.stdout, "%-5s %-24s %s\n", state, what, detail)
		if state == "FAIL" {
			fatal = true
		}
	}
	switch *backend {
	case "native":
	case "kubernetes":
		a.doctorKube(line, rf.kube)
		if fatal {
			fmt.Fprintln(a.stdout, "cordon run --backend kubernetes cannot work with this cluster: see the FAIL lines above")
			return 1
		}
		return 0
	default:
		a.errorf("doctor: --backend %q: expected native or kubernetes", *backend)
		return exitUsage
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

const doctorUsage = "doctor [--backend native|kubernetes] [--context CTX] [--namespace NS]"

// doctorKube reports what the kubeconfig's cluster offers the kubernetes backend: the API server,
// the namespace, the RuntimeClasses (gVisor's where there is one), and agent-sandbox's CRDs.
func (a *app) doctorKube(line func(state, what, detail string), k kubeFlags) {
	c, err := kube.NewClient(kube.ClientOptions{Kubeconfig: k.kubeconfig, Context: k.context, Namespace: k.namespace, Getenv: a.getenv})
	if err != nil {
		line("FAIL", "kubeconfig", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	v, err := c.Version(ctx)
	if err != nil {
		line("FAIL", "api server", c.Server()+": "+err.Error())
		return
	}
	line("ok", "api server", fmt.Sprintf("%s, Kubernetes %s (context %q, namespace %s)", c.Server(), v, c.Context, c.Namespace))
	if major, minor, ok := kube.MinorVersion(v); ok && (major < 1 || major == 1 && minor < 30) {
		line("FAIL", "native sidecars", v+" is too old: the pod's gateway is a native sidecar (1.29) and attach speaks v5.channel.k8s.io (1.30)")
	}
	rcs, err := c.RuntimeClasses(ctx)
	switch {
	case err != nil:
		line("warn", "runtime classes", err.Error())
	case len(rcs) == 0:
		line("info", "runtime classes", "none: pods run on the nodes' default runtime (the kernel is the node's); a RuntimeClass for runsc gives the gVisor tier")
	default:
		gv := ""
		for _, r := range rcs {
			if strings.Contains(r, "runsc") {
				gv = "; --runtime-class " + strings.Fields(r)[0] + " is gVisor's"
			}
		}
		line("ok", "runtime classes", strings.Join(rcs, ", ")+gv)
	}
	doctorAdmission(ctx, line, c, k)
	if ok, err := c.HasAPI(ctx, "extensions.agents.x-k8s.io/v1alpha1"); err == nil && ok {
		line("ok", "agent-sandbox", "SandboxTemplate is served: cordon kube render --sandbox-template makes one")
	} else {
		line("info", "agent-sandbox", "not installed (optional: warm pools and claims of cordon's pods)")
	}
}

// doctorAdmission says whether the cluster stores a run's pod as cordon renders it, from a dry run
// of a pod like a run's (placeholder images and repository): a run is
// refused where a mutating admission webhook changes it, and this says so before one is tried.
func doctorAdmission(ctx context.Context, line func(state, what, detail string), c *kube.Client, k kubeFlags) {
	const what = "admission"
	o, err := kube.Render(&kube.Input{
		RunID: "00000000-000000-doctor00", Namespace: c.Namespace,
		Image: cmp.Or(k.image, "agent"), CordonImage: cmp.Or(k.cordonImage, "cordon"), RuntimeClass: k.runtimeClass,
		Repo: cmp.Or(k.repo, "https://example.invalid/doctor.git"), Ref: cmp.Or(k.ref, "main"), Args: []string{"true"},
		Config: &kubepod.GatewayConfig{Version: kubepod.Version},
	})
	if err == nil {
		err = c.CheckAdmission(ctx, o)
	}
	var api *kube.APIError
	switch {
	case errors.As(err, &api):
		line("warn", what, "could not dry-run a run's pod in namespace "+c.Namespace+": "+err.Error())
	case err != nil:
		line("FAIL", what, err.Error()+": runs in namespace "+c.Namespace+" are refused")
	default:
		line("ok", what, "namespace "+c.Namespace+" stores a run's pod as cordon renders it (a dry run)")
	}
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
