package presets

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// goVars are the settings that decide where go fetches modules and checks their sums; the sandbox gets
// the caller's values (from its environment or its go env file, which the sandbox's empty home lacks).
var goVars = []string{"GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOINSECURE"}

// goView asks `go env` in the workspace for the proxy, checksum database and private-module settings,
// passes them into the sandbox, and shows GOROOT read-only when the sandbox would not (a go under the
// home directory).
func (s Source) goView(v *View) ([]policy.Endpoint, error) {
	out, err := s.runIn(s.Workspace, "go", append([]string{"env"}, append(goVars, "GOROOT")...)...)
	if err != nil {
		return nil, fmt.Errorf("preset go: asking go for its settings: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) < len(goVars)+1 {
		return nil, fmt.Errorf("preset go: go env printed %d lines, want %d", len(lines), len(goVars)+1)
	}
	eps, err := goEndpoints(lines[0] + "\n" + lines[1])
	if err != nil {
		return nil, err
	}
	for i, name := range goVars {
		val := lines[i]
		if name == "GOPROXY" {
			if val, err = s.stripUserinfo(v, "go", val); err != nil {
				return nil, err
			}
		}
		if val != "" {
			v.setEnv(name, val)
		}
	}
	if goroot := lines[len(goVars)]; filepath.IsAbs(goroot) {
		v.showToolchain(goroot, "bin")
	}
	return eps, nil
}

// stripUserinfo takes the user:password of each URL in a list (GOPROXY's, separated by , or |) and
// makes the password a token sent as Basic to that host: the value inside keeps the user name and has
// the token's reference where the password was.
func (s Source) stripUserinfo(v *View, preset, list string) (string, error) {
	var b strings.Builder
	start := 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) && list[i] != ',' && list[i] != '|' && list[i] != ' ' {
			continue
		}
		part := list[start:i]
		if u, err := url.Parse(part); err == nil && u.User != nil && u.Hostname() != "" {
			pass, _ := u.User.Password()
			// Messages name the URL without its user part: a user name alone is often the token itself
			// (https://TOKEN@host/), which Redacted would print.
			shown := *u
			shown.User = nil
			if pass == "" {
				return "", fmt.Errorf("preset %s: %s names a user without a password; give the registry's token as a credential", preset, shown.String())
			}
			name := tokenName(preset, len(v.Tokens)+1)
			v.Tokens = append(v.Tokens, Token{Name: name, Host: strings.ToLower(u.Hostname()), Value: pass, Scheme: "basic", From: shown.String()})
			u.User = url.UserPassword(u.User.Username(), "PLACEHOLDER")
			part = strings.Replace(u.String(), "PLACEHOLDER", Ref(name), 1)
		}
		b.WriteString(part)
		if i < len(list) {
			b.WriteByte(list[i])
		}
		start = i + 1
	}
	return b.String(), nil
}

// pipViewScript prints pip's effective index settings ("index-url URL", "extra-index-url URL"), or its
// built-in index and file host ("default URL") when none is set. Its first line takes the working
// directory (the workspace, which the sandbox writes) off sys.path, where python -c put it first:
// otherwise a pip package planted there would be what the host imports and runs.
const pipViewScript = `
import os, sys; sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
from pip._internal.configuration import Configuration
from pip._internal.models.index import PyPI
c = Configuration(isolated=False); c.load()
out = []
for k, v in c.items():
    for name in ("extra-index-url", "index-url"):
        if k.endswith("." + name):
            out += [name + " " + u for u in v.split()]
            break
if not out:
    out = ["default " + PyPI.url, "default https://" + PyPI.file_storage_domain + "/"]
print("\n".join(out))
`

// pipView asks pip (the python3 first on PATH outside the project, run in the workspace with the
// workspace taken off its import path) for its index settings and
// passes them into the sandbox as PIP_INDEX_URL and PIP_EXTRA_INDEX_URL, a password in a URL replaced
// by a token's reference; pyenv's and uv's pythons under the home are shown read-only.
func (s Source) pipView(v *View) ([]policy.Endpoint, error) {
	out, err := s.runIn(s.Workspace, "python3", "-c", pipViewScript)
	if err != nil {
		return nil, fmt.Errorf("preset pypi: asking pip for its index: %w", err)
	}
	var urls, index, extra []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		kind, u, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		urls = append(urls, u)
		switch kind {
		case "index-url":
			index = append(index, u)
		case "extra-index-url":
			extra = append(extra, u)
		}
	}
	eps, err := urlEndpoints("pypi", urls)
	if err != nil {
		return nil, err
	}
	for _, e := range []struct {
		name string
		list []string
	}{{"PIP_INDEX_URL", index}, {"PIP_EXTRA_INDEX_URL", extra}} {
		name, list := e.name, e.list
		if len(list) == 0 {
			continue
		}
		val, err := s.stripUserinfo(v, "pypi", strings.Join(list, " "))
		if err != nil {
			return nil, err
		}
		v.setEnv(name, val)
	}
	home := lookup(s.Env, "HOME")
	if root := lookup(s.Env, "PYENV_ROOT"); root != "" {
		v.showToolchain(root, "shims", "bin")
		v.setEnv("PYENV_ROOT", root)
	} else if home != "" {
		if root := filepath.Join(home, ".pyenv"); v.hasDir(root) {
			v.showToolchain(root, "shims", "bin")
			v.setEnv("PYENV_ROOT", root)
		}
	}
	if home != "" {
		v.showToolchain(filepath.Join(home, ".local", "share", "uv", "python"))
	}
	return eps, nil
}
