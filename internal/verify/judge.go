package verify

import (
	"context"
	"errors"
	"fmt"
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

// errNoRun is the workspace guard's answer when the run's record could not be opened.
var errNoRun = errors.New("the run's state was not found")

// hostView is what the host-side checks look at.
type hostView struct {
	project string
	// run is the finished run, nil when its record could not be opened.
	run *cordon.FinishedRun
	set *canary.Set
	// realHashes are the sha256 of credentials' real values, by credential name (see credentialHashes).
	realHashes map[string]string
}

// hostChecks settles what the probes could not judge from inside.
func hostChecks(results []probe.Result, h hostView) []probe.Result {
	var risks []cordon.Risk
	guardErr := errNoRun
	if h.run != nil {
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
			r.Status, r.Evidence = judgePlant(r.Planted, h.project, risks, guardErr)
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

// judgePlant: a file planted in the workspace must not be in the real project, and the workspace
// guard must flag it so that apply and export refuse it.
func judgePlant(paths []string, project string, risks []cordon.Risk, guardErr error) (probe.Status, string) {
	var notes []string
	for _, p := range paths {
		rel, ok := strings.CutPrefix(p, project+"/")
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
// reports what it holds, and judgeHeld compares. The values are read through the same sources the
// run reads them with, so that a variable set twice in env is judged by the value the run injects.
func credentialHashes(ctx context.Context, pol *policy.Policy, env []string) map[string]string {
	out := map[string]string{}
	for _, c := range pol.Credentials {
		var src creds.Source
		switch {
		case c.From.Env != "":
			src = creds.FromEnv(env, c.From.Env)
		case c.From.File != "":
			src = creds.FromFile(c.From.File)
		default:
			continue // a command or a token minted: reading it again would have effects
		}
		sec, err := src.Secret(ctx)
		if err != nil {
			continue
		}
		if v := sec.Reveal(); v != "" {
			out[c.Name] = probe.Sum([]byte(v))
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
