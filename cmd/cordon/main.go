// Command cordon runs a coding agent inside a sandbox: the project visible through a disposable
// workspace and nothing else of the host, no network but what the policy allows, and no long-lived
// secret inside. This file is wiring only: subcommands, flags and exit codes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
)

// Exit codes follow docker and podman: 125 for cordon's own failures, 126 for a command that cannot
// be executed, 127 for one that is not found; otherwise the command's own status.
const (
	exitCordon      = 125
	exitNotExec     = 126
	exitNotFound    = 127
	exitUsage       = 2
	exitInterrupted = 130
)

// command is one subcommand.
type command struct {
	name    string
	usage   string
	summary string
	run     func(a *app, args []string) int
}

// app carries what every subcommand needs: the streams, the environment and the caller's identity.
// Nothing is global, so tests can run subcommands in-process.
type app struct {
	stdin, stdout, stderr *os.File
	env                   []string
	uid                   int
}

func commands() []command {
	return []command{
		{"run", "run [flags] -- COMMAND [ARG...]", "run a command (an agent) inside the sandbox", (*app).cmdRun},
		{"log", logUsage, "print a run's audit log: every DNS answer, connection and checked request, allowed or denied", (*app).cmdLog},
		{"runs", "runs", "list runs: id, project, command, started, state, files changed", (*app).cmdRuns},
		{"diff", "diff [--stat] RUN", "show what a run changed, as a git-style diff", (*app).cmdDiff},
		{"apply", "apply [--include-risky] RUN", "carry a run's changes into the project", (*app).cmdApply},
		{"export", "export --branch NAME RUN", "commit a run's changes on a new branch of the project", (*app).cmdExport},
		{"discard", "discard RUN", "throw a run's changes away", (*app).cmdDiscard},
		{"gc", "gc [--older-than 7d]", "remove applied and discarded runs", (*app).cmdGC},
		{"verify", "verify [--policy FILE] [--json]", "start a real sandbox with the policy and attack it from inside: a scorecard", (*app).cmdVerify},
		{"probe", "probe [--json] [--canaries JSON]", "run the escape probes here, inside any sandbox: a scorecard", (*app).cmdProbe},
		{"doctor", "doctor", "say what this host supports, one line each", (*app).cmdDoctor},
		{"policy", "policy check [FILE]", "validate a policy and print the effective policy", (*app).cmdPolicy},
		{"version", "version", "print cordon's version", (*app).cmdVersion},
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// A descriptor cordon inherited without close-on-exec (a shell's, a CI runner's) must not travel on
	// into the sandbox: nothing but the streams cordon chooses goes through.
	if err := closeInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		os.Exit(exitCordon)
	}
	cordon.Init() // the sandbox's init and reaper are this binary
	switch {
	case len(os.Args) > 0 && os.Args[0] == probe.AllocArg0:
		os.Exit(probe.AllocMain(os.Args[1:]))
	case len(os.Args) > 0 && os.Args[0] == canary.ProcessArg0:
		os.Exit(canary.ProcessMain())
	}
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, env: os.Environ(), uid: os.Getuid()}
	os.Exit(a.main(os.Args[1:]))
}

func (a *app) main(args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		a.usage(a.stdout)
		return 0
	case "--version":
		return a.cmdVersion(nil)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(a, args[1:])
		}
	}
	a.errorf("unknown command %q (see cordon --help)", args[0])
	return exitUsage
}

func (a *app) usage(w *os.File) {
	fmt.Fprint(w, `cordon runs a coding agent inside a sandbox: it sees the project through a disposable workspace
and nothing else of the host, reaches only the network the policy allows, and holds no long-lived secret.

Usage:
  cordon COMMAND [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-32s %s\n", c.usage, c.summary)
	}
	fmt.Fprint(w, `
The policy is read from --policy FILE, else $XDG_CONFIG_HOME/cordon/policy.yaml (root: /etc/cordon/policy.yaml),
else the built-in default: the workspace read-write, nothing else of the host, no network.
Exit status: the command's own; 125 when cordon fails, 126 when the command cannot be executed, 127 when
it is not found. RUN is a run's id (see cordon runs), a unique prefix of one, or last.
Run "cordon COMMAND --help" for a command's flags.
`)
}

func (a *app) errorf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "cordon: "+format+"\n", args...)
}

// flags returns a FlagSet whose errors are one line that says how to get help.
func (a *app) flags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	_ = usage
	return fs
}

// parse parses flags; it returns false with the exit code to use when parsing ended the command.
func (a *app) parse(fs *flag.FlagSet, usage string, args []string) (int, bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(a.stdout, "Usage: cordon %s\n", usage)
		fs.SetOutput(a.stdout)
		fs.PrintDefaults()
		return 0, false
	}
	if err != nil {
		a.errorf("%s: %v (see cordon %s --help)", fs.Name(), err, fs.Name())
		return exitUsage, false
	}
	return 0, true
}

func (a *app) getenv(key string) string {
	for i := len(a.env) - 1; i >= 0; i-- {
		if k, v, ok := cutEnv(a.env[i]); ok && k == key {
			return v
		}
	}
	return ""
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

func (a *app) cmdVersion([]string) int {
	fmt.Fprintf(a.stdout, "cordon %s\n", version)
	return 0
}
