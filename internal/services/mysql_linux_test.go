package services

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// mariadb runs sql through the real client on the server's socket, as user with password.
func mariadb(t *testing.T, sock, user, password, db, sql string) (string, error) {
	t.Helper()
	bins := need(t, "mysql")
	argv, env := mysqlClient(bins, filepath.Dir(sock), user, password, db)
	cmd := exec.Command(argv[0], append(argv[1:], "--skip-column-names", "-e", sql)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// mysqlPrivilegeAttacks are server-side file access a FILE privilege would give: reading a host
// file into a query, and writing a query's result to a file the server's id can write.
func mysqlPrivilegeAttacks(outfile string) []string {
	return []string{"SELECT LOAD_FILE('/etc/passwd') IS NOT NULL", "SELECT 'x' INTO OUTFILE '" + outfile + "'"}
}

// TestMysqlFixtures: the fixtures' rows are there for the run's user, which may write its own
// database and nothing else: LOAD_FILE and INTO OUTFILE are refused, as are other databases and
// logging in as root (locked in the run's copy). The control: the same statements work as the
// template's root on a copy of the template, outside any run. After Stop nothing is left.
func TestMysqlFixtures(t *testing.T) {
	bins := need(t, "mysql")
	opts := testOptions(t, map[string]string{
		"db/schema.sql": "CREATE TABLE users (id int PRIMARY KEY, name text);\n",
		"db/seed.sql":   "INSERT INTO users VALUES (1, 'ada'), (2, 'grace');\n",
	})
	sp := Spec{Name: "db", Kind: "mysql", Fixtures: []string{"db/schema.sql", "db/seed.sql"}, Database: "app", User: "app", Where: "p.yaml:3"}
	set, err := Start(context.Background(), opts, []Spec{sp})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	srv := set.Servers()[0]
	pass := strings.TrimPrefix(strings.Split(srv.URL, "@")[0], "mysql://app:")
	if !strings.HasSuffix(srv.URL, "@db.cordon.internal:3306/app") {
		t.Errorf("URL %q", srv.URL)
	}
	q := func(sql string) (string, error) { return mariadb(t, srv.Socket, "app", pass, "app", sql) }
	if out, err := q("SELECT GROUP_CONCAT(name ORDER BY id) FROM users"); err != nil || out != "ada,grace" {
		t.Errorf("fixture rows: %q, %v", out, err)
	}
	if out, err := q("INSERT INTO users VALUES (3, 'w'); SELECT COUNT(*) FROM users"); err != nil || out != "3" {
		t.Errorf("write: %q, %v", out, err)
	}
	outfile := filepath.Join(filepath.Dir(srv.Socket), "out-app")
	attacks := mysqlPrivilegeAttacks(outfile)
	if out, err := q(attacks[0]); err != nil || out != "0" {
		t.Errorf("LOAD_FILE read a host file as the run's user: %q, %v", out, err)
	}
	if out, err := q(attacks[1]); err == nil || !strings.Contains(out, "Access denied") {
		t.Errorf("INTO OUTFILE as the run's user: %q, %v", out, err)
	}
	if _, err := os.Stat(outfile); err == nil {
		t.Errorf("INTO OUTFILE wrote %s", outfile)
	}
	if out, err := q("SELECT COUNT(*) FROM mysql.user"); err == nil || !strings.Contains(out, "denied") {
		t.Errorf("the run's user reads the mysql schema: %q, %v", out, err)
	}
	if out, err := q("SHOW GRANTS"); err != nil || !strings.HasPrefix(out, "GRANT USAGE ON *.* ") || strings.Count(out, "ON *.*") != 1 {
		t.Errorf("the run's user's grants: %q, %v", out, err)
	}
	key := filepath.Join(opts.Templates, bins.Progs[0]+bins.Major+"-v2-app-app")
	rootPW, err := os.ReadFile(key + ".password")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := mariadb(t, srv.Socket, "root", strings.TrimSpace(string(rootPW)), "", "SELECT 1"); err == nil || !strings.Contains(out, "locked") {
		t.Errorf("root logs in to the run's server: %q, %v", out, err)
	}

	// The control: root, on a copy of the template, can do what the run's user could not.
	dir := filepath.Join(opts.Runtime, "control")
	if err := privateDir(opts.IDs, filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(dir), 0o711)
	if err := privateDir(opts.IDs, dir); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, mysqlSocket)
	defer runstate.RemoveAll(dir) // what an overlay leaves in its work directory, as an ordinary user
	defer unmountBelow(dir)
	p, err := startOnClone(context.Background(), opts.IDs, key, dir, filepath.Join(dir, "log"), syscall.SIGTERM,
		func(data string) []string {
			return append([]string{bins.Path(bins.Progs[0])}, mysqlArgs(bins, data, dir)...)
		}, func(runData) bool { return accepting(sock) })
	defer p.stop()
	if err != nil {
		t.Fatal(err)
	}
	rootOut := filepath.Join(dir, "out-root")
	for i, sql := range mysqlPrivilegeAttacks(rootOut) {
		if out, err := mariadb(t, sock, "root", strings.TrimSpace(string(rootPW)), "", sql); err != nil || i == 0 && out != "1" {
			t.Errorf("control: %s as root: %q, %v", sql, out, err)
		}
	}
	if _, err := os.Stat(rootOut); err != nil {
		t.Errorf("control: INTO OUTFILE as root wrote nothing: %v", err)
	}

	runDir := filepath.Join(opts.Runtime, opts.RunID)
	if err := set.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's data is still there: %v", err)
	}
}

// TestMysqlBrokenFixture: an SQL error stops the start, naming the fixture and its line, and
// leaves nothing behind.
func TestMysqlBrokenFixture(t *testing.T) {
	need(t, "mysql")
	opts := testOptions(t, map[string]string{"db/seed.sql": "CREATE TABLE t (id int);\n\nINSERT INTO nosuch VALUES (1);\n"})
	_, err := Start(context.Background(), opts, []Spec{{Name: "db", Kind: "mysql", Fixtures: []string{"db/seed.sql"}, Database: "app", User: "app", Where: "p.yaml:3"}})
	var fe *FixtureError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "fixture db/seed.sql:3: ERROR 1146 (42S02): Table 'app.nosuch' doesn't exist") {
		t.Fatalf("want the fixture's file, line and message, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(opts.Runtime, opts.RunID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed start left the run's data: %v", err)
	}
}

func TestMysqlFixtureMessage(t *testing.T) {
	for in, want := range map[string]string{
		"ERROR 1146 (42S02) at line 3: Table 'app.nosuch' doesn't exist": "f.sql:3: ERROR 1146 (42S02): Table 'app.nosuch' doesn't exist",
		"ERROR 2002 (HY000): Can't connect":                              "ERROR 2002 (HY000): Can't connect",
	} {
		if got := mysqlFixtureMessage(in, "f.sql"); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

// TestFindMysqlMissing: a host without MariaDB or MySQL is refused naming the packages to install.
func TestFindMysqlMissing(t *testing.T) {
	_, err := findMysql([]string{t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "install the Debian packages mariadb-server and mariadb-client") {
		t.Errorf("got %v", err)
	}
}

// TestAcceptingNeedsAListener: a socket bound but not yet listening (what mariadbd has for a moment
// at start) is not ready; the same socket listening is.
func TestAcceptingNeedsAListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), mysqlSocket)
	if accepting(path) {
		t.Fatal("no socket at all, and accepting says yes")
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if accepting(path) {
		t.Fatal("a socket bound but not listening, and accepting says yes")
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	if !accepting(path) {
		t.Fatal("a listening socket, and accepting says no")
	}
}
