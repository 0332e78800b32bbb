package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/term"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/kube"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// kubeFlags are the flags of the kubernetes backend (cordon run --backend kubernetes, cordon kube
// render). Each but --repo and --ref overrides the policy's sandbox.kubernetes.
type kubeFlags struct {
	kubeconfig, context, namespace   string
	image, cordonImage, runtimeClass string
	repo, ref                        string
	set                              []string // the flags given, for "needs --backend kubernetes"
}

func (k *kubeFlags) register(r *runFlags, fl *flag.FlagSet) {
	str := func(name, usage string, dst *string, check func(string) error) {
		r.add(fl, []string{name}, usage, func(v string) error {
			if check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			*dst = v
			k.set = append(k.set, "--"+name)
			return nil
		})
	}
	image := func(v string) error {
		if !policy.ValidImage(v) {
			return fmt.Errorf("%q is not an image reference", v)
		}
		return nil
	}
	str("kubeconfig", "kubernetes: the kubeconfig `FILE` (default: KUBECONFIG, then ~/.kube/config)", &k.kubeconfig, nil)
	str("context", "kubernetes: the kubeconfig `CONTEXT` (sandbox.kubernetes.context)", &k.context, nil)
	str("namespace", "kubernetes: the `NAMESPACE` of the run's pod and Secret (sandbox.kubernetes.namespace)", &k.namespace, func(v string) error {
		if !policy.ValidDNSLabel(v) {
			return fmt.Errorf("%q is not a namespace name", v)
		}
		return nil
	})
	str("image", "kubernetes: the agent's `IMAGE`; it needs git (sandbox.kubernetes.image)", &k.image, image)
	str("cordon-image", "kubernetes: the `IMAGE` with cordon's static binary at /cordon, for the pod's gateway (sandbox.kubernetes.cordonImage)", &k.cordonImage, image)
	str("runtime-class", "kubernetes: the pod's runtimeClassName, such as gvisor (sandbox.kubernetes.runtimeClass)", &k.runtimeClass, nil)
	str("repo", "kubernetes: the repository `URL` the pod clones, through the gateway", &k.repo, cordon.CheckKubeRepo)
	str("ref", "kubernetes: the branch, tag or commit to check out (default: the remote's HEAD)", &k.ref, nil)
}

// runKube is cordon run --backend kubernetes.
func (a *app) runKube(ctx context.Context, policyPath, wsDir string, keep bool, rf *runFlags, argv []string, sigs <-chan os.Signal) int {
	switch {
	case rf.kube.repo == "":
		a.errorf("run: --backend kubernetes needs --repo URL (the pod clones it through the gateway)")
		return exitCordon
	case len(rf.publish) > 0:
		a.errorf("run: --publish is for a local sandbox; the kubernetes backend publishes nothing")
		return exitCordon
	case rf.noNet:
		a.errorf("run: --network none leaves the pod no way to clone --repo")
		return exitCordon
	case rf.isolation != "":
		a.errorf("run: --isolation is for a local sandbox; on kubernetes the pod's --runtime-class says it (gvisor where the cluster has it)")
		return exitCordon
	}
	project, err := cordon.ResolveWorkspace(wsDir, a.getenv("HOME"))
	if err != nil {
		a.errorf("run: %v", err)
		return exitCordon
	}
	pol, err := a.loadPolicy(policyPath, project)
	if err != nil {
		a.errorf("%v", err)
		return exitCordon
	}
	if err := rf.apply(pol, a.getenv("HOME"), project); err != nil {
		a.errorf("run: %v", err)
		return exitCordon
	}
	// A signal cancels the run: the pod, its Secret and what was minted go (with a terminal, ^C goes
	// to the agent's terminal instead, as with kubectl attach).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintf(a.stderr, "cordon: stopping: deleting the run's pod and Secret\n")
			cancel()
		}
	}()
	tty := isTerminal(a.stdin)
	var resize chan cordon.TermSize
	if tty {
		// As kubectl attach -t: the local terminal raw (its keys go to the pod's terminal, which
		// echoes and edits), and its size sent now and on every change.
		fd := int(a.stdin.Fd())
		if old, err := term.MakeRaw(fd); err == nil {
			defer term.Restore(fd, old)
		}
		resize = make(chan cordon.TermSize, 4)
		send := func() {
			if w, h, err := term.GetSize(fd); err == nil {
				select {
				case resize <- cordon.TermSize{Width: uint16(w), Height: uint16(h)}:
				default:
				}
			}
		}
		send()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					send()
				}
			}
		}()
	}
	out, err := cordon.RunKube(ctx, cordon.KubeConfig{
		Policy: pol, Allow: rf.allowRaw, Workspace: project, Name: rf.name, Command: argv, Env: a.env, Keep: keep,
		Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr, TTY: tty, Resize: resize,
		StateDir:   a.store().Dir,
		OnWarning:  a.printWarning,
		Notify:     func(line string) { fmt.Fprintf(a.stderr, "cordon: %s\n", line) },
		Kubeconfig: rf.kube.kubeconfig, Context: rf.kube.context, Namespace: rf.kube.namespace,
		Image: rf.kube.image, CordonImage: rf.kube.cordonImage, RuntimeClass: rf.kube.runtimeClass,
		Repo: rf.kube.repo, Ref: rf.kube.ref,
	})
	if out == nil {
		if errors.Is(err, context.Canceled) {
			a.errorf("run: interrupted; the run's pod and Secret were deleted")
			return exitInterrupted
		}
		return a.startError(err)
	}
	code := out.Code
	if err != nil {
		a.errorf("run: %v", err)
		code = exitCordon
	}
	switch {
	case out.TimedOut:
		a.errorf("run: stopped after limits.timeout")
	case out.Reason != "":
		a.errorf("run: the agent's container ended: %s", out.Reason)
	}
	a.printEnd(out.RunID, out.Exit)
	return code
}

// isTerminal reports whether f is a terminal (the agent then gets one in its container).
func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

const kubeUsage = "kube render [flags] -- COMMAND [ARG...]"

// cmdKube is cordon kube: render, and the subcommands that run inside a kubernetes run's pod.
func (a *app) cmdKube(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(a.stdout, "Usage: cordon %s\n\n", kubeUsage)
		fmt.Fprintf(a.stdout, "  render   print the Pod, the Secret (without its values), the NetworkPolicy and, with\n")
		fmt.Fprintf(a.stdout, "           --sandbox-template, agent-sandbox's SandboxTemplate that cordon run --backend\n")
		fmt.Fprintf(a.stdout, "           kubernetes would create, as YAML, for review or GitOps\n\n")
		fmt.Fprintf(a.stdout, "setup, gateway, ready, clone, agent, keep and fetch run inside the pod; they are not for people.\n")
		return 0
	}
	if code, ok := a.kubeInPod(args[0], args[1:]); ok {
		return code
	}
	if code, ok := a.kubeAgentSide(args[0], args[1:]); ok {
		return code
	}
	if args[0] == "render" {
		return a.kubeRender(args[1:])
	}
	a.errorf("kube: unknown subcommand %q (usage: cordon %s)", args[0], kubeUsage)
	return exitCordon
}

// kubeRender prints the objects of a run without creating anything.
func (a *app) kubeRender(args []string) int {
	const usage = "kube render [--policy FILE] [--sandbox-template] --image IMAGE --cordon-image IMAGE --repo URL [--ref REF] -- COMMAND [ARG...]"
	fl := a.flags("kube render", usage)
	policyFlag := fl.String("policy", "", "policy `file`")
	template := fl.Bool("sandbox-template", false, "also print agent-sandbox's SandboxTemplate of the pod (without it: when the kubeconfig's cluster serves agent-sandbox's CRDs)")
	var rf runFlags
	rf.kube.register(&rf, fl)
	if code, ok := a.parse(fl, usage, args); !ok {
		return code
	}
	if rf.bad != nil {
		a.errorf("kube render: %v", rf.bad)
		return exitCordon
	}
	argv := fl.Args()
	if len(argv) == 0 {
		a.errorf("kube render: no command given (usage: cordon %s)", usage)
		return exitCordon
	}
	project, err := cordon.ResolveWorkspace("", a.getenv("HOME"))
	if err != nil {
		a.errorf("kube render: %v", err)
		return exitCordon
	}
	pol, err := a.loadPolicy(*policyFlag, project)
	if err != nil {
		a.errorf("%v", err)
		return exitCordon
	}
	k := pol.Sandbox.Kubernetes
	if k == nil {
		k = &policy.Kubernetes{}
	}
	objs, err := kube.Render(&kube.Input{
		RunID: "RUN", Namespace: cmp.Or(rf.kube.namespace, k.Namespace),
		Image: cmp.Or(rf.kube.image, k.Image), CordonImage: cmp.Or(rf.kube.cordonImage, k.CordonImage),
		RuntimeClass: cmp.Or(rf.kube.runtimeClass, k.RuntimeClass),
		Repo:         rf.kube.repo, Ref: rf.kube.ref, Args: argv, Hostname: pol.Sandbox.Hostname, Limits: pol.Limits,
		Env: []string{"HOME=/home/agent", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	if err != nil {
		a.errorf("kube render: %v", err)
		return exitCordon
	}
	docs := []any{objs.Secret, objs.NetworkPolicy, objs.Pod}
	if !*template {
		*template = a.clusterHasSandboxTemplates(rf.kube)
	}
	if *template {
		t, err := kube.SandboxTemplate(objs)
		if err != nil {
			a.errorf("kube render: %v", err)
			return exitCordon
		}
		docs = append(docs, t)
	}
	for i, d := range docs {
		b, err := toYAML(d)
		if err != nil {
			a.errorf("kube render: %v", err)
			return exitCordon
		}
		if i > 0 {
			fmt.Fprintln(a.stdout, "---")
		}
		a.stdout.Write(b)
	}
	return 0
}

// toYAML renders an API object as YAML with the API's JSON field names (through JSON, so the
// structs' json tags name the keys).
func toYAML(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(j, &node); err != nil {
		return nil, err
	}
	// JSON is YAML in flow style with every string quoted: render it in block style with plain
	// scalars, as kubectl prints objects (the encoder still quotes a string that would read as
	// another type).
	var clear func(n *yaml.Node)
	clear = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			clear(c)
		}
	}
	clear(&node)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// clusterHasSandboxTemplates reports whether the kubeconfig's cluster serves agent-sandbox's
// SandboxTemplate, asked briefly: render works offline, so an unreachable cluster is a no.
func (a *app) clusterHasSandboxTemplates(k kubeFlags) bool {
	c, err := kube.NewClient(kube.ClientOptions{Kubeconfig: k.kubeconfig, Context: k.context, Namespace: k.namespace, Getenv: a.getenv})
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ok, err := c.HasAPI(ctx, "extensions.agents.x-k8s.io/v1alpha1")
	if err != nil {
		fmt.Fprintf(a.stderr, "cordon: kube render: asking the cluster for agent-sandbox's SandboxTemplate: %v (rendering without it)\n", err)
	}
	return err == nil && ok
}
