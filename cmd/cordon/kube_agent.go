package main

import (
	"context"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/kube/inpod"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// Usages of the agent's side of a run's pod (kubepod's CloneArgs, AgentArgs, KeeperArgs, FetchArgs).
// They run inside the pod, where cordon's Kubernetes backend puts them; nobody types them.
const (
	kubeCloneUsage = "kube clone --repo URL --ref REF --dir DIR"
	kubeAgentUsage = "kube agent [--attach] --dir DIR [--base COMMIT] [--stop-dir DIR] -- COMMAND [ARG...]"
	kubeLeaseUsage = "kube lease [--dir DIR]"
	kubeKeepUsage  = "kube keep"
	kubeFetchUsage = "kube fetch"
)

// kubeAgentSide runs the in-pod subcommands of the agent's side, `cordon kube NAME ARGS`: the clone
// step, the agent's wrapper, the keeper and the fetch. It reports handled false for any other name
// (cordon kube's other subcommands are not its business).
func (a *app) kubeAgentSide(name string, args []string) (code int, handled bool) {
	switch name {
	case kubepod.CloneArgs[1]:
		return a.kubeClone(args), true
	case kubepod.AgentArgs[1]:
		return a.kubeAgent(args), true
	case kubepod.KeeperArgs[1]:
		return a.kubeKeep(args), true
	case kubepod.FetchArgs[1]:
		return a.kubeFetch(args), true
	case kubepod.LeaseArgs[1]:
		return a.kubeLease(args), true
	}
	return 0, false
}

func (a *app) kubeClone(args []string) int {
	fs := a.flags("kube clone", kubeCloneUsage)
	repo := fs.String("repo", "", "the repository's `URL`")
	ref := fs.String("ref", "", "the branch, tag or commit to check out")
	dir := fs.String("dir", kubepod.Checkout, "the working tree to make")
	waitReady := fs.String("wait-ready", "", "first wait until the gateway's ready file is in `DIR` (the trust directory)")
	authEnv := fs.String("auth-env", "", "send the placeholder in environment variable `NAME` to the repository (the gateway swaps the real value in)")
	authScheme := fs.String("auth-scheme", "bearer", "with --auth-env: `bearer` or basic")
	authHeader := fs.String("auth-header", "", "with --auth-env: send it in header `NAME` instead of Authorization")
	if code, ok := a.parse(fs, kubeCloneUsage, args); !ok {
		return code
	}
	if *repo == "" || *ref == "" || fs.NArg() > 0 {
		a.errorf("kube clone: --repo and --ref are required, and nothing else (usage: cordon %s)", kubeCloneUsage)
		return exitUsage
	}
	if *waitReady != "" {
		if err := inpod.WaitReady(context.Background(), *waitReady, 2*time.Minute); err != nil {
			a.errorf("kube clone: %v", err)
			return 1
		}
	}
	var auth string
	if *authEnv != "" {
		ph := a.getenv(*authEnv)
		if ph == "" {
			a.errorf("kube clone: --auth-env %s: the variable is not set", *authEnv)
			return exitUsage
		}
		auth = inpod.AuthHeader(ph, *authScheme, *authHeader)
	}
	if _, err := inpod.Clone(context.Background(), inpod.CloneOptions{Repo: *repo, Ref: *ref, Dir: *dir, Env: a.env, Stdout: a.stdout, Auth: auth}); err != nil {
		a.errorf("kube clone: %v", err)
		return 1
	}
	return 0
}

func (a *app) kubeAgent(args []string) int {
	fs := a.flags("kube agent", kubeAgentUsage)
	attach := fs.Bool("attach", false, "read cordon's attach hello from stdin before the command starts")
	dir := fs.String("dir", kubepod.Checkout, "the checkout to run the command in")
	base := fs.String("base", "", "the `COMMIT` the patch is against (default: the checkout's detached HEAD as the wrapper starts, the clone step's commit)")
	stopDir := fs.String("stop-dir", kubepod.TrustDir, "end the command when the gateway's stop file appears in `DIR` (the run's lease lapsed)")
	if code, ok := a.parse(fs, kubeAgentUsage, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		a.errorf("kube agent: no command given (usage: cordon %s)", kubeAgentUsage)
		return exitCordon
	}
	code, err := inpod.Agent(context.Background(), inpod.AgentOptions{Dir: *dir, Base: *base, Attach: *attach, Args: fs.Args(), StopDir: *stopDir,
		Env: a.env, Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr})
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			a.errorf("kube %s", line)
		}
	}
	return code
}

func (a *app) kubeKeep(args []string) int {
	fs := a.flags("kube keep", kubeKeepUsage)
	if code, ok := a.kubeParse(fs, kubeKeepUsage, args); !ok {
		return code
	}
	if err := inpod.Keep(context.Background()); err != nil {
		a.errorf("kube keep: %v", err)
		return 1
	}
	return 0
}

func (a *app) kubeFetch(args []string) int {
	fs := a.flags("kube fetch", kubeFetchUsage)
	outDir := fs.String("out-dir", kubepod.OutDir, "the agent's wrapper's results")
	auditDir := fs.String("audit-dir", kubepod.AuditDir, "the gateway's audit log")
	if code, ok := a.kubeParse(fs, kubeFetchUsage, args); !ok {
		return code
	}
	if err := inpod.Fetch(a.stdout, inpod.FetchOptions{OutDir: *outDir, AuditDir: *auditDir}); err != nil {
		a.errorf("kube fetch: %v", err)
		return 1
	}
	return 0
}

// kubeLease runs in the gateway's container for as long as cordon runs: every byte on stdin, cordon's
// heartbeat, renews the run's lease.
func (a *app) kubeLease(args []string) int {
	fs := a.flags("kube lease", kubeLeaseUsage)
	dir := fs.String("dir", kubepod.TrustDir, "the gateway's directory, where the lease file is (`DIR`)")
	if code, ok := a.kubeParse(fs, kubeLeaseUsage, args); !ok {
		return code
	}
	if err := inpod.Lease(a.stdin, *dir); err != nil {
		a.errorf("kube %v", err)
		return 1
	}
	return 0
}
