package cordon

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// cacheNames is the caches a run shows: filesystem.caches when the policy gives it, else those of
// the network presets it names (the go preset's module and build caches, npm's, pip's).
func cacheNames(pol *policy.Policy) []string {
	if pol.Filesystem.CachesSet {
		return pol.Filesystem.Caches
	}
	var names []string
	if pol.Network != nil {
		byPreset := policy.PresetCaches()
		for _, p := range pol.Network.Presets {
			if c, ok := byPreset[p]; ok {
				names = append(names, c)
			}
		}
	}
	return names
}

// cacheMounts asks the tools where their caches are and returns one overlay mount per cache that
// exists, its writable layer in the run's directory (removed when the run ends: the agent's
// downloads are of no use to anyone after it), and the variables that point the tools inside there.
func (b *builder) cacheMounts(pol *policy.Policy, project, runDir, sandboxHome string) ([]sandbox.Mount, []string, error) {
	names := cacheNames(pol)
	if len(names) == 0 {
		return nil, nil, nil
	}
	caches, err := presets.Source{Env: b.env, Workspace: project}.Caches(names)
	if err != nil {
		return nil, nil, fmt.Errorf("filesystem.caches: %w", err)
	}
	var mounts []sandbox.Mount
	var env []string
	for i, c := range caches {
		if within(c.Dir, project) || within(project, c.Dir) {
			// The workspace is the run's copy already; a cache over it (or under it) would hide it.
			b.warn.notice(fmt.Sprintf("filesystem.caches: %s's cache %s overlaps the workspace; not shown separately", c.Name, c.Dir))
			continue
		}
		layers := filepath.Join(runDir, cachesDir, fmt.Sprintf("%d-%s", i, filepath.Base(c.Dir)))
		for _, d := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(layers, d), 0o755); err != nil {
				return nil, nil, fmt.Errorf("filesystem.caches: %w", err)
			}
		}
		if real, err := filepath.EvalSymlinks(layers); err == nil {
			layers = real // cordon's own directory: its links resolved, as for the workspace's layers
		}
		o := &sandbox.Overlay{Upper: filepath.Join(layers, "upper"), Work: filepath.Join(layers, "work")}
		m := sandbox.Mount{Source: c.Dir, Overlay: o}
		if c.HomeRel != "" {
			m.Target = filepath.Join(sandboxHome, c.HomeRel)
		}
		mounts = append(mounts, m)
		if c.Env != "" {
			env = append(env, c.Env+"="+m.Path())
		}
	}
	return mounts, env, nil
}

// cachesDir holds a run's cache layers, in its directory.
const cachesDir = "caches"

// dropCacheLayers removes what the run wrote over the host's caches.
func (b *builder) dropCacheLayers(runDir string) {
	if err := runstate.RemoveAll(filepath.Join(runDir, cachesDir)); err != nil {
		b.warn.degraded(fmt.Sprintf("removing the run's cache layers: %v", err))
	}
}
