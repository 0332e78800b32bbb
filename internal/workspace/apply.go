package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
	"golang.org/x/sys/unix"
)

// ApplyOptions adjusts Apply and Export.
type ApplyOptions struct {
	// IncludeRisky carries changes the persistence guard flagged (never a symlink out of the project).
	IncludeRisky bool

	// crashAfter, for tests, stops Apply after that many file-system steps of the commit phase as if
	// cordon had died there: no rollback, no cleanup.
	crashAfter int
}

// ApplyReport says what Apply did.
type ApplyReport struct {
	Added, Modified, Deleted []string
	// Risky lists the guard's findings that were carried because of IncludeRisky.
	Risky []Risk
	// Resumed says this call finished an apply that an earlier, interrupted call had committed to.
	Resumed bool
}

// Conflict is a path the user changed in the project after the run started that the run changed too.
type Conflict struct{ Path, Reason string }

// ConflictError stops Apply when the project changed under the run; nothing was applied.
type ConflictError struct{ Conflicts []Conflict }

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the project changed since the run started; nothing applied (%d conflicting paths):", len(e.Conflicts))
	for _, c := range e.Conflicts {
		fmt.Fprintf(&b, "\n  %s: %s", c.Path, c.Reason)
	}
	return b.String()
}

// RiskError stops Apply or Export when the run has changes the persistence guard refuses; nothing
// was applied.
type RiskError struct{ Risks []Risk }

func (e *RiskError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "refusing %d change(s) that could run code on the host later; nothing applied (review them, then use --include-risky):", len(e.Risks))
	for _, r := range e.Risks {
		fmt.Fprintf(&b, "\n  %s: %s", r.Path, r.Reason)
		if r.Never {
			b.WriteString(" [never applied]")
		}
	}
	return b.String()
}

// errCrash is what the crashAfter hook returns.
var errCrash = errors.New("simulated crash")

const journalFile = "apply.journal"

// journal is the write-ahead record of an apply. Every step it lists can be redone or undone by
// looking at which of the staged and backup names still exist, so it is written only at phase
// changes: before staging ("staging": a crash means clean up, the project is untouched), before the
// first change to the project ("commit": a crash means roll forward) and before undoing a failed
// commit ("rollback": a crash means keep undoing).
type journal struct {
	Phase   string `json:"phase"`
	Staging string `json:"staging"`
	Ops     []op   `json:"ops"`
}

// op is one step on the project. Staged and backup names are inside the staging directory.
type op struct {
	Kind    string      `json:"kind"` // "remove", "put" or "chmod"
	Path    string      `json:"path"`
	Staged  string      `json:"staged,omitempty"`
	Backup  string      `json:"backup,omitempty"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	OldMode fs.FileMode `json:"old_mode,omitempty"`
}

// Apply carries the run's changes into the project, all or nothing. It refuses (typed errors,
// every path listed, nothing changed) when the project changed since the run started in a path the
// run changed, or when the guard flags something and opts.IncludeRisky is false. If a previous Apply
// was interrupted, it first finishes it (if it had started changing the project) or undoes it.
func Apply(run *runstate.Run, opts ApplyOptions) (*ApplyReport, error) {
	unlock, err := run.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	fresh, err := runstate.Load(run.Dir)
	if err != nil {
		return nil, err
	}
	run.Meta = fresh.Meta
	info, err := LoadInfo(run)
	if err != nil {
		return nil, err
	}
	if done, err := recoverApply(run, info); err != nil {
		return nil, err
	} else if done {
		if err := run.UpdateLocked(func(m *runstate.Meta) error { m.State = runstate.StateApplied; return nil }); err != nil {
			return nil, err
		}
		return &ApplyReport{Resumed: true}, nil
	}
	switch run.Meta.State {
	case runstate.StateExited, runstate.StateInterrupted, runstate.StateExported:
	default:
		return nil, fmt.Errorf("workspace: run %s is %s; only a finished run can be applied", run.Meta.ID, run.Meta.State)
	}
	release, err := attachDisk(run, info)
	if err != nil {
		return nil, err
	}
	defer release()
	cs, err := changesFor(run, info)
	if err != nil {
		return nil, err
	}
	// A patch run's changes were checked against the project by blob id as they were materialised.
	if info.Mode != ModePatch {
		if cf := conflicts(info, cs); len(cf) > 0 {
			return nil, &ConflictError{Conflicts: cf}
		}
	}
	risks, err := guard(info.Project, cs)
	if err != nil {
		return nil, err
	}
	if blocked := refused(risks, opts.IncludeRisky); len(blocked) > 0 {
		return nil, &RiskError{Risks: blocked}
	}
	rep := &ApplyReport{Risky: risks}
	for _, c := range cs {
		if c.Kind == Deleted && c.OldMode.IsDir() || c.Kind != Deleted && c.Mode.IsDir() && c.Kind != Modified {
			continue
		}
		switch c.Kind {
		case Added:
			rep.Added = append(rep.Added, c.Path)
		case Modified:
			rep.Modified = append(rep.Modified, c.Path)
		case Deleted:
			rep.Deleted = append(rep.Deleted, c.Path)
		}
	}
	if err := commitChanges(run, info, cs, opts); err != nil {
		return nil, err
	}
	if err := run.UpdateLocked(func(m *runstate.Meta) error { m.State = runstate.StateApplied; return nil }); err != nil {
		return nil, err
	}
	return rep, nil
}

// refused is the part of risks that opts do not allow.
func refused(risks []Risk, includeRisky bool) []Risk {
	var out []Risk
	for _, r := range risks {
		if r.Never || !includeRisky {
			out = append(out, r)
		}
	}
	return out
}

// conflicts finds paths the run changed that the user changed too since the run started. It needs
// no snapshot: the project is the overlay's lower layer, so a project entry whose ctime or mtime is
// not before the run's base time was changed by someone other than the agent.
func conflicts(info *Info, cs []Change) []Conflict {
	threshold := info.Base.Add(-info.Slack)
	var out []Conflict
	seen := map[string]bool{}
	add := func(p, why string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, Conflict{Path: p, Reason: why})
		}
	}
	created := map[string]bool{} // directories the run creates in the project
	for _, c := range cs {
		fi, err := projectLstat(info.Project, c.Path)
		switch {
		case err == nil:
			if !changeTime(fi).Before(threshold) {
				add(c.Path, fmt.Sprintf("changed in the project at %s, after the run started", changeTime(fi).Format(time.RFC3339)))
			}
		case !absent(err):
			add(c.Path, err.Error())
		case c.Kind == Added && c.copiedUp:
			// The agent changed a file the project had; if its directory changed since, the user
			// probably removed or renamed that file.
			if anc, t := nearestAncestor(info.Project, c.Path); !t.Before(threshold) {
				add(c.Path, fmt.Sprintf("the run modified it, but it is gone from the project (%s changed after the run started)", anc))
			}
		}
		if c.Kind == Added && c.Mode.IsDir() {
			created[c.Path] = true
		}
		if c.Kind != Deleted {
			if parent := slashDir(c.Path); parent != "." && !created[parent] {
				if fi, err := projectLstat(info.Project, parent); err != nil || !fi.IsDir() {
					add(c.Path, "its directory is no longer a directory in the project")
				}
			}
		}
	}
	return out
}

// nearestAncestor finds the closest existing directory above rel and its change time.
func nearestAncestor(project, rel string) (string, time.Time) {
	for p := slashDir(rel); ; p = slashDir(p) {
		var fi fs.FileInfo
		var err error
		if p == "." {
			fi, err = os.Lstat(project)
		} else {
			fi, err = projectLstat(project, p)
		}
		if err == nil && fi.IsDir() {
			return p, changeTime(fi)
		}
		if p == "." {
			return p, time.Now()
		}
	}
}

// plan turns changes into the fewest steps: a deleted directory is one remove, a new directory one
// put of its whole staged tree, mode-only changes chmods, done last (a directory made read-only
// must not stop the puts into it).
func plan(cs []Change) []op {
	var ops, chmods []op
	var removedDir, putDir []string
	under := func(p string, dirs []string) bool {
		for _, d := range dirs {
			if strings.HasPrefix(p, d+"/") {
				return true
			}
		}
		return false
	}
	n := 0
	name := func() string { n++; return strconv.Itoa(n) }
	for _, c := range cs {
		switch {
		case c.Kind == Deleted:
			if under(c.Path, removedDir) {
				continue
			}
			ops = append(ops, op{Kind: "remove", Path: c.Path, Backup: name()})
			if c.OldMode.IsDir() {
				removedDir = append(removedDir, c.Path)
			}
		case under(c.Path, putDir):
			continue
		case c.Kind == Added:
			ops = append(ops, op{Kind: "put", Path: c.Path, Staged: name(), Mode: c.Mode})
			if c.Mode.IsDir() {
				putDir = append(putDir, c.Path)
			}
		case c.Kind == Modified && (c.ContentChanged || !c.Mode.IsDir() && c.Mode&fs.ModeSymlink == 0 && !c.Mode.IsRegular()):
			ops = append(ops, op{Kind: "put", Path: c.Path, Staged: name(), Backup: name(), Mode: c.Mode, OldMode: c.OldMode})
		case c.Kind == Modified && c.Mode.IsRegular():
			// Mode-only: replace the file too (staged with the new mode), so that setuid and the
			// like follow the same all-or-nothing path. Cheap: it is one file.
			ops = append(ops, op{Kind: "put", Path: c.Path, Staged: name(), Backup: name(), Mode: c.Mode, OldMode: c.OldMode})
		case c.Kind == Modified:
			chmods = append(chmods, op{Kind: "chmod", Path: c.Path, Mode: c.Mode, OldMode: c.OldMode})
		}
	}
	return append(ops, chmods...)
}

// commitChanges stages, journals and commits.
func commitChanges(run *runstate.Run, info *Info, cs []Change, opts ApplyOptions) error {
	ops := plan(cs)
	if len(ops) == 0 {
		return nil
	}
	staging := filepath.Join(info.Project, ".cordon-apply-"+run.Meta.ID)
	if _, err := os.Lstat(staging); !errors.Is(err, fs.ErrNotExist) {
		// Never adopt (and later remove) something cordon did not create.
		return fmt.Errorf("workspace: %s already exists in the project; move it away and apply again", staging)
	}
	j := &journal{Phase: "staging", Staging: staging, Ops: ops}
	if err := writeJournal(run, j); err != nil {
		return err
	}
	if err := stage(info.Project, staging, cs, ops); err != nil {
		return errors.Join(fmt.Errorf("workspace: stage: %w", err), rollback(run, j))
	}
	// Make the staged data durable before the journal commits to it.
	if err := syncfs(staging); err != nil {
		return errors.Join(err, rollback(run, j))
	}
	j.Phase = "commit"
	if err := writeJournal(run, j); err != nil {
		return errors.Join(err, rollback(run, j))
	}
	steps := 0
	if err := rollForward(info.Project, j, &steps, opts.crashAfter); err != nil {
		if errors.Is(err, errCrash) {
			return err
		}
		return errors.Join(fmt.Errorf("workspace: apply: %w", err), rollback(run, j))
	}
	return finish(run, j)
}

func writeJournal(run *runstate.Run, j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("workspace: journal: %w", err)
	}
	if err := runstate.WriteFileAtomic(filepath.Join(run.Dir, journalFile), b, 0o600); err != nil {
		return fmt.Errorf("workspace: journal: %w", err)
	}
	return nil
}

// recoverApply completes or undoes an interrupted apply; done says it completed one.
func recoverApply(run *runstate.Run, info *Info) (done bool, err error) {
	b, err := os.ReadFile(filepath.Join(run.Dir, journalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("workspace: journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return false, fmt.Errorf("workspace: journal of run %s is unreadable (%v); inspect %s by hand", run.Meta.ID, err, filepath.Join(run.Dir, journalFile))
	}
	if filepath.Dir(j.Staging) != info.Project || !strings.HasPrefix(filepath.Base(j.Staging), ".cordon-apply-") {
		return false, fmt.Errorf("workspace: journal of run %s names staging %q outside the project", run.Meta.ID, j.Staging)
	}
	if j.Phase != "commit" {
		return false, rollback(run, &j)
	}
	// The user decided to apply and cordon had started changing the project: finish it.
	steps := 0
	if err := rollForward(info.Project, &j, &steps, 0); err != nil {
		return false, fmt.Errorf("workspace: finishing the interrupted apply of run %s: %w", run.Meta.ID, err)
	}
	return true, finish(run, &j)
}

// stage builds every new entry in the staging directory, on the project's file system so that
// commit is renames only.
func stage(project, staging string, cs []Change, ops []op) error {
	if err := os.Mkdir(staging, 0o700); err != nil {
		return err
	}
	for _, d := range []string{"new", "old"} {
		if err := os.Mkdir(filepath.Join(staging, d), 0o700); err != nil {
			return err
		}
	}
	byPath := map[string]Change{}
	for _, c := range cs {
		if c.Kind != Deleted {
			byPath[c.Path] = c
		}
	}
	for _, o := range ops {
		if o.Kind != "put" {
			continue
		}
		c := byPath[o.Path]
		uid, gid := ownerFor(project, o.Path)
		if err := stageEntry(c.src, filepath.Join(staging, "new", o.Staged), c.Mode, uid, gid); err != nil {
			return fmt.Errorf("%s: %w", o.Path, err)
		}
	}
	return nil
}

// stageEntry copies src (file, symlink, directory tree, fifo or device) to dst with mode, owned by
// uid:gid when running as root. It never follows a symlink in src.
func stageEntry(src, dst string, mode fs.FileMode, uid, gid int) error {
	var err error
	switch {
	case mode.IsRegular():
		_, err = copyFile(src, dst, 0o600)
	case mode&fs.ModeSymlink != 0:
		var t string
		if t, err = os.Readlink(src); err == nil {
			err = os.Symlink(t, dst)
		}
	case mode.IsDir():
		if err = os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			if isWhiteout(fi) {
				continue
			}
			if err := stageEntry(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), fi.Mode(), uid, gid); err != nil {
				return err
			}
		}
	case mode&fs.ModeNamedPipe != 0:
		err = unix.Mkfifo(dst, 0o600)
	case mode&fs.ModeDevice != 0:
		var st unix.Stat_t
		if err = unix.Lstat(src, &st); err == nil {
			err = mknodLike(dst, &st)
		}
	default:
		return fmt.Errorf("cannot apply a %v", mode.Type())
	}
	if err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(dst, uid, gid); err != nil {
			return err
		}
	}
	if mode&fs.ModeSymlink != 0 {
		return nil
	}
	if fi, err := os.Lstat(src); err == nil {
		_ = os.Chtimes(dst, fi.ModTime(), fi.ModTime())
	}
	// After chown, which clears setuid/setgid.
	return os.Chmod(dst, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}

// ownerFor is who should own the entry at rel: its current owner, or its directory's.
func ownerFor(project, rel string) (int, int) {
	for p := rel; ; p = slashDir(p) {
		full := project
		if p != "." {
			full = filepath.Join(project, filepath.FromSlash(p))
		}
		if fi, err := os.Lstat(full); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				return int(st.Uid), int(st.Gid)
			}
		}
		if p == "." {
			return os.Geteuid(), os.Getegid()
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// rollForward performs every op that is not done yet. Each step is a rename (or link, or chmod)
// whose effect can be seen afterwards, so running it again after a crash picks up where it stopped.
func rollForward(project string, j *journal, steps *int, crashAfter int) error {
	step := func() error {
		*steps++
		if crashAfter > 0 && *steps >= crashAfter {
			return errCrash
		}
		return nil
	}
	for _, o := range j.Ops {
		target := filepath.Join(project, filepath.FromSlash(o.Path))
		staged := filepath.Join(j.Staging, "new", o.Staged)
		backup := filepath.Join(j.Staging, "old", o.Backup)
		switch o.Kind {
		case "remove":
			if exists(backup) || !exists(target) {
				continue
			}
			if err := os.Rename(target, backup); err != nil {
				return err
			}
		case "put":
			if !exists(staged) {
				continue // already in place
			}
			if o.Backup != "" && !exists(backup) {
				if err := os.Link(target, backup); err != nil {
					return err
				}
				if err := step(); err != nil {
					return err
				}
			}
			if err := os.Rename(staged, target); err != nil {
				return err
			}
		case "chmod":
			if err := os.Chmod(target, o.Mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown journal op %q", o.Kind)
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// rollback undoes whatever rollForward did, newest first, then cleans up.
func rollback(run *runstate.Run, j *journal) error {
	project := filepath.Dir(j.Staging)
	if j.Phase == "staging" {
		return finish(run, j) // the project was not touched yet
	}
	if j.Phase != "rollback" {
		// Record the decision, so that a crash during the rollback is followed by more rollback.
		j.Phase = "rollback"
		if err := writeJournal(run, j); err != nil {
			return err
		}
	}
	var errs []error
	for i := len(j.Ops) - 1; i >= 0; i-- {
		o := j.Ops[i]
		target := filepath.Join(project, filepath.FromSlash(o.Path))
		staged := filepath.Join(j.Staging, "new", o.Staged)
		backup := filepath.Join(j.Staging, "old", o.Backup)
		switch o.Kind {
		case "chmod":
			if exists(target) {
				errs = append(errs, os.Chmod(target, o.OldMode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)))
			}
		case "put":
			if !exists(staged) {
				if o.Backup != "" {
					errs = append(errs, os.Rename(backup, target))
				} else {
					errs = append(errs, os.Rename(target, staged))
				}
			}
		case "remove":
			if exists(backup) {
				errs = append(errs, os.Rename(backup, target))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("workspace: rolling back the apply of run %s failed; the journal is kept, run apply again: %w", run.Meta.ID, err)
	}
	return finish(run, j)
}

// finish removes the staging directory and the journal.
func finish(run *runstate.Run, j *journal) error {
	if err := runstate.RemoveAll(j.Staging); err != nil {
		return fmt.Errorf("workspace: clean up after apply: %w", err)
	}
	if err := os.Remove(filepath.Join(run.Dir, journalFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("workspace: clean up after apply: %w", err)
	}
	return runstate.SyncDir(run.Dir)
}

func syncfs(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("workspace: sync: %w", err)
	}
	defer f.Close()
	if err := syncFS(int(f.Fd())); err != nil {
		return fmt.Errorf("workspace: sync: %w", err)
	}
	return nil
}
