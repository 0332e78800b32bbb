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
			o, err := s.runIn(s.Workspace, "npm", "config", "get", "cache")
			if err != nil {
				return nil, fmt.Errorf("cache npm: asking npm for its cache: %w", err)
			}
			cs = []Cache{{Name: name, Dir: strings.TrimSpace(string(o)), Env: "npm_config_cache"}}
		case "pip":
			o, err := s.runIn(s.Workspace, "python3", "-m", "pip", "cache", "dir")
			if err != nil {
				return nil, fmt.Errorf("cache pip: asking pip for its cache: %w", err)
			}
			cs = []Cache{{Name: name, Dir: strings.TrimSpace(string(o)), Env: "PIP_CACHE_DIR"}}
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
