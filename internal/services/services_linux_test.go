package services

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestTemplateUntouched attacks the template through a run that writes (a table, rows, a vacuum or
// optimize, an update, a clean shutdown): the template's files stay byte-identical, and a second run
// sees none of the first run's rows. As an ordinary user the overlay is the server's own
// (MountMain); as root cordon's. The server holds no capability. The control: the first run itself
// sees its rows. For PostgreSQL and MariaDB, whose data directories both come from templates.
func TestTemplateUntouched(t *testing.T) {
	for _, c := range []struct {
		kind                string
		writes              []string
		count, want, absent string
	}{
		{"postgres", []string{"CREATE TABLE t AS SELECT g AS n FROM generate_series(1, 5000) g", "VACUUM FULL", "UPDATE t SET n = n + 1"},
			"SELECT count(*) FROM t", "5000", "SELECT count(*) FROM pg_tables WHERE tablename = 't'"},
		{"mysql", []string{"CREATE TABLE t (n int); INSERT INTO t VALUES (1), (2), (3), (4), (5000)", "OPTIMIZE TABLE t", "UPDATE t SET n = n + 1"},
			"SELECT count(*) FROM t", "5", "SELECT count(*) FROM information_schema.tables WHERE table_name = 't'"},
	} {
		t.Run(c.kind, func(t *testing.T) { templateUntouched(t, c.kind, c.writes, c.count, c.want, c.absent) })
	}
}

// query runs sql through the server kind's real client as the run's user.
func query(t *testing.T, srv *Server, sql string) (string, error) {
	if srv.Kind == "mysql" {
		pass := strings.TrimPrefix(strings.Split(srv.URL, "@")[0], "mysql://app:")
		return mariadb(t, srv.Socket, "app", pass, "app", sql)
	}
	return psql(t, srv, sql)
}

func templateUntouched(t *testing.T, kind string, writes []string, count, want, absent string) {
	need(t, kind)
	opts := testOptions(t, nil)
	spec := []Spec{{Name: "db", Kind: kind, Database: "app", User: "app", Where: "p.yaml:3"}}
	start := func(run string) (*Set, *Server) {
		o := opts
		o.RunID = run
		set, err := Start(context.Background(), o, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { set.Stop() })
		return set, set.Servers()[0]
	}
	set, srv := start("run1")
	before := hashTree(t, opts.Templates)
	// Nothing was copied: the server sees its data directory as an overlay (as an ordinary user, in
	// its own mount namespace only).
	data := filepath.Join(opts.Runtime, "run1", "db", "data")
	if mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", srv.proc.cmd.Process.Pid)); err != nil || !strings.Contains(string(mi), " "+data+" ") {
		t.Errorf("the server's data directory %s is not a mount (a copy?): %v", data, err)
	}
	// The helper's capabilities (CAP_SYS_ADMIN, CAP_DAC_OVERRIDE in the server's user namespace)
	// are gone before the server runs.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", srv.proc.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		for _, set := range []string{"CapInh:", "CapPrm:", "CapEff:", "CapAmb:"} {
			if v, ok := strings.CutPrefix(line, set); ok && strings.Trim(strings.TrimSpace(v), "0") != "" {
				t.Errorf("the server holds capabilities: %s", line)
			}
		}
	}
	for _, sql := range writes {
		if out, err := query(t, srv, sql); err != nil {
			t.Fatalf("%s: %s: %v", sql, out, err)
		}
	}
	if out, err := query(t, srv, count); err != nil || out != want {
		t.Fatalf("control: the run's own rows: %q, %v", out, err)
	}
	if err := set.Stop(); err != nil { // a clean shutdown writes every page it changed
		t.Fatal(err)
	}
	if after := hashTree(t, opts.Templates); !maps.Equal(before, after) {
		for f, h := range after {
			if before[f] != h {
				t.Errorf("the template changed: %s", f)
			}
		}
		t.Errorf("the template changed (%d files before, %d after)", len(before), len(after))
	}
	_, srv2 := start("run2")
	if out, err := query(t, srv2, absent); err != nil || out != "0" {
		t.Errorf("the second run sees the first run's table: %q, %v", out, err)
	}
}

// hashTree is every regular file's SHA-256 below dir, and every entry's mode.
func hashTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".lock") {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		m[p] = h
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPostgresOverlayRefused: where the overlay cannot be mounted (here a template path overlay's
// options cannot hold, which the helper, or as root cordon, refuses) the run gets a copy and starts.
func TestPostgresOverlayRefused(t *testing.T) {
	need(t, "postgres")
	opts := testOptions(t, map[string]string{"db/seed.sql": "CREATE TABLE t (n int); INSERT INTO t VALUES (7);\n"})
	opts.Templates = filepath.Join(filepath.Dir(opts.Templates), "tm:pl")
	set, err := Start(context.Background(), opts, []Spec{{Name: "db", Kind: "postgres", Fixtures: []string{"db/seed.sql"},
		Database: "app", User: "app", Where: "p.yaml:3"}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	srv := set.Servers()[0]
	if out, err := psql(t, srv, "SELECT n FROM t"); err != nil || out != "7" {
		t.Errorf("fixture rows: %q, %v", out, err)
	}
	data := filepath.Join(opts.Runtime, opts.RunID, "db", "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		t.Errorf("no copy of the template: %v", err)
	}
}

// TestNoWriteThroughLinks: where the servers' id could have put a symbolic link (the log and pid
// files of a template being made, a service's own files), cordon writes nothing through it. The
// control: the same writes at a plain path work.
func TestNoWriteThroughLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"server.log", "server.pid", "redis.conf"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := writePrivate(IDs{}, filepath.Join(dir, "redis.conf"), []byte("x\n")); err == nil {
		t.Error("writePrivate wrote through a link")
	}
	if p, err := spawn(IDs{}, filepath.Join(dir, "server.log"), syscall.SIGTERM, nil, "/bin/true"); err == nil {
		p.stop()
		t.Error("spawn opened its log through a link")
	}
	if err := writeNoFollow(filepath.Join(dir, "server.pid"), []byte("1 1\n")); err == nil {
		t.Error("writeNoFollow wrote through a link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if err := writePrivate(IDs{}, filepath.Join(dir, "plain.conf"), []byte("x\n")); err != nil {
		t.Errorf("control: %v", err)
	}
	p, err := spawn(IDs{}, filepath.Join(dir, "plain.log"), syscall.SIGTERM, nil, "/bin/sleep", "5")
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	p.stop()
	if _, err := os.Stat(filepath.Join(dir, "plain.pid")); err != nil {
		t.Errorf("control: no pid file: %v", err)
	}
}

// TestKillRecordedOnlyOwnPidFiles: Sweep kills a process a pid file names only when cordon wrote
// the file: not through a link, not from a file of another id (a template's work directory belongs
// to the servers' id). The control: the same process, named by a file of cordon's, is killed.
func TestKillRecordedOnlyOwnPidFiles(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer cmd.Process.Kill()
	start, err := runstate.ProcessStart(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Appendf(nil, "%d %d\n", cmd.Process.Pid, start)
	real, forged := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(real, "x.pid"), line, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, "x.pid"), filepath.Join(forged, "link.pid")); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(forged, "other.pid")
		if err := os.WriteFile(other, line, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 2000065000, 2000065000); err != nil {
			t.Fatal(err)
		}
	}
	killRecorded(forged)
	select {
	case <-done:
		t.Fatal("a pid file cordon did not write killed the process")
	case <-time.After(200 * time.Millisecond):
	}
	killRecorded(real)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("control: cordon's own pid file did not kill the process")
	}
}
