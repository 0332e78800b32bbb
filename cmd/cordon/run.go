package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/console"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/egress/netns"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
	"github.com/cordon-sandbox/cordon/internal/sandboxenv"
	"github.com/cordon-sandbox/cordon/internal/workspace"
	"golang.org/x/term"
)

const runUsage = "run [--policy FILE] [--workspace DIR] [--allow HOST[:PORT]]... -- COMMAND [ARG...]"

func (a *app) cmdRun(args []string) int {
	fl := a.flags("run", runUsage)
	policyFlag := fl.String("policy", "", "policy `file` (must be outside the workspace)")
	wsFlag := fl.String("workspace", "", "project `directory` the agent works on (default: the current directory)")
	var allow []policy.Endpoint
	fl.Func("allow", "allow `HOST[:PORT]` (port 443 if omitted) for this run, in addition to the policy; repeatable", func(v string) error {
		ep, err := parseAllow(v)
		if err == nil {
			allow = append(allow, ep)
		}
		return err
	})
	if code, ok := a.parse(fl, runUsage, args); !ok {
		return code
	}
	argv := fl.Args()
	if len(argv) == 0 {
		a.errorf("run: no command given (usage: cordon %s)", runUsage)
		return exitUsage
	}

	project, err := a.resolveWorkspace(*wsFlag)
	if err != nil {
		a.errorf("run: %v", err)
		return exitCordon
	}
	if *wsFlag == "" {
		if root := a.enclosingRepo(project); root != "" {
			fmt.Fprintf(a.stderr, "cordon: the workspace is %s, inside the git repository %s, which it does not include (git inside finds no repository); to include it: --workspace %s\n", project, root, root)
		}
	}
	pol, err := a.loadPolicy(*policyFlag, project)
	if err != nil {
		a.errorf("%v", err)
		return exitCordon
	}
	if len(allow) > 0 {
		if pol.Network == nil {
			pol.Network = &policy.Network{}
		}
		pol.Network.Allow = append(pol.Network.Allow, allow...)
	}
	if a.adjustPolicy != nil {
		a.adjustPolicy(pol)
	}
	// Credentials are read (commands run, tokens minted) before anything starts, on the caller's
	// terminal; what they mint is revoked on every way out.
	credSet, err := a.prepareCredentials(context.Background(), pol)
	if err != nil {
		a.errorf("run: %v", err)
		return exitCordon
	}
	defer a.closeCredentials(credSet)
	streams, err := console.Attach(a.stdin, a.stdout, a.stderr)
	if err != nil {
		a.errorf("run: %v", err)
		return exitCordon
	}
	// Clone init now: its start-up overlaps with preparing the run below. Until Start sends it the
	// spec it does nothing but wait.
	backend := &linux.Backend{Warn: a.warn}
	id := a.identity()
	var egress *sandbox.EgressPorts
	if pol.Network != nil {
		// Init sets up the gateway's sockets and rules while the run is prepared.
		p := gateway.Ports()
		egress = &sandbox.EgressPorts{Transparent: p.Transparent, Proxy: p.Proxy, DNS: p.DNS}
	}
	launched, err := backend.Launch(linux.LaunchOptions{User: id, Stdin: streams.Stdin, Stdout: streams.Stdout, Stderr: streams.Stderr, TTY: streams.TTY, Egress: egress})
	if err != nil {
		streams.Close()
		return a.startError(err, nil)
	}
	meta := runstate.Meta{Project: project, Command: argv}
	run, err := a.createRun(meta)
	if err != nil {
		launched.Abort()
		streams.Close()
		a.errorf("run: creating the run's state: %v", err)
		return exitCordon
	}
	backend.RunName = "cordon-" + run.Meta.ID
	spec, err := a.buildSpec(pol, project, argv, run, id)
	var gw *gateway.Gateway
	if err == nil && pol.Network != nil {
		// The gateway is prepared (policy matched, presets read, audit log open) before anything runs;
		// init creates its sockets and rules inside the sandbox before the command exists. If either
		// fails, the command does not start.
		gcfg := gateway.Config{
			Network: pol.Network, Presets: presets.Source{Env: a.env},
			Hostname: spec.Hostname, AuditPath: filepath.Join(run.Dir, "audit.jsonl"), AuditMaxBytes: auditMaxBytes(pol),
			Notify: func(line string) { fmt.Fprintf(a.stderr, "cordon: %s\n", line) },
		}
		if credSet != nil {
			gcfg.InjectHosts, gcfg.Modify, gcfg.Redactions = credSet.Hosts(), credSet.Modify, credSet.Redactions
			spec.Env = append(spec.Env, credSet.Env()...)
		}
		if gw, err = gateway.New(gcfg); err == nil {
			spec.Egress = egress
			spec.ResolvConf = gateway.ResolvConf()
			spec.Env = append(spec.Env, gw.Env()...)
			spec.TrustCA = gw.TrustCA()
		}
	}
	if err != nil {
		launched.Abort()
		streams.Close()
		a.dropRun(run)
		a.errorf("run: %v", err)
		return exitCordon
	}
	spec.Stdin, spec.Stdout, spec.Stderr, spec.TTY = streams.Stdin, streams.Stdout, streams.Stderr, streams.TTY
	spec.TTYRows, spec.TTYCols = streams.Rows, streams.Cols
	serveEgress := func(sb sandbox.Sandbox) error {
		if gw == nil {
			return nil
		}
		set, err := netns.FromFiles(sb.EgressSockets())
		if err == nil {
			gw.Serve(set)
		}
		return err
	}
	// The run's record is made durable while the sandbox starts, not before (see CreateLazy).
	synced := make(chan error, 1)
	go func() { synced <- run.Sync() }()
	code, started := a.runSpec(spec, run, backend, launched, streams, serveEgress)
	if err := <-synced; err != nil {
		a.warn(fmt.Sprintf("recording the run: %v", err))
	}
	if gw != nil {
		sum, err := gw.Close()
		if err != nil {
			a.warn(fmt.Sprintf("gateway: %v", err))
		}
		if started {
			fmt.Fprintf(a.stderr, "cordon: network: %s (details: cordon log %s)\n", sum, run.Meta.ID)
		}
	}
	if !started {
		a.dropRun(run)
		return code
	}
	a.finishRun(run, code)
	return code
}

// parseAllow reads --allow's HOST[:PORT].
func parseAllow(v string) (policy.Endpoint, error) {
	host, port := v, uint16(443)
	if h, p, ok := strings.Cut(v, ":"); ok {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return policy.Endpoint{}, fmt.Errorf("%q: the port must be a number from 1 to 65535", v)
		}
		host, port = h, uint16(n)
	}
	if host == "" {
		return policy.Endpoint{}, fmt.Errorf("%q: no host", v)
	}
	return policy.Endpoint{Host: strings.ToLower(host), Ports: []uint16{port}}, nil
}

func (a *app) createRun(meta runstate.Meta) (*runstate.Run, error) {
	var err error
	if meta.PID, meta.PIDStart, err = runstate.Self(); err != nil {
		return nil, err
	}
	return a.store().CreateLazy(meta)
}

// notice prints the workspace's one-line note (a copy instead of an overlay, no disk limit), if any.
func (a *app) notice(run *runstate.Run) {
	if info, err := workspace.LoadInfo(run); err == nil && info.Note != "" {
		a.warn("workspace: " + info.Note)
	}
}

// dropRun removes a run whose command never started: it has nothing to review.
func (a *app) dropRun(run *runstate.Run) {
	workspace.Release(run)
	if err := runstate.RemoveAll(run.Dir); err != nil {
		a.warn(fmt.Sprintf("removing the unused run directory %s: %v", run.Dir, err))
	}
}

// runSpec starts the launched sandbox, relays its streams and signals, and returns the exit code and
// whether the command started at all.
func (a *app) runSpec(spec *sandbox.Spec, run *runstate.Run, backend *linux.Backend, launched *linux.Launched, streams *console.Streams, afterStart func(sandbox.Sandbox) error) (int, bool) {
	// Signals for cordon go to the command; cordon itself ends when the sandbox does.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	sb, err := launched.Start(context.Background(), spec)
	var se *sandbox.SetupError
	if errors.As(err, &se) && se.Step == linux.StepOverlay {
		// This host cannot mount overlayfs in a user namespace: learn it by trying, then use a copy.
		if spec.Workspace, err = workspace.FallbackToCopy(run, se.Err); err == nil {
			a.notice(run)
			sb, err = backend.Start(context.Background(), spec)
		}
	}
	streams.Started()
	if err != nil {
		streams.Close()
		return a.startError(err, spec), false
	}
	if err := afterStart(sb); err != nil {
		// Fail closed: without its gateway the sandbox has no business running.
		sb.Kill()
		sb.Wait()
		streams.Close()
		a.errorf("run: %v; the sandbox was stopped", err)
		return exitCordon, true
	}
	if spec.TTY {
		if err := streams.RelayTerminal(sb.Terminal()); err != nil {
			sb.Kill()
			sb.Wait()
			streams.Close()
			a.errorf("run: %v", err)
			return exitCordon, true
		}
	}
	go func() {
		for sig := range sigs {
			sb.Signal(sig)
		}
	}()
	st, err := sb.Wait()
	streams.Close()
	if err != nil {
		a.errorf("run: waiting for the sandbox: %v", err)
		return exitCordon, true
	}
	if st.TimedOut {
		a.errorf("run: stopped after %s (limits.timeout)", spec.Limits.Timeout)
	}
	return st.Code, true
}

func (a *app) startError(err error, spec *sandbox.Spec) int {
	var ee *sandbox.ExecError
	if errors.As(err, &ee) && spec != nil {
		if ee.NotFound {
			a.errorf("%s: command not found inside the sandbox (PATH=%s); if it is installed outside /usr, add its directory to filesystem.readonly in the policy", ee.Path, envValue(spec.Env, "PATH"))
			return exitNotFound
		}
		a.errorf("%s: cannot be executed inside the sandbox: %v", ee.Path, ee.Err)
		return exitNotExec
	}
	a.errorf("%v; the command was not started", err)
	return exitCordon
}

// resolveWorkspace returns the project directory, refusing directories whose exposure would defeat
// the sandbox: the root, system directories, the caller's home or anything containing it.
func (a *app) resolveWorkspace(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("current directory: %w", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace %s: not a directory", dir)
	}
	for _, sys := range []string{"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/boot", "/run", "/var", "/tmp", "/home", "/root"} {
		if real == sys {
			return "", fmt.Errorf("workspace %s: refusing to expose a system directory; run cordon in a project folder or pass --workspace", real)
		}
	}
	if home := a.getenv("HOME"); home != "" {
		if h, err := filepath.EvalSymlinks(home); err == nil && within(h, real) {
			return "", fmt.Errorf("workspace %s: it contains your home directory (%s), which would expose ~/.ssh and other secrets; run cordon in a project folder or pass --workspace", real, h)
		}
	}
	return real, nil
}

// enclosingRepo returns the root of a git work tree that project lies strictly inside (a directory
// above it holding .git), or "": the workspace is the directory cordon was started in, and an agent
// started in a subdirectory would otherwise find git failing with no word why. Directories that could
// not be a workspace (the caller's home and above, system directories) are not looked at.
func (a *app) enclosingRepo(project string) string {
	if _, err := os.Lstat(filepath.Join(project, ".git")); err == nil {
		return ""
	}
	home := a.getenv("HOME")
	if h, err := filepath.EvalSymlinks(home); err == nil {
		home = h
	}
	for dir := filepath.Dir(project); dir != "/" && dir != "." && (home == "" || !within(home, dir)); dir = filepath.Dir(dir) {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			if _, err := a.resolveWorkspace(dir); err != nil {
				return "" // a system directory: not one to suggest
			}
			return dir
		}
	}
	return ""
}

// within reports whether p is dir or lies below it (both cleaned, absolute).
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// loadPolicy finds and loads the policy, refusing one the sandbox could write.
func (a *app) loadPolicy(explicit, project string) (*policy.Policy, error) {
	path, err := policy.Locate(explicit, policy.LocateEnv{UID: a.uid, Home: a.getenv("HOME"), XDGConfigHome: a.getenv("XDG_CONFIG_HOME")})
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if path == "" {
		return policy.Default(), nil
	}
	opts := policy.Options{Home: a.getenv("HOME")}
	// Refuse before reading: nothing inside the agent's reach is ever read as configuration.
	if err := policy.CheckOutside(path, []string{project}); err != nil {
		return nil, err
	}
	pol, err := policy.Load(path, opts)
	if err != nil {
		return nil, err
	}
	if err := policy.CheckOutside(path, append([]string{project}, pol.Filesystem.ReadWrite...)); err != nil {
		return nil, err
	}
	return pol, nil
}

// identity is who the command runs as inside: the caller's own uid (never root; root callers get uid
// 1000 inside, which the backend maps to cordon's reserved host range, never to host root) with a
// private, empty home.
func (a *app) identity() sandbox.User {
	u := sandbox.User{UID: a.uid, GID: os.Getgid(), Name: a.getenv("USER"), Home: a.getenv("HOME")}
	if u.Name == "" {
		if cu, err := user.Current(); err == nil {
			u.Name = cu.Username
		}
	}
	if u.UID == 0 || u.Name == "" || u.Name == "root" {
		u = sandbox.User{UID: 1000, GID: 1000, Name: "cordon", Home: "/home/cordon"}
	}
	if u.GID == 0 {
		u.GID = u.UID
	}
	if u.Home == "" || u.Home == "/" {
		u.Home = "/home/" + u.Name
	}
	return u
}

// stateBudget shares limits.disk between the run's layers and its audit log, so that the run's state
// as a whole stays under it; without the limit it still bounds the log.
func stateBudget(pol *policy.Policy) (runstate.Budget, error) {
	return runstate.NewBudget(int64(pol.Limits.Disk), audit.DefaultMaxBytes)
}

// auditMaxBytes is the audit log's cap: its share of the budget, which buildSpec has checked.
func auditMaxBytes(pol *policy.Policy) int64 {
	b, err := stateBudget(pol)
	if err != nil {
		return audit.DefaultMaxBytes
	}
	return b.AuditLog
}

// buildSpec turns the policy into the sandbox's declarative spec.
func (a *app) buildSpec(pol *policy.Policy, project string, argv []string, run *runstate.Run, id sandbox.User) (*sandbox.Spec, error) {
	budget, err := stateBudget(pol)
	if err != nil {
		return nil, err
	}
	ws, err := workspace.PrepareWith(run, project, workspace.PrepareOptions{DiskBytes: budget.Layers, Lazy: true})
	if err != nil {
		return nil, fmt.Errorf("preparing the workspace: %w", err)
	}
	a.notice(run)
	env, warnings := sandboxenv.Build(a.env, pol.Env, sandboxenv.Identity{User: id.Name, Home: id.Home, TTY: term.IsTerminal(int(a.stdin.Fd()))})
	for _, w := range warnings {
		fmt.Fprintln(a.stderr, w)
	}
	spec := &sandbox.Spec{
		Args:         argv,
		Env:          env,
		Dir:          project,
		Hostname:     cmp.Or(pol.Sandbox.Hostname, policy.DefaultHostname),
		Workspace:    ws,
		User:         id,
		AllowNesting: pol.Sandbox.AllowNesting,
		Limits: sandbox.Limits{
			MemoryBytes: int64(pol.Limits.Memory),
			Pids:        pol.Limits.Pids,
			CPU:         pol.Limits.CPU,
			OpenFiles:   pol.Limits.OpenFiles,
			Timeout:     pol.Limits.Timeout,
		},
	}
	if wd, err := os.Getwd(); err == nil {
		if real, err := filepath.EvalSymlinks(wd); err == nil && within(real, project) {
			spec.Dir = real
		}
	}
	for _, p := range pol.Filesystem.ReadOnly {
		spec.Mounts = append(spec.Mounts, a.mount(p, false, id.Home)...)
	}
	for _, p := range pol.Filesystem.ReadWrite {
		spec.Mounts = append(spec.Mounts, a.mount(p, true, id.Home)...)
	}
	if err := a.checkMounts(spec.Mounts, project); err != nil {
		return nil, err
	}
	a.warnCredentialMounts(spec.Mounts)
	if spec.Masks, err = denyMasks(project, pol.Filesystem.Deny); err != nil {
		return nil, err
	}
	secrets, err := a.secretMasks(context.Background(), project, pol.Filesystem.Secrets)
	if err != nil {
		return nil, err
	}
	spec.Masks = append(spec.Masks, secrets...)
	a.warnSecretValues(env, pol.Env)
	// Code that git runs on the host later is never writable from inside, even without the overlay.
	for _, p := range []string{".git/hooks", ".git/config"} {
		if _, err := os.Lstat(filepath.Join(project, p)); err == nil {
			spec.ReadOnly = append(spec.ReadOnly, filepath.Join(project, p))
		}
	}
	return spec, nil
}

// checkMounts refuses policy paths that would undo another boundary: a writable path inside the
// project (the agent's writes would reach the project directly, past the review and the persistence
// guard) and any path overlapping cordon's state (other runs' changes, audit logs, the run's own
// layers).
func (a *app) checkMounts(mounts []sandbox.Mount, project string) error {
	state := a.store().Root
	if real, err := filepath.EvalSymlinks(state); err == nil {
		state = real
	}
	for _, m := range mounts {
		if within(m.Source, state) || within(state, m.Source) {
			return fmt.Errorf("filesystem: %s overlaps cordon's state directory %s; the agent must not see other runs or its own layers", m.Source, state)
		}
		if m.Writable && within(m.Source, project) {
			return fmt.Errorf("filesystem.readwrite: %s is inside the workspace, whose changes go through review; remove it from the policy", m.Source)
		}
	}
	return nil
}

// mount resolves a policy path on the host. A path that does not exist is skipped with a warning:
// there is nothing to expose. The path appears inside where it is on the host; one under the caller's
// home appears under the sandbox user's home (sandboxHome) as well when the two differ, as they do for
// a root caller, so that ~/.cargo in the policy is ~/.cargo for the agent too, while absolute paths
// (a PATH entry, a command named by its path) keep working.
func (a *app) mount(p string, writable bool, sandboxHome string) []sandbox.Mount {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		a.warn(fmt.Sprintf("filesystem: %s is not mounted: %v", p, err))
		return nil
	}
	mounts := []sandbox.Mount{{Source: real, Writable: writable}}
	home := a.getenv("HOME")
	if realHome, err := filepath.EvalSymlinks(home); err == nil && home != "" && realHome != sandboxHome {
		if rel, err := filepath.Rel(realHome, real); err == nil && rel != "." && filepath.IsLocal(rel) {
			mounts = append(mounts, sandbox.Mount{Source: real, Target: filepath.Join(sandboxHome, rel), Writable: writable})
		}
	}
	return mounts
}

// denyMasks walks the workspace for paths that filesystem.deny hides. A matching symlink is followed
// to what it names inside the workspace, which is masked too, so a link cannot carry a denied file's
// content under another name.
// maskTarget is what hiding the workspace path p takes: p itself when it is a file or directory; for
// a symlink, its target when that lies in the workspace (a symlink is never mounted over, and one
// pointing outside leads where the sandbox sees only what the policy mounts); nothing for a pipe or
// socket, which holds no content to read.
func maskTarget(project, p string) (string, bool) {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return "", false
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := filepath.EvalSymlinks(p)
		if err != nil || !within(t, project) {
			return "", false
		}
		if fi, err := os.Stat(t); err != nil || !fi.Mode().IsRegular() && !fi.IsDir() {
			return "", false
		}
		return t, true
	case fi.Mode().IsRegular() || fi.IsDir():
		return p, true
	}
	return "", false
}

func denyMasks(project string, globs []string) ([]string, error) {
	if len(globs) == 0 {
		return nil, nil
	}
	m, err := policy.CompileDeny(globs)
	if err != nil {
		return nil, fmt.Errorf("filesystem.deny: %w", err)
	}
	var masks []string
	err = filepath.WalkDir(project, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == project {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, project+"/"))
		if !m.Match(rel, d.IsDir()) {
			return nil
		}
		if t, ok := maskTarget(project, p); ok {
			masks = append(masks, t)
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("filesystem.deny: scanning the workspace: %w", err)
	}
	return masks, nil
}

func (a *app) store() runstate.Store {
	return runstate.Store{Root: runstate.DefaultRoot(a.uid, a.getenv("HOME"), a.getenv("XDG_STATE_HOME"))}
}

// finishRun records how the run ended and tells the user what the agent changed and how to carry it
// over.
func (a *app) finishRun(run *runstate.Run, code int) {
	if err := run.Finish(code); err != nil {
		a.warn(fmt.Sprintf("recording the run's end: %v", err))
	}
	if err := workspace.Release(run); err != nil {
		a.warn(fmt.Sprintf("releasing the workspace: %v", err))
	}
	changes, err := workspace.Changes(run)
	if err != nil {
		a.warn(fmt.Sprintf("reading the run's changes: %v", err))
		return
	}
	if len(changes) == 0 {
		return
	}
	fmt.Fprintf(a.stderr, "cordon: run %s changed %d path(s); review: cordon diff %s; apply: cordon apply %s; discard: cordon discard %s\n",
		run.Meta.ID, len(changes), run.Meta.ID, run.Meta.ID, run.Meta.ID)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
