package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/probe"
	"github.com/cordon-sandbox/cordon/internal/probe/canary"
)

const verifyUsage = "verify [--policy FILE] [--json]"

// gitConfig is the throwaway project's .git/config; verify compares it afterwards.
const gitConfig = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"

// cmdVerify tests the boundary the user actually has: it plants canaries on the host, starts a real
// sandbox with the policy (through the library, as cordon run does) whose command is this binary's
// probe suite, then adds what only the host can judge (did a planted file reach the project, does the
// workspace guard flag it, did the DNS canary see a query) to one scorecard. It exits 1 when any
// probe failed, 125 when the sandbox could not be started.
func (a *app) cmdVerify(args []string) int {
	fl := a.flags("verify", verifyUsage)
	policyFlag := fl.String("policy", "", "policy `file` to verify (default: the one cordon run would use)")
	asJSON := fl.Bool("json", false, "write the scorecard as JSON")
	if code, ok := a.parse(fl, verifyUsage, args); !ok {
		return code
	}
	if fl.NArg() > 0 {
		a.errorf("verify: unexpected argument %q (usage: cordon %s)", fl.Arg(0), verifyUsage)
		return exitUsage
	}
	sc, err := a.verify(*policyFlag)
	if err != nil {
		a.errorf("verify: %v", err)
		return exitCordon
	}
	return a.writeScorecard(sc, *asJSON)
}

func (a *app) verify(policyPath string) (probe.Scorecard, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return probe.Scorecard{}, fmt.Errorf("finding cordon's own binary: %w", err)
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
	pol, err := a.loadPolicy(policyPath, project)
	if err != nil {
		return probe.Scorecard{}, err
	}
	allowed, extraPorts := allowedEndpoints(pol)
	home := a.getenv("HOME")
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
	coords := set.Coordinates()
	coords.Allowed = allowed
	coords.AllowNesting = pol.Sandbox.AllowNesting
	coords.Limits = &probe.Limits{MemoryBytes: int64(pol.Limits.Memory), Pids: pol.Limits.Pids, CPU: pol.Limits.CPU, OpenFiles: pol.Limits.OpenFiles}
	for _, c := range pol.Credentials {
		coords.Placeholders = append(coords.Placeholders, probe.Named{Name: c.Name})
		if in := injectedCoords(c, allowed); len(in.Hosts) > 0 {
			coords.Injected = append(coords.Injected, in)
		}
	}
	coordsJSON, err := json.Marshal(coords)
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
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return probe.Scorecard{}, err
	}
	defer devnull.Close()
	// The probes are this binary: visible read-only at its own path, nothing beside it.
	pol.Filesystem.ReadOnly = append(pol.Filesystem.ReadOnly, exe)
	if pol.Network != nil {
		pol.Network.DNS.Upstream = []netip.AddrPort{set.DNSAddr()}
	}
	env := slices.DeleteFunc(slices.Clone(a.env), func(kv string) bool { return strings.HasPrefix(kv, "SSH_AUTH_SOCK=") })
	run, err := cordon.Start(context.Background(), cordon.Config{
		Policy: pol, Workspace: project, Command: []string{exe, "probe", "--json", "--canaries", string(coordsJSON)},
		Env:      append(env, set.EnvVar(), "SSH_AUTH_SOCK="+set.AgentSocket()),
		Streams:  cordon.Streams{Stdin: devnull, Stdout: out, Stderr: errOut},
		StateDir: a.store().Dir,
		OnWarning: func(w cordon.Warning) {
			// What the run warned about (a limit degraded to an rlimit, a path not mounted)
			// matters to whoever reads the scorecard.
			if w.Kind == cordon.WarningDegraded {
				fmt.Fprintf(a.stderr, "cordon: %s\n", w)
			}
		},
	})
	if err != nil {
		return probe.Scorecard{}, fmt.Errorf("the sandbox did not start: %w", err)
	}
	exit, err := run.Wait(context.Background())
	if err != nil {
		return probe.Scorecard{}, err
	}
	finished, err := run.Finished()
	if err == nil {
		defer finished.Remove()
	}
	report, _ := os.ReadFile(out.Name())
	sc, err := probe.ReadJSON(report)
	if err != nil {
		runErr, _ := os.ReadFile(errOut.Name())
		return probe.Scorecard{}, fmt.Errorf("the probes did not report (the probe command exited %d): %w\n%s", exit.Code, err, bytes.TrimSpace(runErr))
	}
	results := hostChecks(sc.Results, hostView{project: project, run: finished, set: set, realHashes: a.credentialHashes(pol)})
	return probe.NewScorecard(results), nil
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

// hostView is what the host-side checks look at.
type hostView struct {
	project string
	run     *cordon.FinishedRun
	set     *canary.Set
	// realHashes are the sha256 of credentials' real values, by credential name (see credentialHashes).
	realHashes map[string]string
}

// hostChecks settles what the probes could not judge from inside.
func hostChecks(results []probe.Result, h hostView) []probe.Result {
	var risks []cordon.Risk
	var guardErr error
	if h.run == nil {
		guardErr = fmt.Errorf("the run's state was not found")
	} else {
		risks, guardErr = h.run.Risks()
	}
	out := make([]probe.Result, 0, len(results))
	for _, r := range results {
		switch {
		case r.ID == "net.dns-tunnel" && len(h.set.DNSSeen()) > 0:
			r.Status, r.Evidence = probe.Fail, "the host's DNS server received: "+strings.Join(h.set.DNSSeen(), ", ")
		case r.ID == "net.udp" && len(h.set.UDPSeen()) > 0:
			r.Status, r.Evidence = probe.Fail, "the host's UDP listener received the probe's datagram from "+strings.Join(h.set.UDPSeen(), ", ")
		case r.ID == "fs.write-outside" && len(r.Planted) > 0:
			r.Status, r.Evidence = judgeWrites(r.Planted, h.set.Nonce())
		case strings.HasPrefix(r.ID, "persist.") && len(r.Planted) > 0:
			r.Status, r.Evidence = judgePlant(r.Planted, h, risks, guardErr)
		case r.ID == "cred.placeholder" && len(r.Held) > 0:
			r.Status, r.Evidence = judgeHeld(r.Held, h.realHashes)
			r.Held = nil
		}
		out = append(out, r)
	}
	return out
}

// judgeWrites: a file the probe created that exists on the host escaped. The paths come from inside
// the sandbox, so only names the probe could have chosen are looked at (and removed).
func judgeWrites(paths []string, nonce string) (probe.Status, string) {
	var escaped []string
	for _, p := range paths {
		if filepath.Base(p) != "cordon-probe-write-"+nonce || !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return probe.Fail, fmt.Sprintf("the probe reported a write to %q, which it cannot have chosen: the report is not trustworthy", p)
		}
		if _, err := os.Lstat(p); err == nil {
			escaped = append(escaped, p)
			os.Remove(p)
		}
	}
	if len(escaped) > 0 {
		return probe.Fail, "created on the host: " + strings.Join(escaped, ", ")
	}
	return probe.Pass, "written only inside the sandbox; not on the host: " + strings.Join(paths, ", ")
}

// judgePlant: a planted file must not be in the real project, and the workspace guard must flag it
// so that apply and export refuse it.
func judgePlant(paths []string, h hostView, risks []cordon.Risk, guardErr error) (probe.Status, string) {
	var notes []string
	for _, p := range paths {
		rel, ok := strings.CutPrefix(p, h.project+"/")
		if !ok {
			return probe.Fail, p + " is outside the project: cannot be judged"
		}
		if rel == ".git/config" {
			if b, err := os.ReadFile(p); err != nil || string(b) != gitConfig {
				return probe.Fail, "the real project's .git/config changed"
			}
		} else if _, err := os.Lstat(p); err == nil {
			return probe.Fail, "reached the real project: " + p
		}
		if guardErr != nil {
			return probe.Fail, fmt.Sprintf("planted %s; the workspace guard could not be asked: %v", rel, guardErr)
		}
		i := slices.IndexFunc(risks, func(r cordon.Risk) bool { return r.Path == rel })
		if i < 0 {
			return probe.Fail, "planted " + rel + " in the workspace and the workspace guard does not flag it"
		}
		notes = append(notes, fmt.Sprintf("not in the project; the guard flags %s (%s)", rel, risks[i].Reason))
	}
	return probe.Pass, strings.Join(notes, "; ")
}

// credentialHashes maps each credential whose real value can be read without side effects (the
// caller's environment, a file) to that value's hex sha256, which stays on the host: the probe inside
// reports what it holds, and judgeHeld compares.
func (a *app) credentialHashes(pol *policy.Policy) map[string]string {
	out := map[string]string{}
	for _, c := range pol.Credentials {
		var v string
		switch {
		case c.From.Env != "":
			v = envValue(a.env, c.From.Env)
		case c.From.File != "":
			sec, err := creds.FromFile(c.From.File).Secret(context.Background())
			if err != nil {
				continue
			}
			v = sec.Reveal()
		}
		if v != "" {
			sum := sha256.Sum256([]byte(v))
			out[c.Name] = hex.EncodeToString(sum[:])
		}
	}
	return out
}

// judgeHeld fails when a credential variable inside held the real value (without showing it or its
// hash), passes when every variable whose real value is known held something else.
func judgeHeld(held, real map[string]string) (probe.Status, string) {
	var checked []string
	for name, h := range held {
		r, known := real[name]
		if !known {
			continue
		}
		if h == r {
			return probe.Fail, fmt.Sprintf("$%s held the real credential inside the sandbox, not a placeholder", name)
		}
		checked = append(checked, name)
	}
	if len(checked) == 0 {
		return probe.Skip, "the real values are not known to the host side (command, GitHub App or AWS sources)"
	}
	slices.Sort(checked)
	return probe.Pass, strings.Join(checked, ", ") + " held placeholders, not the real values"
}

// envValue is the value of key in env, the first entry winning as with os.Getenv.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
