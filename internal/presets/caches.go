package presets

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Cache is one of the host's dependency caches, as its tool names it. The sandbox shows it read-only
// with a writable layer of the run's own on top: the second build inside is as fast as outside, and
// what the agent downloads (or plants) there never reaches the host's cache.
type Cache struct {
	// Name is the cache's name in filesystem.caches (go, npm, pip, cargo, maven).
	Name string
	// Dir is the host directory.
	Dir string
	// Env is the variable that points the tool inside at Dir (GOMODCACHE, npm_config_cache...),
	// empty when the tool finds it under its home (HomeRel).
	Env string
	// HomeRel, when set, is where the cache appears relative to the sandbox user's home, instead of
	// at Dir.
	HomeRel string
}

// Caches asks each named cache's tool where it keeps it (in the workspace, with the caller's
// environment, as for the presets). A cache whose directory does not exist is left out: there is
// nothing to show. A tool that cannot say is an error, since the policy asked for its cache.
func (s Source) Caches(names []string) ([]Cache, error) {
	var out []Cache
	home := lookup(s.Env, "HOME")
	for _, name := range names {
		var cs []Cache
		switch name {
		case "go":
			if mod, build := lookup(s.Env, "GOMODCACHE"), lookup(s.Env, "GOCACHE"); filepath.IsAbs(mod) && filepath.IsAbs(build) {
				// Set in the environment, which wins over every other setting: go need not be asked.
				cs = []Cache{{Name: name, Dir: mod, Env: "GOMODCACHE"}, {Name: name, Dir: build, Env: "GOCACHE"}}
				break
			}
			o, err := s.runIn(s.Workspace, "go", "env", "GOMODCACHE", "GOCACHE")
			if err != nil {
				return nil, fmt.Errorf("cache go: asking go for GOMODCACHE and GOCACHE: %w", err)
			}
			lines := strings.Split(strings.TrimSuffix(string(o), "\n"), "\n")
			if len(lines) != 2 {
				return nil, fmt.Errorf("cache go: go env printed %d lines, want 2", len(lines))
			}
			cs = []Cache{{Name: name, Dir: lines[0], Env: "GOMODCACHE"}, {Name: name, Dir: lines[1], Env: "GOCACHE"}}
		case "npm":
			// npm's own order, without starting node (a third of a second): npm_config_cache, the
			// user's npmrc, else ~/.npm (never the project's, which the repository writes).
			cs = []Cache{{Name: name, Dir: s.npmCacheDir(), Env: "npm_config_cache"}}
		case "pip":
			// pip's: PIP_CACHE_DIR, else the XDG cache directory.
			dir := lookup(s.Env, "PIP_CACHE_DIR")
			if dir == "" {
				xdg := lookup(s.Env, "XDG_CACHE_HOME")
				if xdg == "" && home != "" {
					xdg = filepath.Join(home, ".cache")
				}
				dir = filepath.Join(xdg, "pip")
			}
			cs = []Cache{{Name: name, Dir: dir, Env: "PIP_CACHE_DIR"}}
		case "cargo":
			// The registry's index and crates, never the rest of CARGO_HOME (credentials.toml).
			root := lookup(s.Env, "CARGO_HOME")
			if root == "" && home != "" {
				root = filepath.Join(home, ".cargo")
			}
			if root != "" {
				cs = []Cache{{Name: name, Dir: filepath.Join(root, "registry"), HomeRel: ".cargo/registry"}, {Name: name, Dir: filepath.Join(root, "git"), HomeRel: ".cargo/git"}}
			}
		case "maven":
			// The local repository (never settings.xml, which holds server passwords).
			if home != "" {
				cs = []Cache{{Name: name, Dir: filepath.Join(home, ".m2", "repository"), HomeRel: ".m2/repository"}}
			}
		default:
			return nil, fmt.Errorf("unknown cache %q", name)
		}
		for _, c := range cs {
			if !filepath.IsAbs(c.Dir) {
				return nil, fmt.Errorf("cache %s: %q is not an absolute directory", name, c.Dir)
			}
			real, err := filepath.EvalSymlinks(c.Dir)
			if err != nil {
				continue
			}
			if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
				continue
			}
			c.Dir = real
			out = append(out, c)
		}
	}
	return out, nil
}

// npmCacheDir is where npm keeps its cache for this caller: npm_config_cache (any case), a cache=
// line of the user's npmrc (environment references expanded), else ~/.npm.
func (s Source) npmCacheDir() string {
	for _, kv := range s.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, "npm_config_cache") && v != "" {
			return v
		}
	}
	home := lookup(s.Env, "HOME")
	user := lookup(s.Env, "npm_config_userconfig")
	if user == "" && home != "" {
		user = filepath.Join(home, ".npmrc")
	}
	// Not the project's .npmrc: its cache= would name the host directory shown to the sandbox (a
	// repository's cache=${HOME} would show the whole home).
	for _, f := range []string{user} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "cache" {
				v = expandNpm(strings.Trim(strings.TrimSpace(v), `"'`), s.Env)
				if rest, ok := strings.CutPrefix(v, "~/"); ok && home != "" {
					v = filepath.Join(home, rest)
				}
				return v
			}
		}
	}
	return filepath.Join(home, ".npm")
}
