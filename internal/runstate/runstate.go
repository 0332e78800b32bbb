// Package runstate keeps one directory per cordon run and the run's metadata, so that a run outlives
// the cordon process that started it: `cordon runs`, `diff`, `apply` and `gc` work from what is on
// disk, and a run whose cordon died is still listed (as interrupted) and its changes can still be used.
//
// Layout: <Root>/runs/<id>/ (mode 0700) holds meta.json, written atomically (temp file, fsync,
// rename), a lock file serialising state changes, and whatever other packages keep for the run
// (the workspace's upper layer, the audit log, the run's CA). The directory is never made visible
// inside the sandbox. Budget (budget.go) bounds what the agent can make it grow to.
package runstate

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The states a run moves through. Running, Exited and Interrupted describe the agent; Applied,
// Discarded and Exported say what the user did with its result.
const (
	StateRunning     = "running"
	StateExited      = "exited"
	StateInterrupted = "interrupted" // recorded as running, but the cordon that ran it is gone
	StateApplied     = "applied"
	StateDiscarded   = "discarded"
	StateExported    = "exported"
	// StateCorrupt is never written: List reports a run directory whose meta.json cannot be read
	// with this state instead of hiding it or failing the whole listing.
	StateCorrupt = "corrupt"
)

const (
	metaFile = "meta.json"
	lockFile = "lock"
	runsDir  = "runs"
)

// ErrNotFound is wrapped when no run matches an id or prefix.
var ErrNotFound = errors.New("no such run")

// ErrAmbiguous is wrapped when a prefix matches more than one run.
var ErrAmbiguous = errors.New("run id prefix is ambiguous")

// Meta is what cordon records about a run. It is the whole truth about the run's lifecycle; the
// workspace keeps its own details beside it.
type Meta struct {
	ID string `json:"id"`
	// Name is the caller's name for the run (cordon run --name), if any.
	Name    string   `json:"name,omitempty"`
	Project string   `json:"project"`
	Command []string `json:"command"`
	// Started is when the run was created; Ended when the agent's command ended (zero while running).
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	State   string    `json:"state"`
	// StateChanged is when State last changed; gc measures age from it.
	StateChanged time.Time `json:"state_changed,omitzero"`
	ExitCode     int       `json:"exit_code"`
	// PID and PIDStart identify the cordon process that runs the agent: a pid alone can be reused,
	// the pair (pid, start time in clock ticks since boot) cannot.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start"`
	// Branch is the branch an export created.
	Branch string `json:"branch,omitempty"`
	// Policy names the policy the run was started with; nil in the record of a run from a cordon
	// that did not record it.
	Policy *PolicyRef `json:"policy,omitempty"`
	// Kube names the cluster and namespace of a run on the kubernetes backend, so that cordon gc
	// can delete what an interrupted run left there; nil for a local run.
	Kube *KubeRef `json:"kube,omitempty"`
}

// KubeRef is where a kubernetes run's pod and Secret live.
type KubeRef struct {
	// Kubeconfig is the file the run named (--kubeconfig), empty for KUBECONFIG or ~/.kube/config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	Namespace  string `json:"namespace"`
	Server     string `json:"server,omitempty"`
	// Repo and Ref are what the pod cloned, and Lease how long its pod runs on without cordon: what
	// cordon gc needs to recover the changes of a run whose cordon was interrupted.
	Repo  string        `json:"repo,omitempty"`
	Ref   string        `json:"ref,omitempty"`
	Lease time.Duration `json:"lease,omitempty"`
	// Cleaned says the run's objects were deleted from the cluster.
	Cleaned bool `json:"cleaned,omitempty"`
}

// PolicyRef names the policy file a run used and the exact bytes it read, so that what the run was
// refused can later be turned into an edit of that file (cordon policy suggest), and the edit refused
// when the file has changed since.
type PolicyRef struct {
	// Path is the file read (symlinks resolved); empty when the run had the built-in default.
	Path string `json:"path,omitempty"`
	// SHA256 is the hex SHA-256 of the file's bytes as parsed.
	SHA256 string `json:"sha256,omitempty"`
}

// Run is one run directory and its metadata as last read.
type Run struct {
	Dir  string
	Meta Meta
}

// Store is the directory that holds every run. The zero value is not usable: Root must be set,
// usually to DefaultRoot(...).
type Store struct{ Root string }

// DefaultRoot is cordon's state directory: $XDG_STATE_HOME/cordon when XDG_STATE_HOME is set and
// absolute (as the XDG spec requires), else /var/lib/cordon for root (so that runs started with sudo,
// which resets the environment, do not land in a user's home), else ~/.local/state/cordon. Runs live
// in Root/runs.
func DefaultRoot(uid int, home, xdgStateHome string) string {
	if xdgStateHome != "" && filepath.IsAbs(xdgStateHome) {
		return filepath.Join(xdgStateHome, "cordon")
	}
	if uid == 0 {
		return "/var/lib/cordon"
	}
	return filepath.Join(home, ".local", "state", "cordon")
}

func (s Store) runsPath() (string, error) {
	if s.Root == "" || !filepath.IsAbs(s.Root) {
		return "", fmt.Errorf("runstate: store root %q is not an absolute path", s.Root)
	}
	return filepath.Join(s.Root, runsDir), nil
}

// newID makes an id that sorts by creation time and cannot collide with a concurrent cordon.
func newID(now time.Time) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("runstate: random id: %w", err)
	}
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:]), nil
}

// validID says whether s can name a run directory: no separators, no dots, nothing that could
// leave the runs directory.
func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r == '-') {
			return false
		}
	}
	return true
}

// Create makes a new run directory (0700) with a fresh id and writes m into it, durably. ID, Started
// (when zero), State (when empty) and StateChanged are filled in.
func (s Store) Create(m Meta) (*Run, error) {
	return s.create(m, true)
}

// CreateLazy is Create without waiting for the disk: meta.json is written and renamed into place
// (readers never see a torn file) but nothing is fsynced, because a run is created on the path that
// starts the agent and each fsync costs milliseconds there. The caller must call Sync on the run, and
// can do so while the agent starts: until Sync returns a crash of the machine may lose the run's
// record, as it would lose anything the agent has written by then, which is not synced either.
func (s Store) CreateLazy(m Meta) (*Run, error) {
	return s.create(m, false)
}

func (s Store) create(m Meta, durable bool) (*Run, error) {
	runs, err := s.runsPath()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return nil, fmt.Errorf("runstate: create %s: %w", runs, err)
	}
	now := time.Now()
	if m.Started.IsZero() {
		m.Started = now
	}
	if m.State == "" {
		m.State = StateRunning
	}
	m.StateChanged = now
	for range 5 {
		id, err := newID(m.Started)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(runs, id)
		if err := os.Mkdir(dir, 0o700); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("runstate: create run directory: %w", err)
		}
		m.ID = id
		r := &Run{Dir: dir, Meta: m}
		if err := writeMeta(dir, &m, durable); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		if durable {
			// The new directory's own entry.
			if err := SyncDir(runs); err != nil {
				_ = os.RemoveAll(dir)
				return nil, fmt.Errorf("runstate: %w", err)
			}
		}
		return r, nil
	}
	return nil, errors.New("runstate: could not find a free run id")
}

// Get finds a run by its id or a unique prefix of it, with its live state resolved.
func (s Store) Get(id string) (*Run, error) {
	if !validID(id) {
		return nil, fmt.Errorf("runstate: %q is not a run id: %w", id, ErrNotFound)
	}
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	var match []string
	for _, c := range ids {
		if c == id {
			match = []string{c}
			break
		}
		if strings.HasPrefix(c, id) {
			match = append(match, c)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("runstate: run %q: %w", id, ErrNotFound)
	case 1:
	default:
		return nil, fmt.Errorf("runstate: %q matches %s: %w", id, strings.Join(match, ", "), ErrAmbiguous)
	}
	runs, _ := s.runsPath()
	return Load(filepath.Join(runs, match[0]))
}

// ids lists the run directories' names, skipping anything that is not a run (temporary or
// half-removed entries start with a dot).
func (s Store) ids() ([]string, error) {
	runs, err := s.runsPath()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(runs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runstate: list runs: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && validID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// List returns every run, newest first, with running runs whose cordon is gone shown as
// interrupted. A run whose metadata cannot be read is listed with StateCorrupt rather than hidden.
func (s Store) List() ([]*Run, error) {
	ids, err := s.ids()
	if err != nil {
		return nil, err
	}
	runs, _ := s.runsPath()
	out := make([]*Run, 0, len(ids))
	for _, id := range ids {
		r, err := Load(filepath.Join(runs, id))
		if err != nil {
			r = &Run{Dir: filepath.Join(runs, id), Meta: Meta{ID: id, State: StateCorrupt}}
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Meta, out[j].Meta
		if !a.Started.Equal(b.Started) {
			return a.Started.After(b.Started)
		}
		return a.ID > b.ID
	})
	return out, nil
}

// RemoveIf removes the run, under its lock, when remove says so for its metadata as it is now
// (read again under the lock, its state resolved), so that a run applied, resumed or removed by
// another cordon meanwhile is judged by what it is, not by what a listing said. remove may read the
// run's files; it must not take the run's lock. It returns whether the run was removed.
func (r *Run) RemoveIf(remove func(Meta) (bool, error)) (bool, error) {
	return r.removeIf(nil, remove)
}

// FinishRemoveIf is RemoveIf and FinishLazy under one lock: remove judges the record as it stands
// before the command's end is recorded (so that it can tell whether another cordon changed the run
// meanwhile), and a run it removes is not written first (an end written to be deleted a moment later
// cost a start that changed nothing some 0.4 ms); a run it keeps has its end written, lazily, as
// FinishLazy writes it.
func (r *Run) FinishRemoveIf(code int, remove func(Meta) (bool, error)) (bool, error) {
	return r.removeIf(finish(code), remove)
}

// removeIf judges the record read under the run's lock with remove, and removes the run if remove
// says so; otherwise it applies change, when there is one, and writes the record lazily.
func (r *Run) removeIf(change func(*Meta) error, remove func(Meta) (bool, error)) (bool, error) {
	unlock, err := r.Lock()
	if err != nil {
		return false, err
	}
	var trash string
	err = r.updateLocked(func(m *Meta) error {
		ok, err := remove(*m)
		if err != nil {
			return err
		}
		if !ok {
			if change != nil {
				return change(m) // written: the change is kept with the run
			}
			return errSkip
		}
		// Move the directory out of the listing first, so a removal that fails halfway never
		// leaves something that looks like a broken run.
		trash = filepath.Join(filepath.Dir(r.Dir), "."+filepath.Base(r.Dir)+".gc")
		if err := os.Rename(r.Dir, trash); err != nil {
			return fmt.Errorf("runstate: remove run %s: %w", m.ID, err)
		}
		return errSkip
	}, false)
	unlock()
	if err != nil && !errors.Is(err, errSkip) {
		return false, err
	}
	if trash == "" {
		return false, nil
	}
	if err := RemoveAll(trash); err != nil {
		return true, fmt.Errorf("runstate: remove run %s: %w", r.Meta.ID, err)
	}
	return true, nil
}

// errSkip ends an Update without writing.
var errSkip = errors.New("skip")

// RemoveAll removes a run's files even where an overlay's work directory or the agent left
// directories without write or search permission (which os.RemoveAll alone cannot remove as an
// ordinary user).
func RemoveAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		if err != nil && d != nil && d.IsDir() {
			// The walk could not read it before the chmod; read it again.
			_ = RemoveAll(p)
			return fs.SkipDir
		}
		return nil
	})
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// Load reads the run in dir and resolves whether a running run is still alive.
func Load(dir string) (*Run, error) {
	m, err := readMeta(dir)
	if err != nil {
		return nil, err
	}
	r := &Run{Dir: dir, Meta: *m}
	r.Meta.State = resolve(r.Meta)
	return r, nil
}

func readMeta(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, fmt.Errorf("runstate: read %s: %w", filepath.Join(dir, metaFile), err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("runstate: parse %s: %w", filepath.Join(dir, metaFile), err)
	}
	if m.ID != filepath.Base(dir) {
		return nil, fmt.Errorf("runstate: %s: id %q does not match its directory", dir, m.ID)
	}
	return &m, nil
}

// resolve turns "running" into "interrupted" when the cordon that recorded it is gone.
func resolve(m Meta) string {
	if m.State != StateRunning {
		return m.State
	}
	if Alive(m.PID, m.PIDStart) {
		return StateRunning
	}
	return StateInterrupted
}

// Lock takes the run's exclusive lock, which serialises every change of its state and every
// operation that must not run twice at once (apply, export, discard, gc). It blocks until free.
func (r *Run) Lock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(r.Dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("runstate: lock %s: %w", r.Meta.ID, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("runstate: lock %s: %w", r.Meta.ID, err)
	}
	return func() { f.Close() }, nil
}

// Update reads the run's current metadata under its lock, lets fn change it, and writes it back
// atomically. State changes stamp StateChanged. r.Meta is refreshed. When fn returns an error,
// nothing is written and the error is returned.
func (r *Run) Update(fn func(*Meta) error) error {
	unlock, err := r.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return r.UpdateLocked(fn)
}

// UpdateLocked is Update for a caller that already holds Lock.
func (r *Run) UpdateLocked(fn func(*Meta) error) error { return r.updateLocked(fn, true) }

func (r *Run) updateLocked(fn func(*Meta) error, durable bool) error {
	m, err := readMeta(r.Dir)
	if err != nil {
		return err
	}
	old := m.State
	m.State = resolve(*m)
	if err := fn(m); err != nil {
		return err
	}
	if m.ID != filepath.Base(r.Dir) {
		return fmt.Errorf("runstate: the id of run %s cannot change", r.Meta.ID)
	}
	if m.State != old {
		m.StateChanged = time.Now()
	}
	if err := writeMeta(r.Dir, m, durable); err != nil {
		return err
	}
	r.Meta = *m
	r.Meta.State = resolve(*m)
	return nil
}

// SetState records a new state.
func (r *Run) SetState(state string) error {
	return r.Update(func(m *Meta) error { m.State = state; return nil })
}

// Finish records that the agent's command ended with code.
func (r *Run) Finish(code int) error {
	return r.Update(finish(code))
}

// FinishLazy is Finish without the fsyncs, for a run that is removed as it ends (nothing of it need
// reach the disk) or made durable after (Sync or SyncMeta). Readers see the old record or the new.
func (r *Run) FinishLazy(code int) error {
	unlock, err := r.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return r.updateLocked(finish(code), false)
}

func finish(code int) func(*Meta) error {
	return func(m *Meta) error {
		m.State, m.ExitCode, m.Ended = StateExited, code, time.Now()
		return nil
	}
}

// writeMeta replaces meta.json atomically: a reader sees the old or the new file, never a torn one,
// and a crash leaves one of the two on disk.
func writeMeta(dir string, m *Meta, durable bool) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("runstate: encode meta: %w", err)
	}
	if !durable {
		return WriteFileAtomicLazy(filepath.Join(dir, metaFile), append(b, '\n'), 0o600)
	}
	return WriteFileAtomic(filepath.Join(dir, metaFile), append(b, '\n'), 0o600)
}
