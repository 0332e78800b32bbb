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
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
	"github.com/cordon-sandbox/cordon/internal/starttrace"
)

// Exit codes follow docker and podman: for run, 125 for cordon's own failures (a bad flag too), 126
// for a command that cannot be executed, 127 for one that is not found; otherwise the command's own
// status. The other commands exit 2 for a usage mistake, as command-line tools do.
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
	argv0                 string // as cordon was invoked: the hints it prints name it so
}

func commands() []command {
	return []command{
		{"run", "run [flags] -- COMMAND [ARG...]", "run a command (an agent) inside the sandbox", (*app).cmdRun},
		{"log", logUsage, "print a run's audit log: every DNS answer, connection and checked request, allowed or denied", (*app).cmdLog},
		{"budget", budgetUsage, "print today's totals of the policy's per:day budgets and what is left", (*app).cmdBudget},
		{"runs", runsUsage, "list this project's runs (--all: every project's) and what each changed", (*app).cmdRuns},
		{"diff", "diff [--stat] RUN", "show what a run changed, as a git-style diff", (*app).cmdDiff},
		{"apply", "apply [--include-risky] RUN", "carry a run's changes into the project", (*app).cmdApply},
		{"export", "export [--include-risky] --branch NAME RUN", "commit a run's changes on a new branch of the project", (*app).cmdExport},
		{"discard", "discard RUN", "throw a run's changes away", (*app).cmdDiscard},
		{"gc", gcUsage, "remove applied, discarded and unchanged runs; recover what killed kubernetes runs left in their pods", (*app).cmdGC},
		{"verify", "verify [--policy FILE] [--json]", "start a real sandbox with the policy and attack it from inside: a scorecard", (*app).cmdVerify},
		{"probe", "probe [--json] [--only PREFIXES] [--timeout D] [--canaries JSON]", "run the escape probes here, inside any sandbox: a scorecard", (*app).cmdProbe},
		{"doctor", doctorUsage, "say what this host (or, with --backend kubernetes, the cluster) supports, one line each", (*app).cmdDoctor},
		{"policy", "policy check|suggest|import ...", "check a policy as run would, suggest the change a run's refusals call for, import one from another sandbox", (*app).cmdPolicy},
		{"kube", kubeUsage, "print the Kubernetes objects of a run on the kubernetes backend (cordon run --backend kubernetes)", (*app).cmdKube},
		{"version", "version", "print cordon's version", (*app).cmdVersion},
	}
}

func main() {
	starttrace.Mark("main")
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
	case len(os.Args) > 0 && os.Args[0] == probe.FilesArg0:
		os.Exit(probe.FilesMain(os.Args[1:]))
	case len(os.Args) > 0 && os.Args[0] == canary.ProcessArg0:
		os.Exit(canary.ProcessMain())
	}
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, env: os.Environ(), uid: os.Getuid(), argv0: os.Args[0]}
	code := a.main(os.Args[1:])
	starttrace.Mark("exit")
	os.Exit(code)
}

func (a *app) main(args []string) int {
	if len(args) == 0 {
		a.usage(a.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help":
		a.usage(a.stdout)
		return 0
	case "help":
		return a.cmdHelp(args[1:])
	case "--version":
		return a.cmdVersion(nil)
	}
	c, ok := lookup(args[0])
	if !ok {
		a.errorf("unknown command %q (see cordon --help)", args[0])
		return exitUsage
	}
	return c.run(a, args[1:])
}

// lookup finds a subcommand by name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// cmdHelp is "cordon help [COMMAND]": the overview, or the command's own help, which is what
// "cordon COMMAND --help" prints (the command is asked, so the two cannot drift apart).
func (a *app) cmdHelp(args []string) int {
	switch len(args) {
	case 0:
		a.usage(a.stdout)
		return 0
	case 1:
	default:
		a.errorf("help: expected one command (usage: cordon help [COMMAND])")
		return exitUsage
	}
	c, ok := lookup(args[0])
	if !ok {
		a.errorf("unknown command %q (see cordon --help)", args[0])
		return exitUsage
	}
	return c.run(a, []string{"--help"})
}

func (a *app) usage(w *os.File) {
	fmt.Fprint(w, `cordon runs a coding agent inside a sandbox: it sees the project through a disposable workspace
and nothing else of the host, reaches only the network the policy allows, and holds no long-lived secret.

Usage:
  cordon COMMAND [flags]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.usage, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
The policy is read from --policy FILE, else $XDG_CONFIG_HOME/cordon/policy.yaml (root: /etc/cordon/policy.yaml),
else the built-in default: the workspace read-write, nothing else of the host, no network.
Exit status: the command's own; 125 when cordon fails, 126 when the command cannot be executed, 127 when
it is not found. RUN is a run's id (see cordon runs), a unique prefix of one, or last; a prefix and
last name runs of the current directory's project (its git top level), another project's run takes its
full id. Run "cordon COMMAND --help" (or cordon help COMMAND) for a command's flags.
`)
}

func (a *app) errorf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "cordon: "+format+"\n", args...)
}

// flags returns a FlagSet that prints nothing itself: parse prints its errors as one line and its
// help in --flag form.
func (a *app) flags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	_ = usage
	return fs
}

// parse parses flags; it returns false with the exit code to use when parsing ended the command:
// 0 after --help, else the usage code. That is 125 for run, whose every other status is the
// command's own (a usage status of 2 would read as the command's), as docker run does; 2 elsewhere.
func (a *app) parse(fs *flag.FlagSet, usage string, args []string) (int, bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		a.help(a.stdout, fs, usage)
		return 0, false
	}
	if err != nil {
		a.errorf("%s: %s (see cordon %s --help)", fs.Name(), flagError(err), fs.Name())
		if fs.Name() == "run" {
			return exitCordon, false
		}
		return exitUsage, false
	}
	return 0, true
}

// flagError rewords the flag package's errors, which name a flag as "-name", in the --name form
// the help shows.
func flagError(err error) string {
	msg := err.Error()
	for _, f := range []struct{ prefix, reword string }{
		{"flag provided but not defined: -", "unknown flag "},
		{"flag needs an argument: -", "flag needs an argument: "},
		{"invalid value ", ""},
		{"invalid boolean value ", ""},
	} {
		rest, ok := strings.CutPrefix(msg, f.prefix)
		if !ok {
			continue
		}
		if f.reword != "" {
			return f.reword + dashed(rest)
		}
		// invalid value "v" for flag -name: reason; invalid boolean value "v" for -name: reason
		value, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return msg
		}
		after := strings.TrimPrefix(strings.TrimPrefix(rest[len(value):], " for"), " flag")
		if name, reason, ok := strings.Cut(strings.TrimPrefix(after, " -"), ": "); ok {
			return "invalid value " + value + " for " + dashed(name) + ": " + reason
		}
	}
	return msg
}

// help prints a command's usage, summary and flags. Flags are written as --name (one letter: -n),
// a short and a long name given the same usage text share a line (-e, --env), and a placeholder in
// backquotes in the usage text names the value, as the flag package's own listing does.
func (a *app) help(w io.Writer, fs *flag.FlagSet, usage string) {
	fmt.Fprintf(w, "Usage: cordon %s\n", usage)
	if c, ok := lookup(strings.Fields(fs.Name())[0]); ok {
		fmt.Fprintf(w, "\n%s.\n", capitalize(c.summary))
	}
	flagTable(w, fs, "Flags")
}

// flagTable lists fs's flags under the title, in --flag form; nothing when it has none.
func flagTable(w io.Writer, fs *flag.FlagSet, title string) {
	type entry struct {
		names        []string
		value, text  string
		defaultValue string
		isBool       bool
	}
	var entries []*entry
	byUsage := map[string]*entry{}
	fs.VisitAll(func(f *flag.Flag) {
		// A one-letter flag and a long one with the same text are one flag by two names.
		if e := byUsage[f.Usage]; e != nil && len(e.names) == 1 && (len(f.Name) == 1) != (len(e.names[0]) == 1) {
			e.names = append(e.names, f.Name)
			return
		}
		value, text := flag.UnquoteUsage(f)
		e := &entry{names: []string{f.Name}, value: value, text: text, defaultValue: f.DefValue}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			e.isBool, e.value = true, ""
		}
		byUsage[f.Usage] = e
		entries = append(entries, e)
	})
	if len(entries) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range entries {
		// Short names first, as in -e, --env.
		slices.SortStableFunc(e.names, func(x, y string) int { return len(x) - len(y) })
		names := make([]string, len(e.names))
		for i, n := range e.names {
			names[i] = dashed(n)
		}
		flagCol := strings.Join(names, ", ")
		if e.value != "" {
			flagCol += " " + e.value
		}
		text := e.text
		if d := e.defaultValue; d != "" && d != "0" && !(e.isBool && d == "false") {
			text += fmt.Sprintf(" (default %s)", d)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", flagCol, text)
	}
	tw.Flush()
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

// cmdVersion prints the version the binary was built as: the module version ("devel" for a build
// from a work tree) and, when go build stamped it, the VCS revision and whether the tree was modified.
func (a *app) cmdVersion(args []string) int {
	fl := a.flags("version", "version")
	if code, ok := a.parse(fl, "version", args); !ok {
		return code
	}
	if fl.NArg() > 0 {
		a.errorf("version: takes no arguments (usage: cordon version)")
		return exitUsage
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(a.stdout, versionLine(info))
	return 0
}

// versionLine describes a build from its build information (nil when the binary has none).
func versionLine(info *debug.BuildInfo) string {
	if info == nil {
		return "cordon (unknown version: built without module information)"
	}
	version := info.Main.Version
	if version == "" || version == "(devel)" {
		version = "devel"
	}
	var revision, when string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var details []string
	if revision != "" {
		if len(revision) > 12 {
			revision = revision[:12]
		}
		r := "revision " + revision
		if when != "" {
			r += " of " + when
		}
		if modified {
			r += ", modified"
		}
		details = append(details, r)
	}
	if info.GoVersion != "" {
		details = append(details, "built with "+info.GoVersion)
	}
	if len(details) == 0 {
		return "cordon " + version
	}
	return "cordon " + version + " (" + strings.Join(details, "; ") + ")"
}

// capitalize upper-cases the first letter of an ASCII sentence.
func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
