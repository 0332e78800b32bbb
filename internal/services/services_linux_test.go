package services

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

var runstateSelf = runstate.Self

// testIDs are the ids the servers run as in these tests: as root an id no account owns (as cordon
// picks from its reserved range), otherwise the caller's own.
func testIDs() IDs {
	if os.Getuid() == 0 {
		return IDs{UID: 2000065000, GID: 2000065000, Switch: true}
	}
	return IDs{}
}

// testOptions makes a project with the given files and short runtime and template directories.
func testOptions(t *testing.T, files map[string]string) Options {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o711); err != nil { // the servers' id passes through to Runtime
			t.Fatal(err)
		}
	}
	project := filepath.Join(root, "p")
	for name, body := range files {
		p := filepath.Join(project, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(project, 0o755)
	return Options{Runtime: filepath.Join(root, "rt"), Templates: filepath.Join(root, "tmpl"), RunID: "run1",
		Project: project, Path: os.Getenv("PATH"), IDs: testIDs()}
}

// need fails the test when a server's package is missing: .ci/run installs them.
func need(t *testing.T, kind string) Binaries {
	t.Helper()
	b, err := Find(kind, os.Getenv("PATH"))
	if err != nil {
		t.Fatalf("%v (.ci/run installs it)", err)
	}
	return b
}

func psql(t *testing.T, srv *Server, sql string) (string, error) {
	t.Helper()
	bins := need(t, "postgres")
	user, pass := "app", strings.TrimPrefix(strings.Split(srv.URL, "@")[0], "postgres://app:")
	db := srv.URL[strings.LastIndex(srv.URL, "/")+1:]
	cmd := exec.Command(bins.Path("psql"), "-X", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql)
	cmd.Env = pgEnv(filepath.Dir(srv.Socket), user, pass, db)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestPostgresFixtures(t *testing.T) {
	need(t, "postgres")
	opts := testOptions(t, map[string]string{
		"db/schema.sql": "CREATE TABLE users (id int PRIMARY KEY, name text);\n",
		"db/seed.sql":   "INSERT INTO users VALUES (1, 'ada'), (2, 'grace');\n",
	})
	var events []Event
	opts.Event = func(e Event) { events = append(events, e) }
	set, err := Start(context.Background(), opts, []Spec{{Name: "db", Kind: "postgres", Fixtures: []string{"db/schema.sql", "db/seed.sql"},
		Database: "app", User: "app", Where: "p.yaml:3"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := set.Servers()[0]
	if out, err := psql(t, srv, "SELECT name FROM users ORDER BY id"); err != nil || out != "ada\ngrace" {
		t.Errorf("fixture rows: %q, %v", out, err)
	}
	if out, err := psql(t, srv, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"); err != nil || out != "f" {
		t.Errorf("the run's role is a superuser: %q, %v", out, err)
	}
	t.Logf("%s %s events %+v", srv.Version, srv.URL, events)
	dir := filepath.Join(opts.Runtime, opts.RunID)
	if err := set.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's data is still there: %v", err)
	}
}

// TestSweep: a run directory whose owner (pid and start time) is gone is removed, a live owner's is
// kept, and so is a directory still being made (no owner yet).
func TestSweep(t *testing.T) {
	rt := t.TempDir()
	mk := func(name, owner string) string {
		d := filepath.Join(rt, name)
		if err := os.MkdirAll(filepath.Join(d, "db", "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	pid, start, err := runstateSelf()
	if err != nil {
		t.Fatal(err)
	}
	live := mk("live", fmt.Sprintf("%d %d\n", pid, start))
	dead := mk("dead", fmt.Sprintf("%d %d\n", pid, start+1)) // the same pid, another process's start
	young := mk("young", "")
	if err := Sweep(rt); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{live: true, dead: false, young: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
