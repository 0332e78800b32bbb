package runstate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProjectOf(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"repo/.git", "repo/sub/deep", "plain/sub", "linked/x"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A linked work tree or a submodule has a .git file.
	if err := os.WriteFile(filepath.Join(base, "linked", ".git"), []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{"repo", "repo"},
		{"repo/sub/deep", "repo"},
		{"repo/sub/deep/", "repo"},
		{"plain/sub", "plain/sub"},
		{"plain", "plain"},
		{"linked/x", "linked"},
	} {
		if got := ProjectOf(filepath.Join(base, tc.dir)); got != filepath.Join(base, tc.want) {
			t.Errorf("ProjectOf(%s) = %s, want %s", tc.dir, got, filepath.Join(base, tc.want))
		}
	}
}

func TestFindScopedToProject(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	for _, d := range []string{a + "/.git", a + "/sub", b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := Store{Root: filepath.Join(base, "state")}
	mk := func(project string, started time.Time) *Run {
		t.Helper()
		r, err := s.Create(Meta{Project: project, Started: started, State: StateExited})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	now := time.Now()
	a1 := mk(a, now.Add(-3*time.Hour))
	a2 := mk(filepath.Join(a, "sub"), now.Add(-2*time.Hour)) // a run of a's subdirectory is a's
	b1 := mk(b, now.Add(-time.Hour))                         // the newest run overall

	for _, tc := range []struct {
		name, arg, project string
		want               *Run
		err                error
	}{
		{"last of a skips b's newer run", Last, a, a2, nil},
		{"last of b", Last, b, b1, nil},
		{"last unscoped", Last, "", b1, nil},
		{"full id of another project", b1.Meta.ID, a, b1, nil},
		{"prefix of another project", b1.Meta.ID[:len(b1.Meta.ID)-2], a, nil, ErrOtherProject},
		{"last of a project without runs", Last, filepath.Join(base, "c"), nil, ErrOtherProject},
		{"prefix within the project", a1.Meta.ID[:len(a1.Meta.ID)-1], a, a1, nil},
		{"prefix matching nothing", "ffff", a, nil, ErrNotFound},
		{"not an id", "../x", a, nil, ErrNotFound},
	} {
		got, err := s.Find(tc.arg, tc.project)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got.Meta.ID != tc.want.Meta.ID {
			t.Errorf("%s: got %v, %v; want %s", tc.name, got, err, tc.want.Meta.ID)
		}
	}
	// The refusal names the run and its project, so the user can decide.
	_, err := s.Find(Last, b+"-other")
	if err == nil || !strings.Contains(err.Error(), b1.Meta.ID) || !strings.Contains(err.Error(), b) {
		t.Errorf("refusal does not name the other project's run: %v", err)
	}
	// Runs started within the same second share a prefix: ambiguity is reported within the project.
	if _, err := s.Find("2", a); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if _, err := s.Find("2", b); err != nil {
		t.Errorf("a prefix unique within the project is ambiguous only across projects: %v", err)
	}
	if _, err := (Store{Root: filepath.Join(base, "empty")}).Find(Last, a); !errors.Is(err, ErrNotFound) {
		t.Errorf("empty store: %v", err)
	}

	got, err := s.ListProject(a)
	if err != nil || len(got) != 2 || got[0].Meta.ID != a2.Meta.ID || got[1].Meta.ID != a1.Meta.ID {
		t.Errorf("ListProject(a) = %v, %v", got, err)
	}
}
