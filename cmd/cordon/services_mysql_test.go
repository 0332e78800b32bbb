//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The MariaDB service's tests: a real mariadbd from Debian's mariadb-server, the real mariadb
// client inside the sandbox, through the gateway's NAME.cordon.internal:3306 mapping.

const mysqlPolicy = `services:
  shop:
    mysql: {fixtures: [db/my-schema.sql, db/my-seed.sql]}
    env: MYSQL_URL
`

// mysqlClient is a shell prologue that splits $MYSQL_URL (mysql://USER:PASS@HOST:PORT/DB) for the
// mariadb client, which takes no URL, into the function my.
const mysqlClient = `u=${MYSQL_URL#mysql://}; user=${u%%:*}; u=${u#*:}; pw=${u%%@*}; u=${u#*@}; host=${u%%:*}; u=${u#*:}; port=${u%%/*}; db=${u#*/}
my() { mariadb --skip-column-names -h "$host" -P "$port" -u "$user" -p"$pw" "$db" -e "$1" 2>&1; }
`

// requireMysql fails (never skips) when MariaDB is missing: .ci/run installs it.
func requireMysql(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"/usr/sbin/mariadbd", "/usr/bin/mariadb-install-db", "/usr/bin/mariadb"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s: %v (.ci/run installs mariadb-server and mariadb-client)", tool, err)
		}
	}
}

func (h *harness) mysqlFixtures() {
	h.writeFile(filepath.Join(h.ws, "db", "my-schema.sql"), "CREATE TABLE users (id int PRIMARY KEY, name varchar(20) NOT NULL);\n", 0o644)
	h.writeFile(filepath.Join(h.ws, "db", "my-seed.sql"), "INSERT INTO users VALUES (1, 'ada');\nINSERT INTO users VALUES (2, 'grace');\n", 0o644)
}

// TestServicesMysql: the agent's mariadb client finds the fixtures' rows at the URL cordon put in
// its environment and its writes work; the server-side file access a FILE privilege gives is
// refused (LOAD_FILE reads nothing, INTO OUTFILE is denied: the control, root doing the same on a
// copy of the template, is TestMysqlFixtures in internal/services); while it runs, the server holds
// no TCP socket of the host's and runs in a network namespace of its own, never as root; after the
// run nothing of it is left and a second run sees the fixtures alone, where root cannot log in.
func TestServicesMysql(t *testing.T) {
	requireMysql(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.mysqlFixtures()
		before := h.svcDirs()
		outfile := filepath.Join(os.TempDir(), "cordon-my-"+h.canary)
		defer os.Remove(outfile)
		script := mysqlClient + `my "SELECT GROUP_CONCAT(name ORDER BY id) FROM users"
my "INSERT INTO users VALUES (3, 'run-write'); SELECT COUNT(*) FROM users"
my "SELECT CONCAT('LOAD:', COALESCE(LOAD_FILE('/etc/passwd'), 'NULL'))"
my "SELECT 'x' INTO OUTFILE '` + outfile + `'"
my "SELECT COUNT(*) FROM mysql.user"
echo "URL=$MYSQL_URL"`
		run := h.startHeld(t, mysqlPolicy, script)
		out := run.until(t, "READY")
		for _, want := range []string{"ada,grace\n", "3\n", "LOAD:NULL\n", "ERROR 1227 (42000) at line 1: Access denied; you need (at least one of) the FILE privilege", "SELECT command denied to user 'app'@'localhost'",
			"URL=mysql://app:", "@shop.cordon.internal:3306/app\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s\nstderr: %s", want, out, run.stderr.String())
			}
		}
		if _, err := os.Stat(outfile); err == nil {
			t.Errorf("INTO OUTFILE wrote %s", outfile)
		}
		dirs := newDirs(before, h.svcDirs())
		if len(dirs) != 1 {
			t.Fatalf("want one new run directory in %s, got %v", h.svcRuntime(), dirs)
		}
		pids := serverPids(filepath.Join(h.svcRuntime(), dirs[0]))
		if len(pids) != 1 {
			t.Fatalf("want the mariadbd process, found %v", pids)
		}
		hostTCP := tcpInodes("/proc/self/net/tcp", "/proc/self/net/tcp6")
		hostNet, _ := os.Readlink("/proc/self/ns/net")
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pids[0])); ns == hostNet || ns == "" {
			t.Errorf("mariadbd shares the host's network namespace (%q)", ns)
		}
		for _, ino := range socketInodes(pids[0]) {
			if hostTCP[ino] {
				t.Errorf("mariadbd holds a TCP socket of the host's network namespace")
			}
		}
		if status, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/status"); err != nil || strings.Contains(string(status), "\nUid:\t0\t") {
			t.Errorf("mariadbd runs as root: %v", err)
		}
		if rest := run.finish(t); !strings.Contains(rest, "AFTER") {
			t.Errorf("the held command did not end: %s", rest)
		}
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("the run's server data is left in %s: %v", h.svcRuntime(), left)
		}
		// The template's root, with its password (read here from cordon's state, where the agent
		// cannot), is locked in the run's copy; cordon logged in with the same password to set the
		// run up (the control: the run started).
		pwFiles, _ := filepath.Glob(filepath.Join(h.home, ".local", "state", "cordon", "service-templates", "mariadbd*-app-app.password"))
		if len(pwFiles) != 1 {
			t.Fatalf("want the template's root password file, found %v", pwFiles)
		}
		pw, err := os.ReadFile(pwFiles[0])
		if err != nil {
			t.Fatal(err)
		}
		r := h.sandboxed(mysqlPolicy+"env:\n  set: {SUPER: "+strings.TrimSpace(string(pw))+"}\n",
			mysqlClient+`my "SELECT COUNT(*) FROM users"; user=root; pw="$SUPER"; db=mysql; my "SELECT 1"; true`)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "2\n") {
			t.Errorf("second run: want the fixtures alone (2 rows):\n%s", r)
		}
		if !strings.Contains(r.stdout, "this account is locked") {
			t.Errorf("the template's root logs in from the sandbox:\n%s", r)
		}
	})
}

// TestServicesMysqlBrokenFixture: a fixture MariaDB refuses stops the start with exit 125, naming
// the fixture, its line and the server's message; the command never runs. The control is the same
// policy with the fixture fixed.
func TestServicesMysqlBrokenFixture(t *testing.T) {
	requireMysql(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.mysqlFixtures()
		h.writeFile(filepath.Join(h.ws, "db", "my-seed.sql"), "INSERT INTO users VALUES (1, 'ada');\n\nINSERT INTO nosuch VALUES (2);\n", 0o644)
		before := h.svcDirs()
		r := h.sandboxed(mysqlPolicy, "echo COMMAND-RAN")
		if r.code != 125 || strings.Contains(r.stdout, "COMMAND-RAN") {
			t.Fatalf("want exit 125 and the command not run:\n%s", r)
		}
		if !strings.Contains(r.stderr, "services.shop (") || !strings.Contains(r.stderr, "fixture db/my-seed.sql:3: ERROR 1146 (42S02): Table 'app.nosuch' doesn't exist") {
			t.Errorf("the error does not name the service, the fixture, its line and the server's message:\n%s", r)
		}
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("a failed start left server data: %v", left)
		}
		h.mysqlFixtures()
		if r := h.sandboxed(mysqlPolicy, "echo COMMAND-RAN"); r.code != 0 || !strings.Contains(r.stdout, "COMMAND-RAN") {
			t.Errorf("control: fixed fixtures do not start:\n%s", r)
		}
	})
}
