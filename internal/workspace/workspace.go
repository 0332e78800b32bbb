// Package workspace gives an agent a copy-on-write view of a project and carries the result back
// under the user's control. The agent never writes to the project: Prepare makes an overlayfs view
// whose lower layer is the project and whose upper layer lives in the run's directory (or, where
// overlayfs in a user namespace is unavailable, a copy). Afterwards Changes reads what the agent did
// from the upper layer alone, Diff shows it, Guard flags changes that would run code on the host
// later (git hooks and config, editor tasks, direnv, agent settings, new executables, device
// files), Apply carries the changes into the project all-or-nothing with a journal and refuses when
// the user changed the same files meanwhile, and Export commits them on a new branch instead.
//
// Everything after Prepare costs in proportion to what the agent changed, never to the size of the
// project: the upper layer is the record of the run.
//
// A run whose agent worked elsewhere (a pod, on a clone of the repository) is recorded by
// PreparePatch instead: its record is the git patch of its changes (patch.go), which Changes and
// Diff read alone and which Guard, Apply and Export first materialise against the project, each
// file's old side checked by blob id (patchmat.go), so that they run unchanged on it.
package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Workspace modes, recorded in the run's workspace.json.
const (
	ModeOverlay = "overlay" // upper/ is an overlayfs upper layer over the project
	ModeCopy    = "copy"    // upper/ is a full copy of the project, manifest.json says what it was
)

const (
	infoFile     = "workspace.json"
	manifestFile = "manifest.json"
	upperDir     = "upper"
	workDir      = "work"
)

// Info is what Prepare recorded about a run's workspace; later steps read it instead of guessing.
type Info struct {
	Mode    string `json:"mode"`
	Project string `json:"project"`
	// Base is the file-system clock when the workspace was made: a project file whose ctime or mtime
	// is not before Base (less Slack) was changed by the host after the run started.
	Base time.Time `json:"base"`
	// Slack widens the comparison on file systems with coarse timestamps.
	Slack time.Duration `json:"slack"`
	// Note says, in one line, how the workspace differs from the ideal (copy instead of overlay, no
	// disk limit); empty when it does not. The CLI prints it.
	Note string `json:"note,omitempty"`
	// DiskBytes is the enforced cap on what the run can write, 0 for none.
	DiskBytes int64 `json:"disk_bytes,omitempty"`

	// Repo, Ref and BaseCommit are a patch run's (ModePatch): the repository the agent's clone was
	// made from, the ref it was asked for, and the full id of the commit changes.patch is against.
	Repo       string `json:"repo,omitempty"`
	Ref        string `json:"ref,omitempty"`
	BaseCommit string `json:"base_commit,omitempty"`
}

// PrepareOptions adjusts Prepare.
type PrepareOptions struct {
	// ForceCopy skips overlayfs and copies the project (for tests; the CLI uses FallbackToCopy when
	// the sandbox reports that it could not mount the overlay).
	ForceCopy bool
	// DiskBytes caps what the run may write (limits.disk); see disk.go for how and when it holds.
	DiskBytes int64
	// Lazy leaves workspace.json to the disk's own pace, for a run made with runstate's CreateLazy:
	// the caller makes it durable with the run's Sync, off the path that starts the agent.
	Lazy bool
}

// Prepare makes the copy-on-write workspace for run over project with default options.
func Prepare(run *runstate.Run, project string) (sandbox.Workspace, error) {
	return PrepareWith(run, project, PrepareOptions{})
}

// PrepareWith makes the workspace. With overlayfs its cost does not depend on the project's size: it
// creates two empty directories and takes the base time. Whether the kernel mounts the overlay is
// learned by mounting it: the sandbox reports a failure, and the caller then calls FallbackToCopy,
// so the common case pays for no separate probe.
func PrepareWith(run *runstate.Run, project string, opts PrepareOptions) (sandbox.Workspace, error) {
	project, err := cleanProject(run, project)
	if err != nil {
		return sandbox.Workspace{}, err
	}
	if _, err := os.Lstat(filepath.Join(run.Dir, infoFile)); err == nil {
		return sandbox.Workspace{}, fmt.Errorf("workspace: run %s already has a workspace", run.Meta.ID)
	}
	info := Info{Project: project, DiskBytes: opts.DiskBytes}
	var notes []string
	if opts.DiskBytes > 0 {
		note, err := setupDisk(run, opts.DiskBytes)
		if err != nil {
			return sandbox.Workspace{}, err
		}
		if note != "" {
			notes = append(notes, note)
			info.DiskBytes = 0
		}
	}
	upper, work := filepath.Join(run.Dir, upperDir), filepath.Join(run.Dir, workDir)
	if info.DiskBytes > 0 {
		// upper and work are symlinks into the mounted image; hand the sandbox the real paths.
		if upper, err = filepath.EvalSymlinks(upper); err == nil {
			work, err = filepath.EvalSymlinks(work)
		}
		if err != nil {
			return sandbox.Workspace{}, fmt.Errorf("workspace: %w", err)
		}
	} else {
		if err := os.Mkdir(work, 0o700); err != nil {
			return sandbox.Workspace{}, fmt.Errorf("workspace: %w", err)
		}
		if err := os.Mkdir(upper, 0o700); err != nil {
			return sandbox.Workspace{}, fmt.Errorf("workspace: %w", err)
		}
	}
	// The upper directory becomes the root of the merged view, so it takes the project's mode.
	pfi, err := os.Stat(project)
	if err != nil {
		return sandbox.Workspace{}, fmt.Errorf("workspace: %w", err)
	}
	if err := os.Chmod(upper, pfi.Mode().Perm()); err != nil {
		return sandbox.Workspace{}, fmt.Errorf("workspace: %w", err)
	}
	base, slack, err := stampBase(run.Dir, pfi)
	if err != nil {
		return sandbox.Workspace{}, err
	}
	info.Base, info.Slack = base, slack

	ws := sandbox.Workspace{Path: project, Source: project}
	if opts.ForceCopy {
		how, err := copyProject(run.Dir, project, upper)
		if err != nil {
			return sandbox.Workspace{}, err
		}
		info.Mode = ModeCopy
		ws.Source = upper
		notes = append([]string{fmt.Sprintf("copy requested: the workspace is a %s of the project", how)}, notes...)
	} else {
		info.Mode = ModeOverlay
		ws.Overlay = &sandbox.Overlay{Upper: upper, Work: work}
	}
	info.Note = strings.Join(notes, "; ")
	write := runstate.WriteFileAtomic
	if opts.Lazy {
		write = runstate.WriteFileAtomicLazy
	}
	if err := writeInfoWith(run, &info, write); err != nil {
		return sandbox.Workspace{}, err
	}
	return ws, nil
}

// FallbackToCopy turns a prepared overlay workspace into a copy of the project, for hosts where the
// sandbox could not mount overlayfs in its user namespace (an old kernel, a file system overlayfs
// refuses). why is the sandbox's reason; it goes into the one-line note the user sees.
func FallbackToCopy(run *runstate.Run, why error) (sandbox.Workspace, error) {
	info, err := LoadInfo(run)
	if err != nil {
		return sandbox.Workspace{}, err
	}
	if info.Mode != ModeOverlay {
		return sandbox.Workspace{}, fmt.Errorf("workspace: run %s is already a copy", run.Meta.ID)
	}
	upper := filepath.Join(run.Dir, upperDir)
	if real, err := filepath.EvalSymlinks(upper); err == nil {
		upper = real
	}
	if cs, err := Changes(run); err == nil && len(cs) > 0 {
		return sandbox.Workspace{}, fmt.Errorf("workspace: run %s already has changes; refusing to copy over them", run.Meta.ID)
	}
	how, err := copyProject(run.Dir, info.Project, upper)
	if err != nil {
		return sandbox.Workspace{}, err
	}
	info.Mode = ModeCopy
	note := fmt.Sprintf("overlayfs in a user namespace unavailable (%v): the workspace is a %s of the project", why, how)
	if info.Note != "" {
		note += "; " + info.Note
	}
	info.Note = note
	if err := writeInfo(run, info); err != nil {
		return sandbox.Workspace{}, err
	}
	return sandbox.Workspace{Path: info.Project, Source: upper}, nil
}

func writeInfo(run *runstate.Run, info *Info) error {
	return writeInfoWith(run, info, runstate.WriteFileAtomic)
}

func writeInfoWith(run *runstate.Run, info *Info, write func(string, []byte, fs.FileMode) error) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := write(filepath.Join(run.Dir, infoFile), b, 0o600); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// cleanProject resolves project to the absolute, symlink-free directory the sandbox will mount, and
// refuses layouts where the agent could see or write the run's own state.
func cleanProject(run *runstate.Run, project string) (string, error) {
	abs, err := filepath.Abs(project)
	if err != nil {
		return "", fmt.Errorf("workspace: project %q: %w", project, err)
	}
	abs, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace: project %q: %w", project, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("workspace: project: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace: project %s is not a directory", abs)
	}
	if abs == "/" {
		return "", errors.New("workspace: refusing / as a project")
	}
	runDir, err := filepath.EvalSymlinks(run.Dir)
	if err != nil {
		return "", fmt.Errorf("workspace: run directory: %w", err)
	}
	if within(abs, runDir) || within(runDir, abs) {
		return "", fmt.Errorf("workspace: the project %s and cordon's run directory %s overlap; the agent would see cordon's state", abs, runDir)
	}
	if run.Meta.Project != "" && filepath.Clean(run.Meta.Project) != abs && filepath.Clean(run.Meta.Project) != filepath.Clean(project) {
		return "", fmt.Errorf("workspace: run %s is for project %s, not %s", run.Meta.ID, run.Meta.Project, abs)
	}
	return abs, nil
}

// within says whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// stampBase takes the file-system clock (which lags the wall clock by up to a tick) from a file it
// creates, so that "changed after the run started" compares like with like. On file systems that
// store whole seconds (the project root's timestamps have no nanoseconds) it allows two seconds of
// slack: a false conflict is better than a missed one.
func stampBase(runDir string, project fs.FileInfo) (time.Time, time.Duration, error) {
	p := filepath.Join(runDir, "base.stamp")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return time.Time{}, 0, fmt.Errorf("workspace: base time: %w", err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("workspace: base time: %w", err)
	}
	base := changeTime(fi)
	var slack time.Duration
	if st, ok := project.Sys().(*syscall.Stat_t); ok && whole(statTimes(st)) {
		slack = 2 * time.Second
	}
	return base, slack, nil
}

// whole reports times with no fraction of a second: a file system that keeps whole seconds.
func whole(mtime, ctime int64, _ uint64) bool { return mtime%1e9 == 0 && ctime%1e9 == 0 }

// changeTime is the later of a file's mtime and ctime. ctime cannot be set back by a program, mtime
// can be set forward; either one moving means the file changed.
func changeTime(fi fs.FileInfo) time.Time {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi.ModTime()
	}
	_, ctime, _ := statTimes(st)
	c := time.Unix(0, ctime)
	if m := fi.ModTime(); m.After(c) {
		return m
	}
	return c
}

// LoadInfo reads what Prepare recorded about run's workspace.
func LoadInfo(run *runstate.Run) (*Info, error) {
	b, err := os.ReadFile(filepath.Join(run.Dir, infoFile))
	if err != nil {
		return nil, fmt.Errorf("workspace: run %s has no workspace: %w", run.Meta.ID, err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("workspace: run %s: %s: %w", run.Meta.ID, infoFile, err)
	}
	switch info.Mode {
	case ModeOverlay, ModeCopy:
	case ModePatch:
		if !fullOID(info.BaseCommit) {
			return nil, fmt.Errorf("workspace: patch run %s: base commit %q is not a full commit id", run.Meta.ID, info.BaseCommit)
		}
	default:
		return nil, fmt.Errorf("workspace: run %s: unknown workspace mode %q", run.Meta.ID, info.Mode)
	}
	if !filepath.IsAbs(info.Project) {
		return nil, fmt.Errorf("workspace: run %s: project %q is not absolute", run.Meta.ID, info.Project)
	}
	return &info, nil
}

// OverlayOptions is the mount data for the workspace's overlay as the sandbox mounts it inside its
// user namespace, with the separators overlayfs parses escaped in the paths.
func OverlayOptions(lower, upper, work string) string {
	esc := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return "lowerdir=" + esc.Replace(lower) + ",upperdir=" + esc.Replace(upper) + ",workdir=" + esc.Replace(work) + ",userxattr"
}

// Discard throws the run's changes away: the layers are removed at once (they can be large); the
// run directory and its metadata stay, marked discarded, until gc. A run that is still running
// cannot be discarded.
func Discard(run *runstate.Run) error {
	unlock, err := run.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return run.UpdateLocked(func(m *runstate.Meta) error {
		if m.State == runstate.StateRunning {
			return fmt.Errorf("workspace: run %s is still running; stop it first", m.ID)
		}
		if err := Release(run); err != nil {
			return err
		}
		for _, d := range []string{upperDir, workDir, diskMount, diskImage, patchFile} {
			if err := runstate.RemoveAll(filepath.Join(run.Dir, d)); err != nil {
				return fmt.Errorf("workspace: discard run %s: %w", m.ID, err)
			}
		}
		m.State = runstate.StateDiscarded
		return nil
	})
}
