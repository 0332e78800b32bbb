package runstate

import (
	"cmp"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDefaultRoot(t *testing.T) {
	for _, tc := range []struct {
		uid       int
		home, xdg string
		want      string
	}{
		{0, "/root", "/root/.xdg", "/root/.xdg/cordon"},
		{0, "/root", "", "/var/lib/cordon"},
		{1000, "/home/u", "/home/u/st", "/home/u/st/cordon"},
		{1000, "/home/u", "", "/home/u/.local/state/cordon"},
		{1000, "/home/u", "relative/st", "/home/u/.local/state/cordon"},
	} {
		if got := DefaultRoot(tc.uid, tc.home, tc.xdg); got != tc.want {
			t.Errorf("DefaultRoot(%d, %q, %q) = %q, want %q", tc.uid, tc.home, tc.xdg, got, tc.want)
		}
	}
}

func TestCreateGetList(t *testing.T) {
	s := Store{Root: t.TempDir()}
	pid, start, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		r, err := s.Create(Meta{Project: "/p", Command: []string{"agent"}, PID: pid, PIDStart: start,
			Started: time.Now().Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(r.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("run dir mode %v, want 0700", fi.Mode().Perm())
		}
		ids = append(ids, r.Meta.ID)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Meta.ID != ids[2] || list[2].Meta.ID != ids[0] {
		t.Fatalf("List order wrong: %v", list)
	}
	for _, r := range list {
		if r.Meta.State != StateRunning {
			t.Errorf("%s: state %q, want running (this process is alive)", r.Meta.ID, r.Meta.State)
		}
	}
	r, err := s.Get(ids[1])
	if err != nil || r.Meta.ID != ids[1] {
		t.Fatalf("Get(full id) = %v, %v", r, err)
	}
	// A unique suffix-free prefix: the full id minus its last character.
	if r, err := s.Get(ids[1][:len(ids[1])-1]); err != nil || r.Meta.ID != ids[1] {
		t.Errorf("Get(prefix) = %v, %v", r, err)
	}
	if _, err := s.Get("2"); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("Get(ambiguous) error = %v, want ErrAmbiguous", err)
	}
	for _, bad := range []string{"../x", "", "a/b", "..", "ffff"} {
		if _, err := s.Get(bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) error = %v, want ErrNotFound", bad, err)
		}
	}
}

func TestInterrupted(t *testing.T) {
	s := Store{Root: t.TempDir()}
	// A process that has exited: its pid is free (or reused with another start time).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	pid, start, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	zpid, zstart := zombie(t)
	for _, tc := range []struct {
		name  string
		pid   int
		start uint64
		want  string
	}{
		{"alive", pid, start, StateRunning},
		{"dead pid", dead, 12345, StateInterrupted},
		{"pid reused", pid, start + 1, StateInterrupted},
		{"no pid", 0, 0, StateInterrupted},
		// Killed but not reaped: same pid, same start time, and yet it runs nothing.
		{"zombie", zpid, zstart, StateInterrupted},
	} {
		r, err := s.Create(Meta{Project: "/p", PID: tc.pid, PIDStart: tc.start})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(r.Meta.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Meta.State != tc.want {
			t.Errorf("%s: state %q, want %q", tc.name, got.Meta.State, tc.want)
		}
	}
}

func TestCorruptListed(t *testing.T) {
	s := Store{Root: t.TempDir()}
	r, err := s.Create(Meta{Project: "/p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, metaFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Meta.State != StateCorrupt {
		t.Fatalf("List = %v, %v; want one corrupt run", list, err)
	}
}

func TestUpdateAtomicAndConcurrent(t *testing.T) {
	s := Store{Root: t.TempDir()}
	r, err := s.Create(Meta{Project: "/p"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := &Run{Dir: r.Dir, Meta: r.Meta}
			if err := rr.Update(func(m *Meta) error { m.ExitCode++; return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := Load(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.ExitCode != 20 {
		t.Errorf("after 20 locked increments ExitCode = %d: updates were lost", got.Meta.ExitCode)
	}
	ents, _ := os.ReadDir(r.Dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	if err := r.Update(func(m *Meta) error { m.ID = "x"; return nil }); err == nil {
		t.Error("Update allowed changing the id")
	}
}

func TestRemoveIf(t *testing.T) {
	s := Store{Root: t.TempDir()}
	states := []string{StateDiscarded, StateApplied, StateExported, StateExited, StateInterrupted, StateRunning}
	byState := map[string]*Run{}
	for _, st := range states {
		r, err := s.Create(Meta{Project: "/p"})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Update(func(m *Meta) error {
			m.State = st
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// A directory without permissions, as an overlay's work dir leaves behind.
		if err := os.MkdirAll(filepath.Join(r.Dir, "work", "work"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(r.Dir, "work", "work"), 0); err != nil {
			t.Fatal(err)
		}
		byState[st] = r
	}
	for st, r := range byState {
		// The predicate sees the state as it is now: a run recorded as running whose cordon is
		// gone is interrupted.
		want := st
		if st == StateRunning {
			want = StateInterrupted
		}
		removed, err := r.RemoveIf(func(m Meta) (bool, error) {
			if m.State != want {
				t.Errorf("%s run: predicate saw %q", st, m.State)
			}
			return st == StateDiscarded || st == StateApplied, nil
		})
		if err != nil {
			t.Fatalf("%s run: %v", st, err)
		}
		_, serr := os.Stat(r.Dir)
		if gone := errors.Is(serr, os.ErrNotExist); gone != removed || removed != (st == StateDiscarded || st == StateApplied) {
			t.Errorf("%s run: removed=%v gone=%v", st, removed, gone)
		}
	}
	if _, err := byState[StateExited].RemoveIf(func(Meta) (bool, error) { return true, errors.New("boom") }); err == nil {
		t.Error("RemoveIf hid the predicate's error")
	}
	list, _ := s.List()
	if len(list) != 4 {
		t.Errorf("after removal %d runs listed, want 4", len(list))
	}
	ents, _ := os.ReadDir(filepath.Join(s.Root, runsDir))
	if len(ents) != 4 {
		t.Errorf("runs directory holds %d entries, want 4 (no trash left behind)", len(ents))
	}
}

func TestProcessStartOddName(t *testing.T) {
	// A command name with spaces and parentheses must not shift the fields.
	dir := t.TempDir()
	exe := filepath.Join(dir, "a b) c")
	if err := os.Symlink("/bin/sleep", exe); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	st, err := ProcessStart(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := ProcessStart(os.Getpid())
	if st < self {
		t.Errorf("child start %d before parent start %d: wrong field parsed", st, self)
	}
}

// TestCreateLazyThenSync: a lazily created run is complete for readers at once (List, Load, Update
// see it), and Sync makes it durable without changing it.
func TestCreateLazyThenSync(t *testing.T) {
	s := Store{Root: t.TempDir()}
	r, err := s.CreateLazy(Meta{Project: "/p", Command: []string{"agent"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomicLazy(filepath.Join(r.Dir, "other.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.ID != r.Meta.ID || got.Meta.Project != "/p" {
		t.Fatalf("loaded %+v, want the created run", got.Meta)
	}
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(3); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Meta.State != StateExited || list[0].Meta.ExitCode != 3 {
		t.Fatalf("List = %+v, %v; want one exited run with code 3", list, err)
	}
	if b, err := os.ReadFile(filepath.Join(r.Dir, "other.json")); err != nil || string(b) != "{}\n" {
		t.Fatalf("other.json = %q, %v", b, err)
	}
	// Sync of a run whose directory is gone says so.
	if err := os.RemoveAll(r.Dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(); err == nil {
		t.Fatal("Sync of a removed run succeeded")
	}
}

// TestFinishLazy: a lazy finish is what readers see at once, the state change stamped like Finish's;
// SyncMeta makes it durable and, on a removed run, says it could not.
func TestFinishLazy(t *testing.T) {
	s := Store{Root: t.TempDir()}
	r, err := s.CreateLazy(Meta{Project: "/p", Command: []string{"agent"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.FinishLazy(7); err != nil {
		t.Fatal(err)
	}
	got, err := Load(r.Dir)
	if err != nil || got.Meta.State != StateExited || got.Meta.ExitCode != 7 || got.Meta.Ended.IsZero() || got.Meta.StateChanged.IsZero() {
		t.Fatalf("Load = %+v, %v; want an exited run with code 7, its end and state change stamped", got, err)
	}
	if err := r.SyncMeta(); err != nil {
		t.Fatal(err)
	}
	// A file named besides meta.json is synced when it is there, skipped when it is not (a run
	// without a gateway has no audit log).
	if err := os.WriteFile(filepath.Join(r.Dir, "audit.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.SyncMeta("audit.jsonl", "absent.json"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		t.Fatal(err)
	}
	if err := r.SyncMeta(); err == nil {
		t.Fatal("SyncMeta of a removed run succeeded")
	}
}

// TestFinishRemoveIf: the judgement sees the record as it stands before the end (running, or what
// another cordon made it meanwhile); a run it removes is gone, its meta.json never rewritten first;
// a run it keeps has its end on disk. The predicate is run.go's: still the running run.
func TestFinishRemoveIf(t *testing.T) {
	s := Store{Root: t.TempDir()}
	stillRunning := func(m Meta) (bool, error) { return m.State == StateRunning, nil }
	for _, tc := range []struct {
		name       string
		meanwhile  string // a state another cordon recorded during the run, or ""
		wantRemove bool
	}{
		{"unchanged", "", true},
		{"discarded meanwhile", StateDiscarded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, start, err := Self() // the run's cordon: alive, so the run resolves as running
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.CreateLazy(Meta{Project: "/p", Command: []string{"agent"}, PID: pid, PIDStart: start})
			if err != nil {
				t.Fatal(err)
			}
			if tc.meanwhile != "" {
				if err := r.SetState(tc.meanwhile); err != nil {
					t.Fatal(err)
				}
			}
			before, err := os.Stat(filepath.Join(r.Dir, metaFile))
			if err != nil {
				t.Fatal(err)
			}
			removed, err := r.FinishRemoveIf(3, func(m Meta) (bool, error) {
				if want := cmp.Or(tc.meanwhile, StateRunning); m.State != want || !m.Ended.IsZero() {
					t.Errorf("the judgement saw state %q, ended %v; want %q and no end yet", m.State, m.Ended, want)
				}
				if now, err := os.Stat(filepath.Join(r.Dir, metaFile)); err != nil || !os.SameFile(before, now) {
					t.Errorf("meta.json was rewritten before the judgement (%v)", err)
				}
				return stillRunning(m)
			})
			if err != nil || removed != tc.wantRemove {
				t.Fatalf("FinishRemoveIf = %v, %v; want %v", removed, err, tc.wantRemove)
			}
			if removed {
				if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
					t.Fatalf("the removed run's directory: %v", err)
				}
				return
			}
			got, err := Load(r.Dir)
			if err != nil || got.Meta.State != StateExited || got.Meta.ExitCode != 3 || got.Meta.Ended.IsZero() {
				t.Fatalf("the kept run: %+v, %v; want its end written", got, err)
			}
		})
	}
}

// zombie starts a child that exits at once and is not reaped until the test ends, and returns its
// pid and start time: the process a killed cordon leaves while its parent has not waited for it.
func zombie(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		st, err := procStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.state == 'Z' {
			return pid, st.start
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not become a zombie (state %c)", pid, st.state)
		}
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		state     byte
		start     uint64
		wantError bool
	}{
		{"running", "12 (sh) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 19 20", 'R', 777, false},
		{"zombie", "12 (cordon) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 778 0 0", 'Z', 778, false},
		{"name with ) and spaces", "12 (a ) Z b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 779 0", 'S', 779, false},
		{"short", "12 (sh) R 1 2", 0, 0, true},
		{"no name", "12 sh R", 0, 0, true},
	} {
		st, err := parseStat(12, tc.in)
		if (err != nil) != tc.wantError {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.wantError)
			continue
		}
		if err == nil && (st.state != tc.state || st.start != tc.start) {
			t.Errorf("%s: got %c %d, want %c %d", tc.name, st.state, st.start, tc.state, tc.start)
		}
	}
}
