package cordon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/budget"
	"github.com/cordon-sandbox/cordon/internal/cleanup"
	"github.com/cordon-sandbox/cordon/internal/console"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/services"
	"github.com/cordon-sandbox/cordon/internal/starttrace"
	"github.com/cordon-sandbox/cordon/internal/workspace"
)

// exitSetupFailed is the exit code recorded for a run that cordon itself ended (its gateway could
// not serve, its terminal could not be relayed, waiting for it failed), as docker and podman use 125
// for their own failures.
const exitSetupFailed = 125

// NetworkSummary is what the gateway decided over a run: connections and DNS answers allowed and
// refused, bytes each way, credentials injected. Its String is one line.
type NetworkSummary = audit.Summary

// Exit is how a run ended.
type Exit struct {
	// Code is the command's exit code, or 128+signal when a signal ended it.
	Code int
	// Signal is the signal that ended the command, if one did.
	Signal os.Signal
	// TimedOut says that limits.timeout ended the run.
	TimedOut bool
	// Network summarises the gateway's decisions; nil when the policy has no network section.
	Network *NetworkSummary
	// Budgets are what the run spent per host with a budget (policy budgets); nil when it has none.
	Budgets map[string]BudgetTotals
	// Changed is how many paths the command changed in the workspace (see FinishedRun.Changes).
	Changed int
	// Kept says why the run is kept in its store for review; it is empty when the run changed nothing
	// and was removed as it ended (Run.Finished and Run.Events then find nothing).
	Kept KeepReason
}

// Run is a command running in its box. Its methods are safe for concurrent use.
type Run struct {
	id        string
	isolation Isolation
	store     Store
	b         *builder
	rec       *runstate.Run
	sb        sandbox.Sandbox
	streams   *console.Streams
	gw        *gateway.Gateway
	agent     *agentSocket
	published *published
	budgets   *budget.Ledger
	creds     *creds.Set
	synced    *lazySync
	copied    error
	closeNull func()
	timeout   time.Duration
	keep      bool

	// services are the run's fixture servers, stopped by Wait unless keepServices.
	svcMu        sync.Mutex
	services     *services.Set
	keepServices bool

	// over is set once the box has ended: Signal and Kill then do nothing.
	over atomic.Bool
	// mu serialises Wait: the first finishes the run, later ones return what it did.
	mu     sync.Mutex
	waited bool
	exit   Exit
	err    error
}

// builder is what assembling one run needs of its caller: the environment, the streams credential
// commands talk on, the state directory, and where warnings go.
type builder struct {
	env           []string
	home          string
	stdin, stderr *os.File
	store         runstate.Store
	warn          *warnings
}

// Start assembles a run and starts its command: it reads the credentials the policy names (running
// their commands and minting their tokens on the caller's side), prepares the workspace (masking
// secret-shaped files), the gateway and the box, and returns once the command runs inside the
// finished boundary. If any step fails, everything done so far is undone (a minted token revoked, the
// run's directory removed) and nothing of the command runs: an *ExecError says the command could not
// be executed, a *SetupError that the box could not be built.
//
// ctx bounds the start: cancelling it (the cordon command does on SIGINT and SIGTERM) stops the start
// wherever it is and undoes it. Once Start has returned, ctx no longer matters: Run.Wait's does.
func Start(ctx context.Context, cfg Config) (*Run, error) {
	r, err := start(ctx, cfg)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// A step the ended context stopped (a credential's command killed, say) says so in its own
		// words; the caller asks errors.Is(err, context.Canceled).
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return r, err
}

func start(ctx context.Context, cfg Config) (*Run, error) {
	starttrace.Mark("start")
	if len(cfg.Command) == 0 {
		return nil, errors.New("no command given")
	}
	if err := cfg.Isolation.check(); err != nil {
		return nil, err
	}
	if err := CheckName(cfg.Name); err != nil {
		return nil, err
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	stdin, stdout, stderr, closeNull, err := cfg.Streams.orNull()
	if err != nil {
		return nil, err
	}
	// Every step below that acquires something pushes its undo; any return before the command runs
	// undoes them all, last first.
	c := cleanup.Make(closeNull)
	defer c.Clean()
	b := &builder{env: env, home: getenv(env, "HOME"), stdin: stdin, stderr: stderr, warn: newWarnings(cfg.OnWarning)}
	b.store = Store{Dir: cfg.StateDir}.storeFor(env)
	store := Store{Dir: b.store.Root}
	project, err := ResolveWorkspace(cfg.Workspace, b.home)
	if err != nil {
		return nil, err
	}
	pol := cfg.Policy
	if pol == nil {
		pol = policy.Default()
	}
	pol = withServiceNetwork(pol)
	if err := sweepServices(env); err != nil {
		b.warn.degraded(err.Error())
	}
	if pol.Source != policy.BuiltinSource && pol.Source != "" {
		// Nothing inside the agent's reach is ever read as configuration (the cordon command checks
		// this before reading the file too).
		if err := policy.CheckOutside(pol.Source, append([]string{project}, pol.Filesystem.ReadWrite...)); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	isolation, err := cfg.Isolation.resolve(pol.Sandbox.Isolation)
	if err != nil {
		return nil, err
	}
	backend, err := newBackend(isolation, cmp.Or(cfg.Runsc, pol.Sandbox.Runsc), env, append([]string{project}, pol.Filesystem.ReadWrite...))
	if err != nil {
		return nil, &SetupError{Err: err}
	}

	// Credentials are read (commands run, tokens minted) before anything starts, on the caller's
	// streams; what they mint is revoked on every way out.
	// The presets' tools are asked once, in the workspace: the gateway allows what they name and the
	// sandbox gets the same view (variables, files without auth lines, tokens as credentials).
	var view *presets.View
	if pol.Network != nil {
		if view, err = (presets.Source{Env: env, Workspace: project}).View(pol.Network.Presets); err != nil {
			return nil, fmt.Errorf("network.presets: %w", err)
		}
		for _, n := range view.Notes {
			b.warn.notice(n)
		}
	}
	credSet, err := b.prepareCredentials(ctx, pol, view.TokenList())
	if err != nil {
		return nil, err
	}
	c.Add(func() { b.closeCredentials(credSet) })
	streams, err := console.Attach(stdin, stdout, stderr)
	if err != nil {
		return nil, err
	}
	c.Add(streams.Close)
	// Launch the box now: its start-up overlaps with preparing the run below. Until Start sends it
	// the spec it does nothing but wait.
	var egress *sandbox.EgressPorts
	if pol.Network != nil {
		// The box sets up the gateway's sockets and rules while the run is prepared.
		p := gateway.Ports()
		egress = &p
	}
	pubs, err := listenPublished(cfg.Publish, pol.Network != nil)
	if err != nil {
		return nil, err
	}
	c.Add(pubs.close)
	starttrace.Mark("launch")
	launched, err := backend.Launch(ctx, &sandbox.LaunchSpec{
		User: identity(env), Stdin: streams.Stdin, Stdout: streams.Stdout, Stderr: streams.Stderr,
		TTY: streams.TTY, TTYRows: streams.Rows, TTYCols: streams.Cols, Egress: egress, Warn: b.warn.degraded,
		Publish: pubs.insidePorts(),
	})
	if err != nil {
		return nil, &SetupError{Err: err}
	}
	c.Add(launched.Abort)
	starttrace.Mark("launched")
	rec, err := b.createRun(runstate.Meta{Name: cfg.Name, Project: project, Command: cfg.Command, Policy: policyRef(pol)})
	if err != nil {
		return nil, fmt.Errorf("creating the run's state: %w", err)
	}
	c.Add(func() { b.dropRun(rec) })
	starttrace.Mark("run state")
	spec, err := b.buildSpec(ctx, pol, project, cfg.Command, rec, identity(env), view, credSet)
	if err != nil {
		return nil, err
	}
	spec.RunName = "cordon-" + rec.Meta.ID
	starttrace.Mark("spec")
	// Fixture services start now, outside the box, seeded before the command exists; a fixture that
	// fails stops the start.
	svcLog := &serviceLog{}
	svc, err := b.startServices(ctx, pol, project, rec.Meta.ID, svcLog)
	if err != nil {
		return nil, err
	}
	c.Add(func() { svc.Stop() })
	spec.Env = append(spec.Env, serviceEnv(pol, svc)...)
	var gw *gateway.Gateway
	ledger, err := budgetLedger(pol, b.store.Root, rec.Meta.ID)
	if err != nil {
		return nil, err
	}
	if pol.Network != nil {
		// The gateway is prepared (policy matched, presets read, audit log open) before anything
		// runs; the box creates its sockets and rules before the command exists. If either fails,
		// the command does not start.
		gcfg := gateway.Config{
			Network: pol.Network, Presets: view,
			Hostname: spec.Hostname, AuditPath: filepath.Join(rec.Dir, auditLogName), AuditMaxBytes: auditMaxBytes(pol),
			AuditCallerSyncs: true, // finish makes it durable with the run it stays in (keep)
			OnEvent:          onEvent(cfg.OnEvent), Notify: b.warn.blocked, NotifyUpstream: b.warn.upstream, Budgets: ledger,
			Services: gatewayServices(svc),
		}
		if credSet != nil {
			gcfg.WithCredentials(credSet)
			spec.Env = append(spec.Env, credSet.Env()...)
		}
		if gw, err = gateway.New(gcfg); err != nil {
			return nil, err
		}
		c.Add(func() { gw.Close() })
		svcLog.attach(gw)
		spec.ResolvConf = gateway.ResolvConf()
		var extra []byte
		if spec.Env, extra, err = b.gatewayEnv(spec.Env, gw.Env(), pol.Env); err != nil {
			return nil, err
		}
		spec.TrustCA = append(gw.TrustCA(), extra...)
	}
	spec.SSHKnownHosts = b.knownHosts(pol.Network)
	starttrace.Mark("gateway prepared")
	agent, err := b.startAgent(pol, gw, spec)
	if err != nil {
		return nil, err
	}
	c.Add(func() { agent.Close() })
	// The run's record is made durable once the run has lasted a while, not before (see CreateLazy
	// and lazySync).
	synced := startLazySync(rec)
	c.Add(func() { synced.stop() })

	sb, err := launched.Start(ctx, spec)
	var copied error
	var se *sandbox.SetupError
	if errors.Is(err, sandbox.ErrNoOverlay) && errors.As(err, &se) {
		// This host cannot mount overlayfs in a user namespace: learn it by trying, then use a copy.
		copied = se.Err
		if spec.Workspace, err = workspace.FallbackToCopy(rec, se.Err); err == nil {
			b.notice(rec)
			sb, err = launched.Retry(ctx, spec)
		}
	}
	streams.Started()
	starttrace.Mark("started")
	if err != nil {
		var used []string
		if pol.Network != nil {
			used = pol.Network.Presets
		}
		return nil, boxError(err, spec, env, used)
	}
	// The command runs: from here the Run owns everything, and Wait releases it in its own order.
	c.Release()
	r := &Run{
		id: rec.Meta.ID, store: store, b: b, rec: rec, sb: sb, streams: streams, gw: gw,
		creds: credSet, synced: synced, copied: copied, closeNull: closeNull, timeout: pol.Limits.Timeout,
		keep: cfg.Keep, budgets: ledger, agent: agent, published: pubs, isolation: isolation,
		services: svc, keepServices: cfg.KeepServices,
	}
	if gw != nil {
		ls, err := sb.EgressListeners()
		if err == nil {
			err = gw.Serve(ls)
		}
		if err == nil {
			err = pubs.serve(sb, gw)
		}
		if err != nil {
			// Fail closed: without its gateway the box has no business running.
			r.stop()
			return nil, fmt.Errorf("%w; the sandbox was stopped", err)
		}
	}
	if streams.TTY {
		if err := streams.RelayTerminal(sb.Terminal()); err != nil {
			r.stop()
			return nil, err
		}
	}
	return r, nil
}

// ID is the run's id, by which OpenRun finds it and the cordon command names it.
func (r *Run) ID() string { return r.id }

// Isolation is the tier the run's box is (the Config's, else the policy's, else IsolationNative).
func (r *Run) Isolation() Isolation { return r.isolation }

// Timeout is the policy's limits.timeout for the run (0: none), after which the box is stopped and
// Exit.TimedOut set.
func (r *Run) Timeout() time.Duration { return r.timeout }

// WorkspaceFallback says why the workspace is a copy of the project rather than a copy-on-write
// overlay (the host could not mount overlayfs in a user namespace); nil when it is an overlay.
func (r *Run) WorkspaceFallback() error { return r.copied }

// Warnings returns the warnings of the run so far, the ones of its start included.
func (r *Run) Warnings() []Warning { return r.b.warn.all() }

// Events reads the run's audit log as written so far (repeats the log is still folding appear once
// the run has ended); a run without network has none. Config.OnEvent receives the same events live.
func (r *Run) Events() ([]Event, error) { return readEvents(r.rec.Dir) }

// Signal forwards sig to the command. After the run has ended it does nothing.
func (r *Run) Signal(sig os.Signal) error {
	if r.over.Load() {
		return nil
	}
	return r.sb.Signal(sig)
}

// Kill ends every process of the run's box at once; Wait then reports the end.
func (r *Run) Kill() error {
	if r.over.Load() {
		return nil
	}
	return r.sb.Kill()
}

// Wait waits for the command to end and then finishes the run: the streams drained, the gateway
// closed (its summary in Exit.Network), the run's record written, its workspace released (and the run
// removed if it changed nothing and has no other reason to be kept: see Exit.Kept), what its
// credentials minted revoked. After it returns, nothing of the run is left running. If ctx ends
// first, the box is killed and the run finished all the same; the error is then ctx's. A second Wait
// returns what the first did.
func (r *Run) Wait(ctx context.Context) (Exit, error) {
	return r.wait(ctx, 0)
}

// stop kills a box whose start could not be completed and finishes the run with exitSetupFailed:
// the command ran, so the run is kept for review.
func (r *Run) stop() {
	r.sb.Kill()
	r.wait(context.Background(), exitSetupFailed)
}

// wait is Wait; a non-zero code overrides the command's in the run's record.
func (r *Run) wait(ctx context.Context, code int) (Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waited {
		return r.exit, r.err
	}
	r.waited = true
	st, err := r.sb.Wait(ctx)
	starttrace.Mark("command ended")
	r.over.Store(true)
	r.streams.Close()
	r.exit = Exit{Code: st.Code, Signal: st.Signal, TimedOut: st.TimedOut}
	failed := code != 0 // cordon ended the run itself
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("waiting for the sandbox: %w", err)
		r.exit.Code = exitSetupFailed
		failed = true
	}
	r.err = err
	if code != 0 {
		r.exit.Code = code
	}
	durable, err := r.synced.stop()
	if err != nil {
		r.b.warn.degraded(fmt.Sprintf("recording the run: %v", err))
	}
	r.published.close()                     // first, as the agent: its connections are events of the gateway's log
	if err := r.agent.Close(); err != nil { // first: its uses are events of the gateway's log
		r.b.warn.degraded("the sandbox's ssh-agent: " + err.Error())
	}
	// The services go with the box (their removal still in the audit log), unless kept.
	if !r.keepServices {
		if err := r.StopServices(); err != nil {
			r.b.warn.degraded(err.Error())
		}
	}
	if r.gw != nil {
		sum, err := r.gw.Close()
		starttrace.Mark("gateway closed")
		if err != nil {
			r.b.warn.degraded(fmt.Sprintf("gateway: %v", err))
		}
		r.exit.Network = &sum
	}
	if r.budgets != nil {
		// Kept beside the run's record, before finish may remove it, for cordon runs to list.
		r.exit.Budgets = r.budgets.Totals()
		if err := writeBudgets(r.rec.Dir, r.exit.Budgets); err != nil {
			r.b.warn.degraded(fmt.Sprintf("recording the budget totals: %v", err))
		}
	}
	r.exit.Changed, r.exit.Kept = r.finish(r.exit.Code, failed, durable)
	starttrace.Mark("finished")
	r.b.closeCredentials(r.creds)
	r.closeNull()
	return r.exit, r.err
}

// finish records how the run ended and releases its workspace, returning how many paths the
// command changed and why the run is kept; a run that has no reason to be kept is removed. durable
// says the record was made durable during the run (lazySync); the end of a kept run is made durable
// here, that of a removed one never reaches the disk.
func (r *Run) finish(code int, failed, durable bool) (int, KeepReason) {
	if err := workspace.Release(r.rec); err != nil {
		r.b.warn.degraded(fmt.Sprintf("releasing the workspace: %v", err))
	}
	r.b.dropCacheLayers(r.rec.Dir)
	// The run's end is recorded by the removal's judgement (FinishRemoveIf), or here for a run that
	// is kept; finished says it was.
	finished := false
	keep := func(n int, why KeepReason) (int, KeepReason) {
		if !finished {
			if err := r.rec.FinishLazy(code); err != nil {
				r.b.warn.degraded(fmt.Sprintf("recording the run's end: %v", err))
			}
		}
		sync := r.rec.Sync // the whole record: nothing of it reached the disk yet
		if durable {
			// The record reached the disk during the run; since then its end was written, and the
			// audit log's last events (the gateway leaves its fsync to this).
			sync = func() error { return r.rec.SyncMeta(auditLogName) }
		}
		if err := sync(); err != nil {
			r.b.warn.degraded(fmt.Sprintf("recording the run's end: %v", err))
		}
		return n, why
	}
	changes, err := workspace.Changes(r.rec)
	if err != nil {
		r.b.warn.degraded(fmt.Sprintf("reading the run's changes: %v", err))
		return keep(0, KeptFailed)
	}
	if why := r.keepReason(len(changes), failed); why != "" {
		return keep(len(changes), why)
	}
	// Judged again under the run's lock: a run is only ever removed by what its record says now,
	// and it must still be the running run this cordon recorded (no other cordon applied,
	// discarded or otherwise ended it meanwhile). Its end is recorded only if it stays.
	removed, err := r.rec.FinishRemoveIf(code, func(m runstate.Meta) (bool, error) { return m.State == runstate.StateRunning, nil })
	if err != nil {
		r.b.warn.degraded(fmt.Sprintf("removing the unchanged run: %v", err))
	}
	if !removed {
		// Its end is written unless the lock or the record could not be had; FinishLazy then
		// tries once more, and reports.
		finished = err == nil
		return keep(0, KeptFailed)
	}
	return 0, ""
}

// durableAfter is how long a run lasts before its record is made durable. A run that ends sooner
// and changed nothing is removed as it ends, so the fsyncs (5, a few milliseconds on the start's
// path) are saved; a crash within this time can lose the run's record, as it can lose whatever the
// command wrote by then, which is not synced either.
const durableAfter = 250 * time.Millisecond

// lazySync makes a run's record durable once the run has lasted durableAfter.
type lazySync struct {
	timer *time.Timer
	done  chan error
	once  sync.Once
	ran   bool
	err   error
}

func startLazySync(rec *runstate.Run) *lazySync {
	s := &lazySync{done: make(chan error, 1)}
	s.timer = time.AfterFunc(durableAfter, func() { s.done <- rec.Sync() })
	return s
}

// stop cancels a sync not yet begun, or waits for the one that ran; it says whether one made the
// record durable (ran and succeeded: a failed one leaves the whole record to finish's Sync), and how
// it ended. Later calls return the same.
func (s *lazySync) stop() (bool, error) {
	s.once.Do(func() {
		if !s.timer.Stop() {
			s.ran, s.err = true, <-s.done
		}
	})
	return s.ran && s.err == nil, s.err
}

// keepReason decides whether a finished run that changed `changed` paths stays in the store, and why.
// A run that changed nothing holds nothing to apply, so it goes (docker's --rm the other way round),
// unless something the user was shown or may want to look into lives only in it:
//   - the gateway refused or flagged requests: cordon log is how the user sees what the agent
//     tried, and a user told "blocked ..." during the run expects to be able to look;
//   - a line printed during the run points into the run's directory: the start line names the
//     full list of masked files when it could not name them all. That list stays in the run rather
//     than in a per-project file because it describes this run (its policy's masks and allowances):
//     a later run would overwrite a shared one and make the line printed earlier untrue;
//   - cordon ended the run itself (the sandbox failed): its record is the account of what happened.
//
// A run whose gateway only allowed connections goes with its audit log; the cordon command says so.
func (r *Run) keepReason(changed int, failed bool) KeepReason {
	n := r.exit.Network
	switch {
	case changed > 0:
		return KeptChanges
	case r.keep:
		return KeptAsked
	case failed:
		return KeptFailed
	case n != nil && n.Denied+n.Misuses+n.Echoes+n.AgentRefusals > 0:
		return KeptNetwork
	case pointsInto(r.b.warn.all(), r.rec.Dir):
		return KeptListing
	}
	return ""
}

// pointsInto reports whether a warning names a path inside dir, as it is or as a quoted string
// would show it.
func pointsInto(ws []Warning, dir string) bool {
	q := strconv.Quote(dir + "/")
	for _, w := range ws {
		if strings.Contains(w.Message, dir+"/") || strings.Contains(w.Message, q[1:len(q)-1]) {
			return true
		}
	}
	return false
}

// Close ends the run if it is still going (the box killed) and finishes it as Wait does. It is
// safe to call after Wait, and more than once.
func (r *Run) Close() error {
	r.Kill()
	_, err := r.wait(context.Background(), 0)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// Finished opens the run's record and changes for review (see FinishedRun).
func (r *Run) Finished() (*FinishedRun, error) { return r.store.Open(r.id) }

// orNull returns the streams with the null device for each one not given, and how to close what it
// opened.
func (s Streams) orNull() (stdin, stdout, stderr *os.File, closeNull func(), err error) {
	stdin, stdout, stderr = s.Stdin, s.Stdout, s.Stderr
	if stdin != nil && stdout != nil && stderr != nil {
		return stdin, stdout, stderr, func() {}, nil
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	for _, f := range []**os.File{&stdin, &stdout, &stderr} {
		if *f == nil {
			*f = null
		}
	}
	return stdin, stdout, stderr, func() { null.Close() }, nil
}

// warnings collects a run's warnings and hands each to the caller's callback as it happens.
type warnings struct {
	on   func(Warning)
	mu   sync.Mutex
	list []Warning
}

// maxWarnings bounds what a run keeps: the gateway reports each refused host once, and an agent
// can try many.
const maxWarnings = 1000

func newWarnings(on func(Warning)) *warnings { return &warnings{on: on} }

func (w *warnings) add(kind WarningKind, msg string) {
	wn := Warning{Kind: kind, Message: msg}
	w.mu.Lock()
	if len(w.list) < maxWarnings {
		w.list = append(w.list, wn)
	}
	w.mu.Unlock()
	if w.on != nil {
		w.on(wn)
	}
}

func (w *warnings) degraded(msg string) { w.add(WarningDegraded, msg) }
func (w *warnings) notice(msg string)   { w.add(WarningNotice, msg) }
func (w *warnings) blocked(msg string)  { w.add(WarningBlocked, msg) }
func (w *warnings) upstream(msg string) { w.add(WarningUpstream, msg) }

func (w *warnings) all() []Warning {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}
