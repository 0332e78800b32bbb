package cordon

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandboxenv"
	"github.com/cordon-sandbox/cordon/internal/workspace"
	"golang.org/x/term"
)

func (b *builder) createRun(meta runstate.Meta) (*runstate.Run, error) {
	var err error
	if meta.PID, meta.PIDStart, err = runstate.Self(); err != nil {
		return nil, err
	}
	return b.store.CreateLazy(meta)
}

// policyRef is what the run's record says about its policy: the file and the hash of the bytes read,
// or an empty reference for the built-in default.
func policyRef(pol *policy.Policy) *runstate.PolicyRef {
	if pol.Source == policy.BuiltinSource || pol.SourceSHA256 == "" {
		return &runstate.PolicyRef{}
	}
	return &runstate.PolicyRef{Path: pol.Source, SHA256: pol.SourceSHA256}
}

// notice prints the workspace's one-line note (a copy instead of an overlay, no disk limit), if any.
func (b *builder) notice(run *runstate.Run) {
	if info, err := workspace.LoadInfo(run); err == nil && info.Note != "" {
		b.warn.degraded("workspace: " + info.Note)
	}
}

// dropRun removes a run whose command never started: it has nothing to review.
func (b *builder) dropRun(run *runstate.Run) {
	workspace.Release(run)
	if err := runstate.RemoveAll(run.Dir); err != nil {
		b.warn.degraded(fmt.Sprintf("removing the unused run directory %s: %v", run.Dir, err))
	}
}

// stateBudget shares limits.disk between the run's layers and its audit log, so that the run's state
// as a whole stays under it; without the limit it still bounds the log.
func stateBudget(pol *policy.Policy) (runstate.Budget, error) {
	return runstate.NewBudget(int64(pol.Limits.Disk), audit.DefaultMaxBytes)
}

// auditMaxBytes is the audit log's cap: its share of the budget, which buildSpec has checked.
func auditMaxBytes(pol *policy.Policy) int64 {
	b, err := stateBudget(pol)
	if err != nil {
		return audit.DefaultMaxBytes
	}
	return b.AuditLog
}

// buildSpec turns the policy into the sandbox's declarative spec.
func (b *builder) buildSpec(ctx context.Context, pol *policy.Policy, project string, argv []string, run *runstate.Run, id sandbox.User, view *presets.View, credSet *creds.Set) (*sandbox.Spec, error) {
	budget, err := stateBudget(pol)
	if err != nil {
		return nil, err
	}
	ws, err := workspace.PrepareWith(run, project, workspace.PrepareOptions{DiskBytes: budget.Layers, Lazy: true})
	if err != nil {
		return nil, fmt.Errorf("preparing the workspace: %w", err)
	}
	b.notice(run)
	spec := &sandbox.Spec{
		Args:         argv,
		Dir:          project,
		Hostname:     cmp.Or(pol.Sandbox.Hostname, policy.DefaultHostname),
		Workspace:    ws,
		AllowNesting: pol.Sandbox.AllowNesting,
		Limits: sandbox.Limits{
			MemoryBytes: int64(pol.Limits.Memory),
			Pids:        pol.Limits.Pids,
			CPU:         pol.Limits.CPU,
			OpenFiles:   pol.Limits.OpenFiles,
			Timeout:     pol.Limits.Timeout,
		},
	}
	if wd, err := os.Getwd(); err == nil {
		if real, err := filepath.EvalSymlinks(wd); err == nil && within(real, project) {
			spec.Dir = real
		}
	}
	if pol.Sandbox.Workdir != "" {
		if spec.Dir, err = workdir(project, pol.Sandbox.Workdir); err != nil {
			return nil, err
		}
	}
	for _, p := range pol.Filesystem.ReadOnly {
		spec.Mounts = append(spec.Mounts, b.mount(p, pol.Filesystem.Targets[p], false, id.Home)...)
	}
	for _, p := range pol.Filesystem.ReadWrite {
		spec.Mounts = append(spec.Mounts, b.mount(p, pol.Filesystem.Targets[p], true, id.Home)...)
	}
	var presetEnv []string
	var presetFiles []presets.File
	if view != nil {
		// Toolchains the presets show, read-only like filesystem.readonly.
		for _, d := range view.ReadOnly {
			spec.Mounts = append(spec.Mounts, b.mount(d, "", false, id.Home)...)
		}
		presetEnv, presetFiles = view.Render(placeholders(credSet))
	}
	// The host's dependency caches, read-only under a layer of the run's own.
	caches, cacheEnv, err := b.cacheMounts(pol, project, run.Dir, id.Home)
	if err != nil {
		return nil, err
	}
	spec.Mounts = append(spec.Mounts, caches...)
	presetEnv = append(presetEnv, cacheEnv...)
	if err := b.checkMounts(spec.Mounts, project); err != nil {
		return nil, err
	}
	b.warnCredentialMounts(spec.Mounts)
	if spec.Masks, err = denyMasks(project, pol.Filesystem.Deny); err != nil {
		return nil, err
	}
	secrets, err := b.secretMasks(ctx, project, pol.Filesystem.Secrets, run.Dir)
	if err != nil {
		return nil, err
	}
	spec.Masks = append(spec.Masks, secrets...)
	// The tools' configuration files, auth lines removed, after the policy's mounts were checked: a
	// project's .npmrc is replaced in the workspace by its sanitized copy (instead of the secret scan's
	// empty mask, which would lose its registry settings).
	files, err := writePresetFiles(run.Dir, presetFiles, id.Home)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		spec.Mounts = append(spec.Mounts, f.mount)
		if f.replaces != "" {
			spec.Masks = slices.DeleteFunc(spec.Masks, func(m string) bool { return m == f.replaces })
			b.warn.notice(fmt.Sprintf("presets: %s is shown without its auth lines; its tokens go to their registries from the gateway", f.replaces))
		}
	}
	var pathDirs []string
	if view != nil {
		pathDirs = view.PathDirs
	}
	env, warnings := sandboxenv.BuildWith(b.env, pol.Env, sandboxenv.Identity{User: id.Name, Home: id.Home, TTY: term.IsTerminal(int(b.stdin.Fd()))},
		sandboxenv.Options{Presets: presetEnv, PathDirs: pathDirs, Shown: func(dir string) bool { return shownInside(spec, dir) }})
	for _, w := range warnings {
		b.warn.degraded(strings.TrimPrefix(w, "cordon: warning: "))
	}
	spec.Env = env
	b.warnSecretValues(env, pol.Env)
	// Code that git runs on the host later is never writable from inside, even without the overlay.
	for _, p := range []string{".git/hooks", ".git/config"} {
		if _, err := os.Lstat(filepath.Join(project, p)); err == nil {
			spec.ReadOnly = append(spec.ReadOnly, filepath.Join(project, p))
		}
	}
	return spec, nil
}

// placeholders maps each credential's name to the placeholder the agent holds for it.
func placeholders(set *creds.Set) map[string]string {
	m := map[string]string{}
	if set == nil {
		return m
	}
	for _, kv := range set.Env() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// presetFile is a generated configuration file in the run's directory and where the sandbox sees it.
type presetFile struct {
	mount    sandbox.Mount
	replaces string
}

// writePresetFiles writes the presets' files into the run's directory (readable by the sandbox's
// user: they hold placeholders, never a value) and returns their mounts, read-only.
func writePresetFiles(runDir string, files []presets.File, home string) ([]presetFile, error) {
	if len(files) == 0 {
		return nil, nil
	}
	dir := filepath.Join(runDir, "presets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("preset files: %w", err)
	}
	// cordon's own directory, which no agent can write: its links (a state root under a linked
	// home) are resolved here, as the backend opens mounts without following any.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	out := make([]presetFile, 0, len(files))
	for i, f := range files {
		target := f.Path
		if f.HomeRel != "" {
			target = filepath.Join(home, f.HomeRel)
		}
		src := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(target)))
		if err := os.WriteFile(src, f.Content, 0o644); err != nil {
			return nil, fmt.Errorf("preset files: %w", err)
		}
		out = append(out, presetFile{mount: sandbox.Mount{Source: src, Target: target}, replaces: f.Replaces})
	}
	return out, nil
}

// checkMounts refuses policy paths that would undo another boundary: a writable path inside the
// project (the agent's writes would reach the project directly, past the review and the persistence
// guard) and any path overlapping cordon's state (other runs' changes, audit logs, the run's own
// layers).
func (b *builder) checkMounts(mounts []sandbox.Mount, project string) error {
	state := b.store.Root
	if real, err := filepath.EvalSymlinks(state); err == nil {
		state = real
	}
	for _, m := range mounts {
		if within(m.Source, state) || within(state, m.Source) {
			return fmt.Errorf("filesystem: %s overlaps cordon's state directory %s; the agent must not see other runs or its own layers", m.Source, state)
		}
		if m.Writable && within(m.Source, project) {
			return fmt.Errorf("filesystem.readwrite: %s is inside the workspace, whose changes go through review; remove it from the policy", m.Source)
		}
		if m.Target != "" && (within(m.Target, project) || within(project, m.Target)) {
			return fmt.Errorf("filesystem: %s would appear at %s, over the workspace, whose view is the run's own copy", m.Source, m.Target)
		}
	}
	return nil
}

// mount resolves a policy path on the host. A path that does not exist is skipped with a warning:
// there is nothing to expose. The path appears inside where it is on the host; one under the caller's
// home appears under the sandbox user's home (sandboxHome) as well when the two differ, as they do for
// a root caller, so that ~/.cargo in the policy is ~/.cargo for the agent too, while absolute paths
// (a PATH entry, a command named by its path) keep working.
//
// A target (filesystem.Targets) puts it there instead, and only there.
func (b *builder) mount(p, target string, writable bool, sandboxHome string) []sandbox.Mount {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		b.warn.degraded(fmt.Sprintf("filesystem: %s is not mounted: %v", p, err))
		return nil
	}
	if target != "" {
		return []sandbox.Mount{{Source: real, Target: target, Writable: writable}}
	}
	mounts := []sandbox.Mount{{Source: real, Writable: writable}}
	home := b.home
	if realHome, err := filepath.EvalSymlinks(home); err == nil && home != "" && realHome != sandboxHome {
		if rel, err := filepath.Rel(realHome, real); err == nil && rel != "." && filepath.IsLocal(rel) {
			mounts = append(mounts, sandbox.Mount{Source: real, Target: filepath.Join(sandboxHome, rel), Writable: writable})
		}
	}
	return mounts
}

// workdir resolves sandbox.workdir against the workspace: a directory that, links followed, is
// inside it (the sandbox shows the workspace at its own path, so the host path is the inside one).
func workdir(project, rel string) (string, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(project, rel))
	if err != nil {
		return "", fmt.Errorf("sandbox.workdir: %w", err)
	}
	if !within(real, project) {
		return "", fmt.Errorf("sandbox.workdir: %s leads to %s, outside the workspace %s", rel, real, project)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("sandbox.workdir: %s is not a directory", real)
	}
	return real, nil
}

// maskTarget is what hiding the workspace path p takes: p itself when it is a file or directory; for
// a symlink, its target when that lies in the workspace (a symlink is never mounted over, and one
// pointing outside leads where the sandbox sees only what the policy mounts); nothing for a pipe or
// socket, which holds no content to read.
func maskTarget(project, p string) (string, bool) {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return "", false
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := filepath.EvalSymlinks(p)
		if err != nil || !within(t, project) {
			return "", false
		}
		if fi, err := os.Stat(t); err != nil || !fi.Mode().IsRegular() && !fi.IsDir() {
			return "", false
		}
		return t, true
	case fi.Mode().IsRegular() || fi.IsDir():
		return p, true
	}
	return "", false
}

// denyMasks walks the workspace for paths that filesystem.deny hides. A matching symlink is followed
// to what it names inside the workspace, which is masked too, so a link cannot carry a denied file's
// content under another name.
func denyMasks(project string, globs []string) ([]string, error) {
	if len(globs) == 0 {
		return nil, nil
	}
	m, err := policy.CompileDeny(globs)
	if err != nil {
		return nil, fmt.Errorf("filesystem.deny: %w", err)
	}
	var masks []string
	err = filepath.WalkDir(project, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == project {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, project+"/"))
		if !m.Match(rel, d.IsDir()) {
			return nil
		}
		if t, ok := maskTarget(project, p); ok {
			masks = append(masks, t)
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("filesystem.deny: scanning the workspace: %w", err)
	}
	return masks, nil
}
