// Package presets expands the names in network.presets into the hosts a tool needs, and gives the
// sandbox the same view of the tool's configuration (View): a tool inside that reads a configuration
// other than the one whose hosts were allowed falls back to a default the policy blocks. A registry's
// host is never written here: it is read from the tool's own effective configuration (npm's config in
// the workspace, go env, pip's settings and built-in default, cargo's config.toml, apt's sources), so
// private mirrors work and nothing stale is baked in. Tokens found there are handed to the run as
// credentials, never to the sandbox. Only the agents' own API hosts and GitHub's, which no tool
// configuration names, are fixed. Caches finds the tools' cache directories for filesystem.caches.
package presets

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// Source is a policy.PresetSource that asks the host's tools. Env is the environment the tools run
// with (the caller's, so that their configuration applies); Run runs a tool and returns its standard
// output (nil uses os/exec).
//
// Workspace is the project directory: tools are asked there, so that the project's own configuration
// (an .npmrc, a go.work) counts as it does when the tool runs inside. A tool is never run from a
// PATH directory inside the project (hosttool.Find): the project is what the agent writes, and
// these tools run on the host.
type Source struct {
	Env       []string
	Workspace string
	Run       func(ctx context.Context, env []string, dir, name string, args ...string) ([]byte, error)
}

var _ policy.PresetSource = Source{}

// Preset implements policy.PresetSource.
func (s Source) Preset(name string) ([]policy.Endpoint, error) {
	switch name {
	case "github":
		eps := endpoints(443, "github.com", "api.github.com", "codeload.github.com", "*.githubusercontent.com")
		return append(eps, policy.Endpoint{Host: "github.com", Ports: []uint16{22}}), nil
	case "claude", "npm", "go", "pypi", "cargo", "maven":
		// Read as for a run (View), so that what `cordon policy check` shows is what a run allows.
		v, err := s.View([]string{name})
		if err != nil {
			return nil, err
		}
		return v.Preset(name)
	case "apt":
		// apt's own reading of its sources (sources.list, sources.list.d, deb822 files, Enabled: no):
		// the URIs an update would fetch, printed without fetching.
		out, err := s.run("apt-get", "update", "--print-uris")
		if err != nil {
			return nil, fmt.Errorf("preset apt: asking apt for its sources: %w", err)
		}
		return aptEndpoints(string(out))
	}
	return nil, fmt.Errorf("unknown preset %q", name)
}

func (s Source) run(name string, args ...string) ([]byte, error) {
	return s.runIn(s.Workspace, name, args...)
}

// runIn runs a tool in dir (empty: the current directory) and returns its standard output.
func (s Source) runIn(dir, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.Run != nil {
		return s.Run(ctx, s.Env, dir, name, args...)
	}
	path, err := hosttool.Find(name, s.Env, s.Workspace)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = s.Env
	if name == "npm" {
		// Asking npm leaves nothing behind: no log file in the caller's ~/.npm, no update check.
		cmd.Env = append(append([]string{}, s.Env...), "npm_config_logs_max=0", "npm_config_update_notifier=false")
	}
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func endpoints(port uint16, hosts ...string) []policy.Endpoint {
	eps := make([]policy.Endpoint, len(hosts))
	for i, h := range hosts {
		eps[i] = policy.Endpoint{Host: h, Ports: []uint16{port}}
	}
	return eps
}

// urlEndpoints turns registry URLs into endpoints (host and port of each).
func urlEndpoints(preset string, urls []string) ([]policy.Endpoint, error) {
	var eps []policy.Endpoint
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, fmt.Errorf("preset %s: %q is not a registry URL", preset, raw)
		}
		port := uint16(443)
		if u.Scheme == "http" {
			port = 80
		}
		if p := u.Port(); p != "" {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("preset %s: %q has a bad port", preset, raw)
			}
			port = uint16(n)
		}
		eps = append(eps, policy.Endpoint{Host: strings.ToLower(u.Hostname()), Ports: []uint16{port}})
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("preset %s: the tool names no registry", preset)
	}
	return eps, nil
}

// aptEndpoints reads `apt-get update --print-uris` output ("'URI' file size hash" per line) and
// returns each host and port once. Sources apt reads from no network host (file:, cdrom:, copy:) are
// skipped; a source of another transport (mirror+, tor+) is an error rather than a guess.
func aptEndpoints(out string) ([]policy.Endpoint, error) {
	var urls []string
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		raw := strings.Trim(f[0], "'")
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("preset apt: %q is not a URI", raw)
		}
		switch u.Scheme {
		case "file", "cdrom", "copy":
			continue
		}
		key := u.Scheme + "://" + u.Host
		if !seen[key] {
			seen[key] = true
			urls = append(urls, key+"/")
		}
	}
	return urlEndpoints("apt", urls)
}

// goEndpoints reads `go env GOPROXY GOSUMDB` output: a proxy list (comma or pipe separated, with the
// keywords direct and off) and a checksum database ("name[+key] [url]", or off).
func goEndpoints(out string) ([]policy.Endpoint, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var urls []string
	if len(lines) > 0 {
		for _, p := range strings.FieldsFunc(lines[0], func(r rune) bool { return r == ',' || r == '|' }) {
			if p = strings.TrimSpace(p); p != "direct" && p != "off" && p != "" {
				urls = append(urls, p)
			}
		}
	}
	if len(lines) > 1 {
		if f := strings.Fields(lines[1]); len(f) > 0 && f[0] != "off" {
			switch {
			case len(f) > 1:
				urls = append(urls, f[1])
			default:
				// "name+key": the database is served at https://name/.
				urls = append(urls, "https://"+strings.SplitN(f[0], "+", 2)[0]+"/")
			}
		}
	}
	return urlEndpoints("go", urls)
}
