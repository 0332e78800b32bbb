package cordon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
	"github.com/cordon-sandbox/cordon/internal/workspace"
)

// Store is a directory of runs: each run's record, its workspace layers and its audit log. The
// caller's own state directory is the default; one only cordon's user can enter.
type Store struct {
	// Dir is the state directory (see Config.StateDir); empty means the caller's default.
	Dir string
}

func (s Store) store() runstate.Store { return s.storeFor(os.Environ()) }

// storeFor is the store at Dir, or when Dir is empty the caller's default: decided by uid and by
// HOME and XDG_STATE_HOME in env.
func (s Store) storeFor(env []string) runstate.Store {
	if s.Dir != "" {
		return runstate.Store{Root: s.Dir}
	}
	return runstate.Store{Root: runstate.DefaultRoot(os.Getuid(), getenv(env, "HOME"), getenv(env, "XDG_STATE_HOME"))}
}

// OpenRun opens a run of the caller's default store by its id (or a unique prefix of one).
func OpenRun(id string) (*FinishedRun, error) { return Store{}.Open(id) }

// Open opens a run by its id or a unique prefix of one, of whichever project. Find is the way to
// resolve what a user typed.
func (s Store) Open(id string) (*FinishedRun, error) {
	r, err := s.store().Get(id)
	if err != nil {
		return nil, err
	}
	return &FinishedRun{r: r}, nil
}

// Last opens the most recently started run, of whichever project.
func (s Store) Last() (*FinishedRun, error) {
	runs, err := s.List()
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, ErrNoRuns
	}
	return runs[0], nil
}

// ErrNoRuns: the store holds no run.
var ErrNoRuns = errors.New("no runs yet")

// ErrOtherProject is wrapped by Find when "last" or an id prefix names no run of the project but
// one of another project: only a full id reaches a run of another project.
var ErrOtherProject = runstate.ErrOtherProject

// ProjectOf returns the project a directory belongs to, as runs are grouped by: the top level of
// the git work tree that holds it (the nearest directory with a .git entry, found without running
// git), else the directory itself; symlinks resolved, as a run records its project.
func ProjectOf(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("project of %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("project of %s: %w", dir, err)
	}
	return runstate.ProjectOf(real), nil
}

// Find resolves a run as a user names it: "last", a full id, or a unique prefix of one. "last" and
// prefixes resolve among the runs of project (a ProjectOf result; empty: every run), so that a
// command typed in one project never acts on another's run by accident: naming only a run of
// another project that way is an error wrapping ErrOtherProject that says which run and project. A
// full id opens its run whatever the project.
func (s Store) Find(name, project string) (*FinishedRun, error) {
	r, err := s.store().Find(name, project)
	if err != nil {
		return nil, err
	}
	return &FinishedRun{r: r}, nil
}

// List returns the store's runs, the most recently started first.
func (s Store) List() ([]*FinishedRun, error) { return s.ListProject("") }

// ListProject returns the runs of project (a ProjectOf result; empty: every run), the most recently
// started first.
func (s Store) ListProject(project string) ([]*FinishedRun, error) {
	rs, err := s.store().ListProject(project)
	if err != nil {
		return nil, err
	}
	out := make([]*FinishedRun, len(rs))
	for i, r := range rs {
		out[i] = &FinishedRun{r: r}
	}
	return out, nil
}

// GCOptions choose what Store.GC removes. Without Unapplied it removes only what holds nothing to
// lose: runs applied or discarded, and finished runs that changed nothing.
type GCOptions struct {
	// Project limits GC to the runs of one project (a ProjectOf result); empty means every run.
	Project string
	// OlderThan keeps the runs whose state changed less than this long ago.
	OlderThan time.Duration
	// Unapplied also removes finished runs whose changes were never applied or discarded (exited,
	// interrupted, and exported: those were committed on a branch but may still be applied).
	Unapplied bool
	// Removing, when set, is told about each run with unapplied changes just before GC removes it,
	// with the number of paths it changed (-1 when they cannot be read), so the caller can name it.
	Removing func(info RunInfo, changes int)
}

// GC removes the runs opts select, each judged under its lock by its state at that moment, and
// returns what it removed. A running run is never removed, nor one whose record cannot be read.
func (s Store) GC(opts GCOptions) ([]RunInfo, error) {
	list, err := s.store().ListProject(opts.Project)
	if err != nil {
		return nil, err
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	var removed []RunInfo
	var errs []error
	for _, r := range list {
		ok, err := r.RemoveIf(func(m runstate.Meta) (bool, error) {
			when := m.StateChanged
			if when.IsZero() {
				when = m.Started
			}
			if when.After(cutoff) || !gcRemoves(r, m, opts) {
				return false, nil
			}
			// A disk-limited run's image may still be mounted below its directory.
			return true, workspace.Release(r)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("gc: %w", err))
		}
		if ok {
			removed = append(removed, (&FinishedRun{r: r}).Info())
		}
	}
	return removed, errors.Join(errs...)
}

// gcRemoves decides for one run, given its current record m, whether GC with opts removes it.
func gcRemoves(r *runstate.Run, m runstate.Meta, opts GCOptions) bool {
	switch m.State {
	case runstate.StateApplied, runstate.StateDiscarded:
		return true
	case runstate.StateExited, runstate.StateInterrupted, runstate.StateExported:
	default: // running, or a state this version does not know
		return false
	}
	n := -1
	if cs, err := workspace.Changes(r); err == nil {
		n = len(cs)
	}
	if n == 0 {
		return true // nothing to apply: nothing is lost
	}
	if !opts.Unapplied {
		return false
	}
	if opts.Removing != nil {
		info := (&FinishedRun{r: &runstate.Run{Dir: r.Dir, Meta: m}}).Info()
		opts.Removing(info, n)
	}
	return true
}

// KeepReason says why a finished run stays in its store (Exit.Kept). A run that changed nothing and
// has none of these reasons is removed as it ends.
type KeepReason string

// The reasons a run is kept.
const (
	// KeptChanges: the command changed paths, to be applied, exported or discarded.
	KeptChanges KeepReason = "changes"
	// KeptAsked: Config.Keep (cordon run --keep).
	KeptAsked KeepReason = "asked"
	// KeptNetwork: the gateway refused or flagged requests, which the run's audit log records.
	KeptNetwork KeepReason = "network"
	// KeptListing: a warning of the run named a file in the run's directory (the full list of the
	// files the secret scan masked), which must stay there to be read.
	KeptListing KeepReason = "listing"
	// KeptFailed: cordon ended the run itself, or could not read or remove it; its record says what
	// happened.
	KeptFailed KeepReason = "failed"
)

// FinishedRun is a run's record and what its command changed, kept until the caller applies,
// exports or discards it. (A run still going can be opened too: its changes so far are readable.)
type FinishedRun struct {
	r *runstate.Run
}

// RunInfo is a run's record.
type RunInfo struct {
	ID string
	// Name is the name given to the run (Config.Name), if any.
	Name    string
	Project string
	Command []string
	Started time.Time
	// State is "running", "exited", "applied", "exported" or "discarded".
	State string
	// ExitCode is the command's exit status once State is past "running".
	ExitCode int
	// PolicyFile is the policy file the run used, empty for the built-in default; PolicySHA256 the
	// hex SHA-256 of the bytes it read. PolicyRecorded is false for a run whose cordon did not record
	// them.
	PolicyFile, PolicySHA256 string
	PolicyRecorded           bool
}

// Info returns the run's record as it was when the run was opened.
func (f *FinishedRun) Info() RunInfo {
	m := f.r.Meta
	info := RunInfo{ID: m.ID, Name: m.Name, Project: m.Project, Command: m.Command, Started: m.Started, State: m.State, ExitCode: m.ExitCode}
	if m.Policy != nil {
		info.PolicyFile, info.PolicySHA256, info.PolicyRecorded = m.Policy.Path, m.Policy.SHA256, true
	}
	return info
}

// ID is the run's id.
func (f *FinishedRun) ID() string { return f.r.Meta.ID }

// Change is one path the run's command changed in the workspace.
type Change = workspace.Change

// Risk is a change the persistence guard flags: one that would run code on the host later (a git
// hook, an .envrc, a CI file) and that Apply and Export carry only when told to.
type Risk = workspace.Risk

// ApplyOptions adjust Apply and Export.
type ApplyOptions = workspace.ApplyOptions

// ApplyReport says what Apply carried into the project.
type ApplyReport = workspace.ApplyReport

// Changes lists the paths the run changed.
func (f *FinishedRun) Changes() ([]Change, error) { return workspace.Changes(f.r) }

// Risks lists the changes the persistence guard flags.
func (f *FinishedRun) Risks() ([]Risk, error) { return workspace.Guard(f.r) }

// Diff writes the run's changes to w as a git-style diff, or one line per path with stat.
func (f *FinishedRun) Diff(w io.Writer, stat bool) error { return workspace.Diff(w, f.r, stat) }

// Apply carries the run's changes into the project, refusing what the guard flags unless
// opts.IncludeRisky, and refusing files the host changed since the run started.
func (f *FinishedRun) Apply(opts ApplyOptions) (*ApplyReport, error) {
	return workspace.Apply(f.r, opts)
}

// Export commits the run's result on a new branch of the project's git repository and returns the
// commit's id; the project's work tree is not touched.
func (f *FinishedRun) Export(branch string, opts ApplyOptions) (string, error) {
	return workspace.Export(f.r, branch, opts)
}

// Discard throws the run's changes away; the record stays, as discarded, until GC.
func (f *FinishedRun) Discard() error { return workspace.Discard(f.r) }

// Events reads the run's audit log; a run without network has none.
func (f *FinishedRun) Events() ([]Event, error) {
	evs, err := readEvents(f.r.Dir)
	if err != nil {
		return evs, fmt.Errorf("run %s: %w", f.r.Meta.ID, err)
	}
	return evs, nil
}

// AuditLogPath is the file of the run's audit log (JSON lines, one Event each; see
// internal/audit), for tools that read it as it is. It does not exist for a run without network.
func (f *FinishedRun) AuditLogPath() string { return filepath.Join(f.r.Dir, auditLogName) }

// Remove deletes the run and everything it kept, whatever its state.
func (f *FinishedRun) Remove() error {
	workspace.Release(f.r)
	return runstate.RemoveAll(f.r.Dir)
}
