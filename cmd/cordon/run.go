package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// runUsage names the flags a user is most likely to look for; --help lists them all.
const runUsage = "run [--policy FILE] [--workspace DIR] [--allow HOST[:PORT]] [-e KEY[=VALUE]] [-v HOST[:PATH][:ro]] [OPTIONS] -- COMMAND [ARG...]"

// runSignals are the signals cordon run catches: before the command starts they end the start (and
// what it prepared is undone: a minted token revoked); while it runs they go to the command, and
// cordon ends when the sandbox does.
var runSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func (a *app) cmdRun(args []string) int {
	fl := a.flags("run", runUsage)
	policyFlag := fl.String("policy", "", "policy `file` (must be outside the workspace)")
	wsFlag := fl.String("workspace", "", "project `directory` the agent works on (default: the current directory)")
	keep := fl.Bool("keep", false, "keep the run even if it changes nothing (such a run is removed as it ends)")
	keepServices := fl.Bool("keep-services", false, "keep the policy's services running after the command ends, to look at from the host, until Ctrl-C")
	var rf runFlags
	rf.register(fl)
	if code, ok := a.parse(fl, runUsage, args); !ok {
		return code
	}
	if rf.bad != nil {
		a.errorf("run: %v", rf.bad)
		return exitCordon
	}
	argv := fl.Args()
	if len(argv) == 0 {
		a.errorf("run: no command given (usage: cordon %s)", runUsage)
		return exitCordon // as for a bad flag: every other status of run is the command's
	}
	// From here a signal ends the start cleanly; once the command runs, it is the command's.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, runSignals...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var early []os.Signal // signals that came while the run started
	starting, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case sig := <-sigs:
				early = append(early, sig)
				cancel()
			case <-starting:
				return
			}
		}
	}()
	rf.keepServices = *keepServices
	if rf.backend == "kubernetes" {
		close(starting)
		<-watched
		if len(early) > 0 {
			a.errorf("run: interrupted before the run started")
			return exitInterrupted
		}
		return a.runKube(ctx, *policyFlag, *wsFlag, *keep, &rf, argv, sigs)
	}
	if len(rf.kube.set) > 0 {
		a.errorf("run: %s needs --backend kubernetes", rf.kube.set[0])
		return exitCordon
	}
	run, code, ok := a.startRun(ctx, *policyFlag, *wsFlag, *keep, &rf, argv)
	close(starting)
	<-watched
	if !ok {
		if len(early) > 0 {
			// The signal may have come as the command was being started: it did not run
			// on, whether or not it had begun.
			a.errorf("run: interrupted while the sandbox was starting; nothing of it is left running")
			return exitInterrupted
		}
		return code
	}
	// A signal that came as the command was starting (it may already run before the start is
	// complete) is the command's too.
	for _, sig := range early {
		run.Signal(sig)
	}
	return a.waitRun(run, sigs)
}

// startRun loads the policy and starts the run, printing why when it cannot.
func (a *app) startRun(ctx context.Context, policyPath, wsDir string, keep bool, rf *runFlags, argv []string) (*cordon.Run, int, bool) {
	project, err := cordon.ResolveWorkspace(wsDir, a.getenv("HOME"))
	if err != nil {
		a.errorf("run: %v", err)
		return nil, exitCordon, false
	}
	if wsDir == "" {
		if root := a.enclosingRepo(project); root != "" {
			fmt.Fprintf(a.stderr, "cordon: the workspace is %s, inside the git repository %s, which it does not include (git inside finds no repository); to include it: --workspace %s\n", project, root, root)
		}
	}
	pol, err := a.loadPolicy(policyPath, project)
	if err != nil {
		a.errorf("%v", err)
		return nil, exitCordon, false
	}
	if err := rf.apply(pol, a.getenv("HOME"), project); err != nil {
		a.errorf("run: %v", err)
		return nil, exitCordon, false
	}
	run, err := cordon.Start(ctx, cordon.Config{
		Policy: pol, Workspace: project, Name: rf.name, Command: argv, Env: a.env, Keep: keep, Publish: rf.publish,
		KeepServices: rf.keepServices,
		Isolation:    cordon.Isolation(rf.isolation),
		Streams:      cordon.Streams{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr},
		StateDir:     a.store().Dir,
		OnWarning:    a.printWarning,
	})
	if err != nil {
		return nil, a.startError(err), false
	}
	return run, 0, true
}

// waitRun forwards signals to the running command, waits for it, and says how the run ended and
// what it changed (printEnd).
func (a *app) waitRun(run *cordon.Run, sigs <-chan os.Signal) int {
	forwarded := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case sig := <-sigs:
				run.Signal(sig)
			case <-done:
				return
			}
		}
	}()
	exit, err := run.Wait(context.Background())
	close(done)
	<-forwarded
	code := exit.Code
	if err != nil {
		a.errorf("run: %v", err)
		code = exitCordon
	} else if exit.TimedOut {
		a.errorf("run: stopped after %s (limits.timeout)", run.Timeout())
	}
	a.printEnd(run.ID(), exit)
	a.keepServices(run, sigs)
	return code
}

// keepServices, for --keep-services, says how to reach each service from the host and keeps them
// until a signal; then they go as they would have with the run. The servers die with cordon, so it
// waits rather than leave them behind.
func (a *app) keepServices(run *cordon.Run, sigs <-chan os.Signal) {
	list := run.Services()
	if len(list) == 0 {
		return
	}
	for _, s := range list {
		fmt.Fprintf(a.stderr, "cordon: service %s (%s %s) kept; from the host: %s\n", s.Name, s.Kind, s.Version, s.HostHint)
	}
	fmt.Fprintf(a.stderr, "cordon: press Ctrl-C to remove the services and their data\n")
	<-sigs
	if err := run.StopServices(); err != nil {
		a.errorf("run: %v", err)
	}
}

// printWarning prints one of the run's warnings as cordon always has: "cordon: warning: ..." for
// what weakens the run, "cordon: ..." for information.
func (a *app) printWarning(w cordon.Warning) {
	fmt.Fprintf(a.stderr, "cordon: %s\n", w)
}

// startError prints why a run did not start and returns the exit code: 127 and 126 for a command
// not found or not executable inside, 125 otherwise.
func (a *app) startError(err error) int {
	var ee *cordon.ExecError
	var se *cordon.SetupError
	switch {
	case errors.As(err, &ee) && ee.NotFound:
		a.errorf("%v%s", ee, execHint(ee))
		return exitNotFound
	case errors.As(err, &ee):
		a.errorf("%v%s", ee, execHint(ee))
		return exitNotExec
	case errors.As(err, &se):
		a.errorf("%v; the command was not started", err)
	default:
		a.errorf("run: %v", err)
	}
	return exitCordon
}

// parseAllow reads --allow's HOST[:PORT]: a host exactly as network.allow takes it, checked by the
// same rules, so the flag and the file accept and refuse the same hosts with the same words.
func parseAllow(v string) (policy.Endpoint, error) {
	return policy.ParseEndpoint(v)
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
			if _, err := cordon.ResolveWorkspace(dir, a.getenv("HOME")); err != nil {
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
	opts := policy.Options{Home: a.getenv("HOME"), Workspace: project}
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

// store is the caller's store of runs: cordon's state directory for the caller.
func (a *app) store() cordon.Store {
	return cordon.Store{Dir: runstate.DefaultRoot(a.uid, a.getenv("HOME"), a.getenv("XDG_STATE_HOME"))}
}
