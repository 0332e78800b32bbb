package cordon

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/kube"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandboxenv"
	"github.com/cordon-sandbox/cordon/internal/warn"
	"github.com/cordon-sandbox/cordon/internal/workspace"
)

// KubeConfig is one run as a pod of a Kubernetes cluster (cordon run --backend kubernetes): the same
// policy, gateway and credentials, around a clone of a repository instead of a local project.
type KubeConfig struct {
	// Policy is what the run may do; nil is the built-in default (no network: the clone step then
	// cannot reach the repository, so a kubernetes run needs a policy that allows it).
	Policy *Policy
	// Allow are extra network.allow entries (cordon run --allow), given to the gateway in the pod.
	Allow []string
	// Workspace is the local directory the run's changes are for (cordon apply writes there); empty
	// means the current directory.
	Workspace string
	Name      string
	Command   []string
	// Keep keeps the local run even if the pod changed nothing.
	Keep bool
	// Env is the caller's environment, from which env.pass and credentials read; nil is os.Environ().
	Env []string
	// Stdin, Stdout and Stderr are attached to the agent's container; TTY gives it a terminal.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	// Resize gives the terminal's size, first as it is, then as it changes (TTY only).
	Resize    <-chan TermSize
	StateDir  string
	OnWarning func(Warning)
	// Notify receives the gateway's refusals (and allowed hosts it could not reach) as they
	// happen, one line each.
	Notify func(line string)

	// Kubeconfig, Context, Namespace, Image, CordonImage and RuntimeClass pick the cluster and the
	// pod; empty ones come from the policy's sandbox.kubernetes, then the kubeconfig.
	Kubeconfig, Context, Namespace   string
	Image, CordonImage, RuntimeClass string
	// Repo and Ref are what the pod clones (through the gateway); Ref empty is the remote's HEAD.
	Repo, Ref string
	// StartTimeout bounds the pod's start (scheduling, images, the clone); 0 is five minutes.
	StartTimeout time.Duration
}

// TermSize is a terminal's size in characters.
type TermSize = kube.TermSize

// KubeExit is how a kubernetes run ended.
type KubeExit struct {
	Exit
	// RunID is the local run that holds its changes and audit log.
	RunID string
	// Base is the commit the pod checked out.
	Base string
	// Reason is the kubelet's, when the agent did not exit by itself (OOMKilled, say).
	Reason string
}

// RunKube runs the command as a pod and waits for it: credentials are read and minted here (and
// revoked at the end), the pod's gateway gets them in a Secret that only its container mounts, and
// the changes and the audit log come back into a local run, for cordon diff, apply and export.
func RunKube(ctx context.Context, cfg KubeConfig) (*KubeExit, error) {
	if len(cfg.Command) == 0 {
		return nil, errors.New("no command given")
	}
	if err := CheckName(cfg.Name); err != nil {
		return nil, err
	}
	if err := CheckKubeRepo(cfg.Repo); err != nil {
		return nil, err
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	b := &builder{env: env, home: getenv(env, "HOME"), stderr: os.Stderr, warn: newWarnings(cfg.OnWarning)}
	b.store = Store{Dir: cfg.StateDir}.storeFor(env)
	project, err := ResolveWorkspace(cfg.Workspace, b.home)
	if err != nil {
		return nil, err
	}
	pol := cfg.Policy
	if pol == nil {
		pol = policy.Default()
	}
	k := pol.Sandbox.Kubernetes
	if k == nil {
		k = &policy.Kubernetes{}
	}
	if err := kubeRefuses(pol, cmp.Or(cfg.RuntimeClass, k.RuntimeClass)); err != nil {
		return nil, err
	}
	if pol.Limits.Pids > 0 || pol.Limits.OpenFiles > 0 {
		b.warn.notice("limits.pids and limits.openFiles are not set on a pod: the node's settings hold instead")
	}
	var policyBytes []byte
	if pol.Source != policy.BuiltinSource && pol.Source != "" {
		if err := policy.CheckOutside(pol.Source, []string{project}); err != nil {
			return nil, err
		}
		if policyBytes, err = os.ReadFile(pol.Source); err != nil {
			return nil, fmt.Errorf("reading the policy again for the pod: %w", err)
		}
		if sum := sha256Hex(policyBytes); pol.SourceSHA256 != "" && sum != pol.SourceSHA256 {
			return nil, fmt.Errorf("the policy %s changed while cordon read it; run again", pol.Source)
		}
	} else {
		policyBytes = []byte("version: 1\n")
	}
	client, err := kube.NewClient(kube.ClientOptions{
		Getenv:     func(k string) string { return getenv(env, k) },
		Kubeconfig: cfg.Kubeconfig,
		Context:    cmp.Or(cfg.Context, k.Context),
		Namespace:  cmp.Or(cfg.Namespace, k.Namespace),
	})
	if err != nil {
		return nil, &SetupError{Err: err}
	}

	credSet, err := b.prepareCredentials(ctx, pol, nil)
	if err != nil {
		return nil, err
	}
	defer b.closeCredentials(credSet)
	var exported []creds.Exported
	if credSet != nil {
		if exported, err = credSet.Export(); err != nil {
			return nil, err
		}
	}

	lease := cmp.Or(k.Lease, kubepod.DefaultLease)
	rec, err := b.createRun(runstate.Meta{
		Name: cfg.Name, Project: project, Command: cfg.Command, Policy: policyRef(pol),
		Kube: &runstate.KubeRef{Kubeconfig: kubeconfigPath(cfg.Kubeconfig), Context: client.Context, Namespace: client.Namespace, Server: client.Server(),
			Repo: cfg.Repo, Ref: cfg.Ref, Lease: lease},
	})
	if err != nil {
		return nil, err
	}
	if err := rec.Sync(); err != nil {
		b.dropRun(rec)
		return nil, err
	}
	id := rec.Meta.ID

	agentEnv, warnings := sandboxenv.BuildWith(env, pol.Env, sandboxenv.Identity{User: "agent", Home: "/home/agent", TTY: cfg.TTY},
		sandboxenv.Options{Shown: func(string) bool { return false }})
	for _, w := range warnings {
		b.warn.notice(w)
	}
	// The values go into the run's Secret, not the pod's spec (kube.Render), but the agent reads
	// every one of them: secret-shaped values are warned about as locally.
	b.warnSecretValues(agentEnv, pol.Env)
	agentEnv = append(agentEnv, podTrustEnv()...)
	if credSet != nil {
		agentEnv = append(agentEnv, credSet.Env()...)
	}
	roots, caFile, err := kubeRoots(pol)
	if err != nil {
		b.dropRun(rec)
		return nil, err
	}
	var pinned []string
	if pol.Network != nil {
		for _, a := range pol.Network.Hosts {
			pinned = append(pinned, a.String())
		}
	}
	objs, err := kube.Render(&kube.Input{
		RunID: id, Namespace: client.Namespace,
		Image: cmp.Or(cfg.Image, k.Image), CordonImage: cmp.Or(cfg.CordonImage, k.CordonImage),
		RuntimeClass: cmp.Or(cfg.RuntimeClass, k.RuntimeClass),
		Repo:         cfg.Repo, Ref: cfg.Ref, Args: cfg.Command, Env: agentEnv, TTY: cfg.TTY,
		Hostname: pol.Sandbox.Hostname, Limits: pol.Limits, PinnedAddrs: pinned,
		CloneAuth: cloneAuth(pol, cfg.Repo),
		Config: &kubepod.GatewayConfig{
			Version: kubepod.Version, RunID: id, PolicyName: cmp.Or(pol.Source, "built-in default"),
			Policy: policyBytes, Allow: cfg.Allow, Hostname: pol.Sandbox.Hostname,
			Credentials: exported, Roots: roots, CAFile: caFile, AuditMaxBytes: auditMaxBytes(pol),
			LeaseSeconds: int(lease / time.Second),
		},
	})
	if err != nil {
		b.dropRun(rec)
		return nil, err
	}

	var patch bytes.Buffer
	auditFile, err := os.OpenFile(filepath.Join(rec.Dir, audit.FileName), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		b.dropRun(rec)
		return nil, err
	}
	res, runErr := client.Run(ctx, kube.RunOptions{
		Objects: objs,
		Streams: kube.Streams{Stdin: cfg.Stdin, Stdout: cfg.Stdout, Stderr: cfg.Stderr, TTY: cfg.TTY, Resize: cfg.Resize},
		Notify: func(kind, line string) {
			switch {
			case cfg.Notify != nil:
				cfg.Notify(line)
			case kind == kubepod.LineUpstream:
				b.warn.upstream(line)
			default:
				b.warn.blocked(line)
			}
		},
		Patch: &patch, Audit: auditFile,
		Timeout:      pol.Limits.Timeout,
		StartTimeout: cmp.Or(cfg.StartTimeout, 5*time.Minute),
		Lease:        lease,
		Warn:         b.warn.notice,
	})
	if err := auditFile.Close(); err != nil && runErr == nil {
		runErr = err
	}
	// Run deleted the pod and Secret already; asked again here, so that the record says whether
	// the cluster holds nothing more of the run (cordon gc retries until it does).
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := client.DeleteRun(dctx, id); err == nil {
		_ = rec.Update(func(m *runstate.Meta) error { m.Kube.Cleaned = true; return nil })
	}
	dcancel()
	if runErr != nil && res == nil {
		_ = rec.Finish(exitCordonFailed)
		var se *kube.StepError
		if errors.As(runErr, &se) {
			return nil, &SetupError{Err: runErr}
		}
		return nil, runErr
	}
	out := &KubeExit{RunID: id, Base: res.Base, Reason: res.Reason}
	out.Code, out.TimedOut = res.ExitCode, res.TimedOut
	if res.Stopped != "" && !res.TimedOut {
		b.warn.notice("the pod stopped the run: " + res.Stopped)
	}
	runErr = errors.Join(runErr, recordPatch(rec, project, workspace.PatchInfo{Repo: cfg.Repo, Ref: cfg.Ref}, res, &patch))
	if cs, err := workspace.Changes(rec); err == nil {
		out.Changed = len(cs)
	}
	if sum, err := audit.SummarizeFile(filepath.Join(rec.Dir, audit.FileName)); err == nil {
		out.Network = &sum
	}
	if err := rec.Finish(out.Code); err != nil {
		runErr = errors.Join(runErr, err)
	}
	n := out.Network
	switch {
	case out.Changed > 0:
		out.Kept = KeptChanges
	case cfg.Keep:
		out.Kept = KeptAsked
	case runErr != nil:
		out.Kept = KeptFailed
	case n != nil && n.Denied+n.Misuses+n.Echoes > 0:
		out.Kept = KeptNetwork
	default:
		if err := runstate.RemoveAll(rec.Dir); err != nil {
			out.Kept = KeptFailed
			runErr = errors.Join(runErr, fmt.Errorf("removing the unchanged run: %w", err))
		}
	}
	return out, runErr
}

// recordPatch makes the local run rec a patch run of the changes the pod sent back, when the
// wrapper's status says the patch is its own: a process the agent left could have written one where
// the wrapper failed. info's Base is taken from res.
func recordPatch(rec *runstate.Run, project string, info workspace.PatchInfo, res *kube.Result, patch *bytes.Buffer) error {
	// The base is the clone step's, as the kubelet reports it; the wrapper's status (which the agent
	// could have written) must agree with it.
	info.Base = res.Base
	if res.Status != nil && res.Status.Base != "" {
		switch {
		case info.Base == "":
			info.Base = res.Status.Base
		case res.Status.Base != info.Base:
			return fmt.Errorf("the pod's status names base %q, the clone step checked out %s: the changes are not recorded", warn.Printable(res.Status.Base, 80), info.Base)
		}
	}
	switch {
	case res.Status == nil:
		return errors.New("the agent's wrapper reported nothing: the run's changes, if any, are lost with the pod")
	case res.Status.PatchError != "":
		return fmt.Errorf("the pod could not make the run's changes: %s", res.Status.PatchError)
	case res.HasPatch && patch.Len() > 0:
		if err := workspace.PreparePatch(rec, project, info, patch); err != nil {
			return fmt.Errorf("recording the run's changes: %w", err)
		}
	}
	return nil
}

// CheckKubeRepo refuses a repository URL a kubernetes run cannot clone safely: not http(s), no host,
// or with a user or password in it. Such a token would be in the pod's spec (its clone command),
// in the checkout's .git/config, which the agent reads, and in the local run record; the way to
// clone a private repository is a credential whose inject.hosts cover its host, which the gateway
// puts in.
func CheckKubeRepo(repo string) error {
	u, err := url.Parse(repo)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return fmt.Errorf("%q is not an http(s) repository URL (expected https://HOST/PATH)", repo)
	case u.User != nil:
		return fmt.Errorf("the repository URL for %s has a user or token in it, which the agent would read; give the token as a credential with inject.hosts: [%s] instead", u.Hostname(), u.Hostname())
	}
	return nil
}

// exitCordonFailed is the exit code a run's record gets when cordon itself failed it.
const exitCordonFailed = 125

// kubeRefuses says what of a policy the kubernetes backend cannot hold, rather than drop it silently.
// runtimeClass is the pod's (flag or policy), which a policy asking for gVisor must name.
func kubeRefuses(pol *policy.Policy, runtimeClass string) error {
	var no []string
	if pol.Sandbox.Isolation == policy.IsolationGVisor && runtimeClass == "" {
		no = append(no, "sandbox.isolation: gvisor without a RuntimeClass (name the cluster's gVisor one with --runtime-class or sandbox.kubernetes.runtimeClass)")
	}
	if pol.Sandbox.Workdir != "" {
		no = append(no, "sandbox.workdir (the command starts at the checkout's top)")
	}
	if len(pol.Services) > 0 {
		no = append(no, "services (fixture databases run beside a local sandbox)")
	}
	if len(pol.Filesystem.ReadOnly) > 0 || len(pol.Filesystem.ReadWrite) > 0 {
		no = append(no, "filesystem.readonly/readwrite (host paths do not exist in the cluster)")
	}
	if pol.Network != nil && len(pol.Network.Presets) > 0 {
		no = append(no, "network.presets (they read this machine's tool configuration)")
	}
	for _, c := range pol.Credentials {
		if c.From.SSHAgent != nil {
			no = append(no, "an sshAgent credential ("+c.Name+")")
		}
	}
	if len(pol.Budgets) > 0 {
		no = append(no, "budgets (kept in this machine's state)")
	}
	if len(no) == 0 {
		return nil
	}
	return fmt.Errorf("the kubernetes backend cannot hold %s; remove them from the policy for this run", strings.Join(no, ", "))
}

// podTrustEnv points the agent's tools at the trust bundle the gateway writes in the pod.
func podTrustEnv() []string {
	bundle := kubepod.TrustDir + "/" + kubepod.TrustBundle
	var env []string
	for _, v := range gateway.TrustVars {
		env = append(env, v+"="+bundle)
	}
	for _, v := range gateway.ExtraTrustVars {
		env = append(env, v+"="+kubepod.TrustDir+"/"+kubepod.RunCA)
	}
	p := fmt.Sprintf("http://127.0.0.1:%d", kubepod.Ports().Proxy)
	noProxy := "localhost,127.0.0.1,::1"
	return append(env, "HTTP_PROXY="+p, "HTTPS_PROXY="+p, "http_proxy="+p, "https_proxy="+p,
		"NO_PROXY="+noProxy, "no_proxy="+noProxy)
}

// kubeRoots are the certificate authorities the pod's gateway verifies upstreams with (the cordon
// image has none of its own): this machine's roots, and the policy's network.tls.caFile.
func kubeRoots(pol *policy.Policy) (roots, caFile []byte, err error) {
	for _, f := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"} {
		if b, err := os.ReadFile(f); err == nil {
			roots = b
			break
		}
	}
	if pol.Network != nil && pol.Network.TLS.CAFile != "" {
		if caFile, err = os.ReadFile(pol.Network.TLS.CAFile); err != nil {
			return nil, nil, fmt.Errorf("network.tls.caFile: %w", err)
		}
	}
	return roots, caFile, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// KubeCleaned is one kubernetes run whose leftovers CleanKube deleted from its cluster.
type KubeCleaned struct {
	ID string
	// Recovered says the run's changes and audit log were fetched from its pod first (its cordon
	// was interrupted while the agent ran); Changes counts the changed paths.
	Recovered bool
	Changes   int
	// Note says what else happened: why the pod stopped the run, or why nothing could be fetched.
	Note string
}

// recoverWait is how long CleanKube waits, beyond a run's lease, for an agent whose cordon is gone
// to be stopped by its pod.
const recoverWait = 30 * time.Second

// CleanKube deletes what kubernetes runs left in their clusters (their pod, Secret and
// NetworkPolicy), for every run in the store whose cordon is gone and whose record does not say it
// cleaned up: a cordon killed mid-run leaves them, and cordon gc calls this. A run whose cordon was
// interrupted while its agent ran is recovered first: its pod stops the agent within the run's
// lease, and the changes and audit log it kept are fetched into the local run (for cordon diff and
// apply), which is then finished with the agent's exit code.
//
// env is the caller's environment (KUBECONFIG, HOME), for a run that named no kubeconfig file.
func (s Store) CleanKube(ctx context.Context, env []string) ([]KubeCleaned, error) {
	runs, err := s.store().List()
	if err != nil {
		return nil, err
	}
	var done []KubeCleaned
	var errs []error
	for _, r := range runs {
		k := r.Meta.Kube
		// A listed run's state is resolved: running means its cordon is alive, interrupted that
		// it was recorded as running by a cordon that is gone.
		if k == nil || k.Cleaned || r.Meta.State == runstate.StateRunning {
			continue
		}
		c, err := kube.NewClient(kube.ClientOptions{Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace,
			Getenv: func(key string) string { return getenv(env, key) }})
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s (namespace %s): %w", r.Meta.ID, k.Namespace, err))
			continue
		}
		if k.Server != "" && c.Server() != k.Server {
			errs = append(errs, fmt.Errorf("run %s: its context %q now names server %s, the run was on %s; point the kubeconfig at that cluster to clean it up", r.Meta.ID, k.Context, c.Server(), k.Server))
			continue
		}
		kc := KubeCleaned{ID: r.Meta.ID}
		if r.Meta.State == runstate.StateInterrupted {
			rctx, cancel := context.WithTimeout(ctx, cmp.Or(k.Lease, kubepod.DefaultLease)+recoverWait+2*time.Minute)
			err := recoverKube(rctx, c, r, &kc)
			cancel()
			if err != nil {
				// Not recovered, and not known to be lost: the pod stays for the next gc.
				errs = append(errs, fmt.Errorf("run %s: fetching its changes from its pod (cordon gc tries again): %w", r.Meta.ID, err))
				continue
			}
		}
		if err := c.DeleteRun(ctx, r.Meta.ID); err != nil {
			errs = append(errs, fmt.Errorf("run %s (namespace %s): %w", r.Meta.ID, k.Namespace, err))
			continue
		}
		if err := r.Update(func(m *runstate.Meta) error { m.Kube.Cleaned = true; return nil }); err != nil {
			errs = append(errs, err)
		}
		done = append(done, kc)
	}
	return done, errors.Join(errs...)
}

// recoverKube fetches the results of run r, whose cordon was interrupted, from its pod into r, and
// finishes r's record. A run whose pod is gone, or whose agent never ran, is finished as cordon's
// failure; one whose agent ran on past the wait is left to DeleteRun, its changes lost (said in kc).
// Any other error leaves r as it was, for the next gc: its pod must not be deleted.
func recoverKube(ctx context.Context, c *kube.Client, r *runstate.Run, kc *KubeCleaned) error {
	k := r.Meta.Kube
	// The audit log comes into a file of its own, which replaces the run's only once it is whole.
	auditPath := filepath.Join(r.Dir, audit.FileName)
	auditFile, err := os.CreateTemp(r.Dir, "."+audit.FileName+".recover*")
	if err != nil {
		return err
	}
	defer os.Remove(auditFile.Name())
	var patch bytes.Buffer
	res, err := c.Recover(ctx, r.Meta.ID, cmp.Or(k.Lease, kubepod.DefaultLease)+recoverWait, &patch, auditFile)
	if cerr := auditFile.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, kube.ErrStillRunning):
		kc.Note = "its agent was still running; it was deleted with its pod, and its changes are lost"
		return r.Finish(exitCordonFailed)
	case errors.Is(err, kube.ErrNoPod), errors.Is(err, kube.ErrNeverRan):
		kc.Note = "nothing to fetch from its pod: " + err.Error()
		return r.Finish(exitCordonFailed)
	case err != nil:
		return err
	}
	if err := os.Rename(auditFile.Name(), auditPath); err != nil {
		return err
	}
	kc.Recovered = true
	if res.Stopped != "" {
		kc.Note = "the pod stopped it: " + res.Stopped
	}
	if err := recordPatch(r, r.Meta.Project, workspace.PatchInfo{Repo: k.Repo, Ref: k.Ref}, res, &patch); err != nil {
		kc.Note = strings.TrimPrefix(kc.Note+"; ", "; ") + err.Error()
	}
	if cs, err := workspace.Changes(r); err == nil {
		kc.Changes = len(cs)
	}
	return r.Finish(res.ExitCode)
}

// cloneAuth picks the credential the clone step presents to the repository: the first whose
// inject hosts cover the repository's host (the gateway puts its real value in).
func cloneAuth(pol *policy.Policy, repo string) *kube.CloneAuth {
	u, err := url.Parse(repo)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	host := strings.ToLower(u.Hostname())
	for _, c := range pol.Credentials {
		if c.From.SSHAgent != nil || c.From.AWS != nil {
			continue
		}
		for _, h := range c.Inject.Hosts {
			h = strings.ToLower(h)
			if h == host || strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) {
				return &kube.CloneAuth{Env: c.Name, Scheme: string(c.Inject.Scheme), Header: c.Inject.Header}
			}
		}
	}
	return nil
}

// kubeconfigPath is an explicit kubeconfig made absolute, so that gc run elsewhere finds it.
func kubeconfigPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
