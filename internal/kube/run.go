package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/warn"
)

// Streams are the agent's: what cordon attaches to the agent's container.
type Streams struct {
	Stdin          io.Reader // nil: the agent's stdin is closed after the hello
	Stdout, Stderr io.Writer
	// TTY attaches a terminal (the pod's container was rendered with TTY); Resize, when set, gives
	// the terminal's size as it changes.
	TTY    bool
	Resize <-chan TermSize
}

// RunOptions is one run on the cluster.
type RunOptions struct {
	Objects *Objects
	Streams Streams
	// Notify receives the gateway's one-line notices as they happen: kind is kubepod.LineNotice
	// (a refusal) or kubepod.LineUpstream (an allowed host that could not be reached or verified).
	Notify func(kind, line string)
	// Patch and Audit receive the run's changes and its audit log, fetched when the agent has ended.
	Patch, Audit io.Writer
	// Timeout ends the agent after this long (the policy's limits.timeout); 0 for none.
	Timeout time.Duration
	// StartTimeout bounds the wait for the pod to start the agent (images, scheduling, the clone).
	StartTimeout time.Duration
	// Lease is the run's lease (kubepod.GatewayConfig.LeaseSeconds, which the objects were rendered
	// with): cordon renews it from the gateway's start until Run returns. Zero renews nothing.
	Lease time.Duration
	// Warn receives a line when the lease could not be renewed (the pod stops the run after a lease
	// without renewal); nil drops it.
	Warn func(string)
}

// Result is how a run on the cluster ended.
type Result struct {
	// ExitCode is the agent's, as the kubelet reports it.
	ExitCode int
	// Reason is the kubelet's reason when the agent did not exit by itself (OOMKilled, DeadlineExceeded...).
	Reason string
	// Base is the commit the clone step checked out (its termination message).
	Base   string
	Status *kubepod.Status
	// HasPatch says whether the pod made a patch (Status.PatchError says why not).
	HasPatch bool
	// TimedOut is set when the run's timeout ended it.
	TimedOut bool
	// Stopped says why the pod ended the agent itself (its lease lapsed); empty when it did not.
	Stopped string
}

// StepError is a step of the pod that failed before the agent ran: which one and what it said.
type StepError struct {
	Step    string // the container: setup, gateway, clone; or "pod" for scheduling and images
	Message string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("the pod's %s step failed: %s", e.Step, e.Message)
}

// Run creates the run's objects, attaches to the agent, waits for it to end, fetches the changes
// and the audit log, and deletes everything it made, also when ctx ends or a step fails (with a
// context of its own, so that a cancelled run still cleans up). Nothing of the agent runs until the
// attach is open.
func (c *Client) Run(ctx context.Context, opts RunOptions) (res *Result, err error) {
	o := opts.Objects
	runID := o.Pod.Labels[LabelRun]
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := c.DeleteRun(dctx, runID); derr != nil {
			err = errors.Join(err, fmt.Errorf("kube: cleaning up (cordon gc retries): %w", derr))
		}
	}()
	secret, stored, err := c.createSecret(ctx, o.Secret)
	if err != nil {
		return nil, fmt.Errorf("kube: creating the run's Secret in namespace %s: %w", c.Namespace, err)
	}
	if err := storedAsSent("data", o.Secret, stored); err != nil {
		return nil, fmt.Errorf("kube: the cluster changed the run's Secret as it stored it (a mutating admission webhook?): %w", err)
	}
	if o.NetworkPolicy != nil {
		stored, err := c.createNetworkPolicy(ctx, o.NetworkPolicy)
		if err != nil {
			return nil, fmt.Errorf("kube: creating the run's NetworkPolicy: %w", err)
		}
		if err := storedAsSent("spec", o.NetworkPolicy, stored); err != nil {
			return nil, fmt.Errorf("kube: the cluster changed the run's NetworkPolicy as it stored it (a mutating admission webhook?): %w", err)
		}
	}
	// Created held back from scheduling: nothing of it runs until the pod the API server stored,
	// after the cluster's mutating admission webhooks, has been checked to be the pod rendered.
	gated := withGate(o.Pod)
	pod, stored, err := c.createPod(ctx, gated)
	if err != nil {
		return nil, fmt.Errorf("kube: creating the run's pod: %w", err)
	}
	if err := admitted(gated, stored); err != nil {
		return nil, fmt.Errorf("kube: the cluster changed the run's pod as it stored it (a mutating admission webhook?): %w; "+
			"nothing of it ran, and it is deleted", err)
	}
	// The Secret belongs to the pod: when the pod goes, the cluster's garbage collector takes the
	// Secret too, even if cordon is gone by then.
	secret.OwnerReferences = []OwnerReference{{
		APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
	}}
	stored, err = c.updateSecret(ctx, secret)
	if err != nil {
		return nil, fmt.Errorf("kube: giving the Secret to the pod: %w", err)
	}
	// A webhook on updates sees the Secret again.
	if err := storedAsSent("data", o.Secret, stored); err != nil {
		return nil, fmt.Errorf("kube: the cluster changed the run's Secret as it stored its owner (a mutating admission webhook?): %w", err)
	}
	if err := c.ungate(ctx, pod.Name, func(stored []byte) error { return admitted(gated, stored) }); err != nil {
		return nil, fmt.Errorf("kube: letting the checked pod be scheduled: %w", err)
	}

	var notices sync.WaitGroup
	logCtx, stopLogs := context.WithCancel(ctx)
	defer func() { stopLogs(); notices.Wait() }()

	startCtx := ctx
	if opts.StartTimeout > 0 {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithTimeout(ctx, opts.StartTimeout)
		defer cancel()
	}
	// The lease is renewed until Run returns, the results fetched (the deferred deletion runs after).
	var leasing sync.WaitGroup
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { stopLease(); leasing.Wait() }()

	res = &Result{}
	gatewayUp := false
	err = c.watchPod(startCtx, pod.Name, func(p *Pod) (bool, error) {
		if !gatewayUp && containerStarted(p.Status.InitContainerStatuses, ContainerGateway) {
			gatewayUp = true
			if opts.Notify != nil {
				notices.Add(1)
				go func() {
					defer notices.Done()
					c.followNotices(logCtx, pod.Name, opts.Notify)
				}()
			}
			if opts.Lease > 0 {
				leasing.Add(1)
				go func() {
					defer leasing.Done()
					c.keepLease(leaseCtx, pod.Name, opts.Lease, opts.Warn)
				}()
			}
		}
		if err := stepFailure(p); err != nil {
			return true, err
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == ContainerClone && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
				res.Base = strings.TrimSpace(s.State.Terminated.Message)
			}
		}
		st := containerStatus(p.Status.ContainerStatuses, ContainerAgent)
		return st != nil && (st.State.Running != nil || st.State.Terminated != nil), nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, &StepError{Step: "pod", Message: fmt.Sprintf("the agent did not start within %s%s", opts.StartTimeout, c.waitingFor(ctx, pod.Name))}
		}
		return nil, err
	}

	runCtx := ctx
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	stdin := io.Reader(strings.NewReader(kubepod.AttachHello))
	if opts.Streams.Stdin != nil {
		stdin = io.MultiReader(stdin, opts.Streams.Stdin)
	}
	stdout := opts.Streams.Stdout
	if opts.Streams.TTY && stdout != nil {
		// The hello may reach the terminal before the wrapper has turned its echo off.
		stdout = &dropEcho{w: stdout, echo: []byte(strings.TrimSuffix(kubepod.AttachHello, "\n") + "\r\n")}
	}
	so := streamOptions{Stdin: stdin, Stdout: stdout, TTY: opts.Streams.TTY, Resize: opts.Streams.Resize}
	if !opts.Streams.TTY {
		so.Stderr = opts.Streams.Stderr
	}
	attachErr := c.attach(runCtx, pod.Name, ContainerAgent, so)
	if attachErr != nil && runCtx.Err() == nil {
		// Without the attach the wrapper never gets its hello: the agent would wait for ever.
		if p, err := c.getPod(ctx, pod.Name); err != nil || !agentEnded(p) {
			return nil, fmt.Errorf("kube: attaching to the agent: %w", attachErr)
		}
	}

	// The attach ends when the agent's container does (or the stream broke): the kubelet's word on
	// how it ended is what counts.
	err = c.watchPod(runCtx, pod.Name, func(p *Pod) (bool, error) {
		st := containerStatus(p.Status.ContainerStatuses, ContainerAgent)
		if st == nil || st.State.Terminated == nil {
			return false, nil
		}
		res.ExitCode = int(st.State.Terminated.ExitCode)
		if r := st.State.Terminated.Reason; r != "" && r != "Completed" && r != "Error" {
			res.Reason = r
		}
		return true, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			res.TimedOut = true
			res.ExitCode = 124
			// The agent still runs, and what is in OutDir now is the agent's to write: the run is
			// ended by the lease, whose lapse makes the wrapper stop the command and make the patch.
			// Fetched only after that, so that the results are the wrapper's.
			if opts.Lease > 0 {
				stopLease()
				leasing.Wait()
				wctx, cancel := context.WithTimeout(ctx, opts.Lease+30*time.Second)
				werr := c.watchPod(wctx, pod.Name, func(p *Pod) (bool, error) { return agentEnded(p), nil })
				cancel()
				if werr != nil {
					return res, fmt.Errorf("kube: the run timed out, and its agent did not stop within its lease (%s): its changes are not fetched: %w", opts.Lease, werr)
				}
			}
		} else {
			if attachErr != nil {
				err = errors.Join(err, attachErr)
			}
			return nil, fmt.Errorf("kube: waiting for the agent: %w", err)
		}
	}

	return res, c.results(ctx, pod.Name, res, opts.Patch, opts.Audit)
}

// results fetches the run's changes and audit log from the keeper into res, patch and audit.
func (c *Client) results(ctx context.Context, pod string, res *Result, patch, audit io.Writer) error {
	fetchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	hdr, end, err := c.fetch(fetchCtx, pod, patch, audit)
	if err != nil {
		return fmt.Errorf("kube: fetching the run's changes and audit log: %w", err)
	}
	res.Status = hdr.Status
	res.HasPatch = end.HasPatch
	if st := hdr.Status; st != nil {
		// The agent runs as the wrapper's uid and can write where the status is: its words are
		// shown, never obeyed, and go to the terminal only made printable.
		st.Stopped = warn.Printable(st.Stopped, 400)
		st.PatchError = warn.Printable(st.PatchError, 400)
		res.Stopped = st.Stopped
	}
	return nil
}

// ErrNoPod is Recover's error for a run whose pod is not in the namespace (deleted already).
var ErrNoPod = errors.New("kube: the run's pod is gone")

// ErrStillRunning is Recover's error for a run whose agent did not end within the wait.
var ErrStillRunning = errors.New("kube: the run's agent is still running")

// ErrNeverRan is Recover's error for a run whose agent never started (a step before it failed):
// there is nothing to fetch.
var ErrNeverRan = errors.New("kube: the run's agent never ran")

// Recover fetches what a run whose cordon was interrupted left in its pod: it waits, at most wait,
// for the agent to end (its lease ends it once cordon's heartbeat has stopped), then fetches the
// changes and the audit log as Run does. It does not delete anything (DeleteRun does).
func (c *Client) Recover(ctx context.Context, runID string, wait time.Duration, patch, audit io.Writer) (*Result, error) {
	name := PodName(runID)
	p, err := c.getPod(ctx, name)
	if err != nil {
		if IsNotFound(err) {
			return nil, ErrNoPod
		}
		return nil, fmt.Errorf("kube: reading the run's pod: %w", err)
	}
	if slices.ContainsFunc(p.Spec.SchedulingGates, func(g SchedulingGate) bool { return g.Name == GateAdmitted }) {
		// cordon stopped before it checked the pod and let it be scheduled: nothing of it ran.
		return nil, fmt.Errorf("%w in pod %s (it was never let be scheduled)", ErrNeverRan, name)
	}
	res := &Result{}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err = c.watchPod(wctx, name, func(p *Pod) (bool, error) {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == ContainerClone && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
				res.Base = strings.TrimSpace(s.State.Terminated.Message)
			}
		}
		if err := stepFailure(p); err != nil {
			return true, err // the agent never ran: nothing to fetch
		}
		st := containerStatus(p.Status.ContainerStatuses, ContainerAgent)
		if st == nil || st.State.Terminated == nil {
			return p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded", nil
		}
		res.ExitCode = int(st.State.Terminated.ExitCode)
		if r := st.State.Terminated.Reason; r != "" && r != "Completed" && r != "Error" {
			res.Reason = r
		}
		return true, nil
	})
	var se *StepError
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, fmt.Errorf("%w after %s in pod %s", ErrStillRunning, wait, name)
	case errors.As(err, &se):
		return nil, fmt.Errorf("%w in pod %s: %v", ErrNeverRan, name, se)
	case err != nil:
		return nil, err
	}
	if p, err = c.getPod(ctx, name); err != nil {
		return nil, fmt.Errorf("kube: reading the run's pod: %w", err)
	}
	if !agentEnded(p) {
		return nil, fmt.Errorf("%w in pod %s (it is %s)", ErrNeverRan, name, p.Status.Phase)
	}
	return res, c.results(ctx, name, res, patch, audit)
}

// keepLease renews the run's lease until ctx ends: an exec of kubepod.LeaseArgs in the gateway's
// container whose stdin is a heartbeat, a byte every kubepod.HeartbeatEvery(lease). An exec that
// breaks (the API server or the kubelet restarted, the network blinked) is made again; each failure
// goes to warn, since a lease that is not renewed ends the run.
func (c *Client) keepLease(ctx context.Context, pod string, lease time.Duration, warn func(string)) {
	every := kubepod.HeartbeatEvery(lease)
	cmd := append(append([]string{kubepod.BinaryInImage}, kubepod.LeaseArgs...), "--dir", kubepod.TrustDir)
	for {
		var stderr bytes.Buffer
		err := c.exec(ctx, pod, ContainerGateway, cmd, streamOptions{Stdin: &heartbeat{ctx: ctx, every: every}, Stderr: &stderr})
		if ctx.Err() != nil {
			return
		}
		if warn != nil {
			msg := "the exec ended"
			if err != nil {
				msg = err.Error()
			}
			if s := strings.TrimSpace(stderr.String()); s != "" {
				msg += " (" + s + ")"
			}
			warn(fmt.Sprintf("renewing the run's lease in pod %s: %s; retrying (the pod stops the run after %s without one)", pod, msg, lease))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// heartbeat is the lease's stdin: a byte at once, then one every every, and the end once ctx ends.
type heartbeat struct {
	ctx     context.Context
	every   time.Duration
	started bool
}

func (h *heartbeat) Read(p []byte) (int, error) {
	if h.started {
		t := time.NewTimer(h.every)
		defer t.Stop()
		select {
		case <-h.ctx.Done():
			return 0, io.EOF
		case <-t.C:
		}
	}
	h.started = true
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = '.'
	return 1, nil
}

// fetch execs the keeper's fetch and reads its bundle.
func (c *Client) fetch(ctx context.Context, pod string, patch, audit io.Writer) (*kubepod.BundleHeader, *kubepod.BundleEnd, error) {
	if patch == nil {
		patch = io.Discard
	}
	if audit == nil {
		audit = io.Discard
	}
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		cmd := append([]string{kubepod.BinaryInImage}, kubepod.FetchArgs...)
		err := c.exec(ctx, pod, ContainerKeeper, cmd, streamOptions{Stdout: pw, Stderr: &stderr})
		pw.CloseWithError(err)
		done <- err
	}()
	hdr, end, err := kubepod.ReadBundle(pr, patch, audit)
	_, _ = io.Copy(io.Discard, pr)
	if xerr := <-done; xerr != nil && err == nil {
		err = xerr
	}
	if err != nil {
		if s := strings.TrimSpace(stderr.String()); s != "" {
			err = fmt.Errorf("%w (the keeper said: %s)", err, s)
		}
		return nil, nil, err
	}
	return hdr, end, nil
}

// followNotices reads the gateway's log and passes on its notice lines.
func (c *Client) followNotices(ctx context.Context, pod string, notify func(kind, line string)) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(c.logs(ctx, pod, ContainerGateway, true, pw)) }()
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var n kubepod.GatewayLine
		if json.Unmarshal(sc.Bytes(), &n) == nil && n.Cordon != "" && n.Line != "" {
			notify(n.Cordon, n.Line)
		}
	}
	_ = pr.Close()
}

// stepFailure says which step of the pod failed before the agent, with what it said.
func stepFailure(p *Pod) error {
	for _, s := range p.Status.InitContainerStatuses {
		if t := s.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = fmt.Sprintf("exit %d (%s)", t.ExitCode, t.Reason)
			}
			return &StepError{Step: s.Name, Message: msg}
		}
		if w := s.State.Waiting; w != nil && badWait(w.Reason) {
			return &StepError{Step: s.Name, Message: w.Reason + ": " + w.Message}
		}
		if s.Name == ContainerGateway && s.RestartCount > 0 && s.State.Running == nil {
			return &StepError{Step: s.Name, Message: "the gateway exited: " + lastTermination(s)}
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && badWait(w.Reason) {
			return &StepError{Step: s.Name, Message: w.Reason + ": " + w.Message}
		}
	}
	if p.Status.Phase == "Failed" && containerStatus(p.Status.ContainerStatuses, ContainerAgent) == nil {
		return &StepError{Step: "pod", Message: p.Status.Reason + " " + p.Status.Message}
	}
	return nil
}

func lastTermination(s ContainerStatus) string {
	if t := s.LastTerminationState.Terminated; t != nil {
		if m := strings.TrimSpace(t.Message); m != "" {
			return m
		}
		return fmt.Sprintf("exit %d", t.ExitCode)
	}
	return "restarted"
}

// badWait are the waiting reasons that will not resolve by themselves.
func badWait(reason string) bool {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff":
		return true
	}
	return false
}

func containerStatus(ss []ContainerStatus, name string) *ContainerStatus {
	for i := range ss {
		if ss[i].Name == name {
			return &ss[i]
		}
	}
	return nil
}

func containerStarted(ss []ContainerStatus, name string) bool {
	s := containerStatus(ss, name)
	return s != nil && (s.State.Running != nil || s.State.Terminated != nil)
}

// waitingFor describes what the pod is waiting on, for a start that timed out.
func (c *Client) waitingFor(ctx context.Context, name string) string {
	p, err := c.getPod(context.WithoutCancel(ctx), name)
	if err != nil {
		return ""
	}
	for _, ss := range [][]ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range ss {
			if w := s.State.Waiting; w != nil {
				return fmt.Sprintf(" (%s is waiting: %s %s)", s.Name, w.Reason, w.Message)
			}
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != "True" && cond.Message != "" {
			return fmt.Sprintf(" (%s: %s)", cond.Type, cond.Message)
		}
	}
	return ""
}

// dropEcho passes the terminal's output on, less the echo of the attach hello if the output starts
// with it.
type dropEcho struct {
	w     io.Writer
	echo  []byte
	held  []byte
	ready bool
}

func (d *dropEcho) Write(p []byte) (int, error) {
	if d.ready {
		return d.w.Write(p)
	}
	d.held = append(d.held, p...)
	n := min(len(d.held), len(d.echo))
	if !bytes.Equal(d.held[:n], d.echo[:n]) {
		d.ready = true
		_, err := d.w.Write(d.held)
		d.held = nil
		return len(p), err
	}
	if len(d.held) < len(d.echo) {
		return len(p), nil
	}
	d.ready = true
	rest := d.held[len(d.echo):]
	d.held = nil
	if len(rest) > 0 {
		if _, err := d.w.Write(rest); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

func agentEnded(p *Pod) bool {
	st := containerStatus(p.Status.ContainerStatuses, ContainerAgent)
	return st != nil && st.State.Terminated != nil
}
