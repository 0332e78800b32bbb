package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
)

// gitConfig is the throwaway project's .git/config; the host checks compare it afterwards.
const gitConfig = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"

// Options say what to verify and with what.
type Options struct {
	// LoadPolicy returns the policy to verify. It is called once the throwaway project exists,
	// with that project's path, so that it can refuse a policy the sandbox could write, as cordon
	// run does. Nil verifies the built-in default policy.
	LoadPolicy func(project string) (*policy.Policy, error)
	// Env is the caller's environment: the run's (without SSH_AUTH_SOCK, which the canary agent
	// replaces), the HOME a canary is planted in, and the values of credentials read from it.
	Env []string
	// StateDir is where the run is recorded while verify needs it (see cordon.Config.StateDir).
	StateDir string
	// Exe is the cordon binary whose probe subcommand runs inside and which serves as the canary
	// process; empty means this process's own executable.
	Exe string
	// OnWarning receives the run's warnings (see cordon.Config.OnWarning); nil drops them.
	OnWarning func(cordon.Warning)
	// Isolation is the tier to verify (see cordon.Config.Isolation); the scorecard names it.
	Isolation cordon.Isolation
}

// kernels says, per tier, what answers the probes' system calls.
var kernels = map[cordon.Isolation]string{
	cordon.IsolationNative: "the host's kernel, through cordon's seccomp filter and Landlock",
	cordon.IsolationGVisor: "gVisor's Sentry (runsc, systrap), behind cordon's seccomp filter; the host's kernel serves only runsc's own filtered calls",
}

// Run plants the canaries, runs the probes inside a sandbox with the policy, and returns the
// scorecard with the host's verdicts added. Everything it planted and the run it recorded are
// removed before it returns. Cancelling ctx stops the start or kills the sandbox; the error is then
// ctx's. An error means no scorecard: the sandbox did not start or the probes did not report.
func Run(ctx context.Context, opts Options) (probe.Scorecard, error) {
	exe, err := executable(opts.Exe)
	if err != nil {
		return probe.Scorecard{}, err
	}
	base, err := os.MkdirTemp("", "cordon-verify-")
	if err != nil {
		return probe.Scorecard{}, err
	}
	defer os.RemoveAll(base)
	project := filepath.Join(base, "project")
	if err := makeProject(project); err != nil {
		return probe.Scorecard{}, fmt.Errorf("preparing a project: %w", err)
	}
	pol := policy.Default()
	if opts.LoadPolicy != nil {
		if pol, err = opts.LoadPolicy(project); err != nil {
			return probe.Scorecard{}, err
		}
	}
	allowed, extraPorts := allowedEndpoints(pol)
	home := getenv(opts.Env, "HOME")
	writeDirs := []string{base}
	if fi, err := os.Stat(home); err == nil && fi.IsDir() {
		writeDirs = append([]string{home}, writeDirs...)
	} else {
		home = ""
	}
	set, err := canary.Plant(canary.Options{Home: home, Dir: base, Exe: exe, ExtraPorts: extraPorts, WriteDirs: writeDirs})
	if err != nil {
		return probe.Scorecard{}, err
	}
	defer set.Close()
	// The tier the run will be (Start refuses a caller's weaker one than the policy's).
	isolation := opts.Isolation
	if isolation == "" {
		isolation = cordon.Isolation(pol.Sandbox.Isolation)
	}
	coordsJSON, err := json.Marshal(coordinates(set, pol, allowed, isolation))
	if err != nil {
		return probe.Scorecard{}, err
	}

	out, err := os.Create(filepath.Join(base, "probe.out"))
	if err != nil {
		return probe.Scorecard{}, err
	}
	defer out.Close()
	errOut, err := os.Create(filepath.Join(base, "run.err"))
	if err != nil {
		return probe.Scorecard{}, err
	}
	defer errOut.Close()
	// The probes are this binary: visible read-only at its own path, nothing beside it.
	pol.Filesystem.ReadOnly = append(pol.Filesystem.ReadOnly, exe)
	if pol.Network != nil {
		pol.Network.DNS.Upstream = []netip.AddrPort{set.DNSAddr()}
	}
	env := slices.DeleteFunc(slices.Clone(opts.Env), func(kv string) bool { return strings.HasPrefix(kv, "SSH_AUTH_SOCK=") })
	run, err := cordon.Start(ctx, cordon.Config{
		Policy: pol, Workspace: project, Command: []string{exe, "probe", "--json", "--canaries", string(coordsJSON)},
		Env: append(env, set.EnvVar(), "SSH_AUTH_SOCK="+set.AgentSocket()),
		// Stdin is the null device: the probes read nothing from the caller.
		Streams:   cordon.Streams{Stdout: out, Stderr: errOut},
		StateDir:  opts.StateDir,
		OnWarning: opts.OnWarning,
		Isolation: opts.Isolation,
	})
	if err != nil {
		return probe.Scorecard{}, fmt.Errorf("the sandbox did not start: %w", err)
	}
	exit, waitErr := run.Wait(ctx)
	// The run is finished even when the wait was cut short: its record goes either way.
	finished, err := run.Finished()
	if err == nil {
		defer finished.Remove()
	} else {
		finished = nil
	}
	if waitErr != nil {
		return probe.Scorecard{}, waitErr
	}
	report, _ := os.ReadFile(out.Name())
	sc, err := probe.ReadJSON(report)
	if err != nil {
		runErr, _ := os.ReadFile(errOut.Name())
		return probe.Scorecard{}, fmt.Errorf("the probes did not report (the probe command exited %d): %w\n%s", exit.Code, err, bytes.TrimSpace(runErr))
	}
	real := credentialHashes(ctx, pol, opts.Env)
	results := hostChecks(sc.Results, hostView{project: project, run: finished, set: set, realHashes: real})
	sc = probe.NewScorecard(results)
	sc.Tier = string(run.Isolation())
	sc.Kernel = kernels[run.Isolation()]
	return sc, nil
}

// executable is exe, or this process's executable with symlinks resolved (the sandbox shows it at
// that path, read-only).
func executable(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return "", fmt.Errorf("finding cordon's own binary: %w", err)
	}
	return exe, nil
}

// makeProject creates a small git-shaped project for the run: the persistence probes plant into it.
func makeProject(dir string) error {
	for _, d := range []string{".git/hooks", ".git/objects", ".git/refs/heads"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for name, content := range map[string]string{
		".git/HEAD":   "ref: refs/heads/main\n",
		".git/config": gitConfig,
		"README":      "a throwaway project for cordon verify\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// coordinates tells the probes where the canaries are and what the policy promises: the allowed
// endpoints, the limits (and, for the tier, how the memory limit is held), and the credentials'
// placeholders and where they are injected; and what only the host knows: the tier, and which of the
// /etc secrets fs.etc-secrets looks for the host has.
func coordinates(set *canary.Set, pol *policy.Policy, allowed []probe.Endpoint, isolation cordon.Isolation) probe.Canaries {
	c := set.Coordinates()
	c.Allowed = allowed
	c.AllowNesting = pol.Sandbox.AllowNesting
	c.Tier = string(isolation)
	for _, p := range probe.EtcSecretPaths() {
		if _, err := os.Lstat(p); err == nil {
			c.EtcSecrets = append(c.EtcSecrets, p)
		}
	}
	c.Limits = &probe.Limits{MemoryBytes: int64(pol.Limits.Memory), Pids: pol.Limits.Pids, CPU: pol.Limits.CPU, OpenFiles: pol.Limits.OpenFiles,
		MemoryWholeBox: isolation == cordon.IsolationGVisor}
	for _, cr := range pol.Credentials {
		c.Placeholders = append(c.Placeholders, probe.Named{Name: cr.Name})
		if in := injectedCoords(cr, allowed); len(in.Hosts) > 0 {
			c.Injected = append(c.Injected, in)
		}
	}
	return c
}

// allowedEndpoints lists the policy's literal allowed host:port pairs, and the ports of those that
// DNS resolves (not pinned by network.hosts), on which the canary listens on loopback so that a
// name resolved to loopback would be caught.
func allowedEndpoints(pol *policy.Policy) ([]probe.Endpoint, []int) {
	if pol.Network == nil {
		return nil, nil
	}
	var eps []probe.Endpoint
	var ports []int
	for _, e := range pol.Network.Allow {
		if strings.Contains(e.Host, "*") {
			continue
		}
		ps := e.Ports
		if len(ps) == 0 {
			ps = []uint16{443}
		}
		for _, p := range ps {
			eps = append(eps, probe.Endpoint{Host: e.Host, Port: int(p)})
			if _, pinned := pol.Network.Hosts[e.Host]; !pinned {
				ports = append(ports, int(p))
			}
		}
	}
	return eps, ports
}

// injectedCoords is a credential for the cleartext probe: its placeholder's variable, where its value
// goes, and the allowed endpoints of the hosts it is bound to by name. AWS keys sign requests rather
// than travel in them, and are left out.
func injectedCoords(c policy.Credential, allowed []probe.Endpoint) probe.Injected {
	in := probe.Injected{Name: c.Name, Header: c.Inject.Header, Scheme: string(c.Inject.Scheme), Body: c.Inject.Body}
	if c.From.AWS != nil {
		return in
	}
	for _, h := range c.Inject.Hosts {
		for _, ep := range allowed {
			if ep.Host == h {
				in.Hosts = append(in.Hosts, ep)
			}
		}
	}
	return in
}

// getenv is the value of key in env, the last entry winning as with the cordon command's own
// lookups; "" when it is not set.
func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}
