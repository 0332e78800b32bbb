package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// MariaDB (or MySQL's mysqld where Debian's MariaDB is not installed) runs like PostgreSQL: from a
// template data directory made once per server version, user and database, copied (or overlaid) for
// each run, a unix socket its only listener. The run's user holds every privilege on its database
// and nothing global: no FILE (no server-side INTO OUTFILE, LOAD_FILE or LOAD DATA INFILE), no
// SUPER, no GRANT. The template's root, whose password only cordon's state holds, is locked in each
// run's copy once cordon has set the run up, so no connection through the gateway becomes root.

// mysqlSocket is the socket's name in the service's directory.
const mysqlSocket = "mysqld.sock"

// mysqlArgs are the settings every server runs with: no TCP, no durability (the data dies with the
// run), small buffers, nothing read from the host's option files.
func mysqlArgs(bins Binaries, data, dir string) []string {
	return []string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(dir, mysqlSocket),
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"), "--tmpdir=" + dir, "--skip-networking",
		"--skip-name-resolve", "--skip-log-bin", "--performance-schema=OFF", "--innodb-buffer-pool-size=16M",
		"--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", "--innodb-flush-method=nosync",
		"--max-connections=50", "--character-set-server=utf8mb4",
		"--lc-messages-dir=" + filepath.Join(mysqlBase(bins), "share", "mysql")}
}

// mysqlClient is the client's argv and environment for the server in dir (the password in the
// environment, not on a command line another process could read).
func mysqlClient(bins Binaries, dir, user, password, db string) ([]string, []string) {
	argv := []string{bins.Path(bins.Progs[2]), "--no-defaults", "--batch", "--socket=" + filepath.Join(dir, mysqlSocket),
		"--user=" + user, "--default-character-set=utf8mb4"}
	if db != "" {
		argv = append(argv, "--database="+db)
	}
	return argv, []string{"MYSQL_PWD=" + password, "LC_ALL=C.UTF-8"}
}

func startMysql(ctx context.Context, opts Options, sp Spec, runDir string) (*Server, error) {
	bins, err := Find("mysql", opts.Path)
	if err != nil {
		return nil, err
	}
	if err := checkFixtures(opts, sp.Fixtures); err != nil {
		return nil, err
	}
	tmpl, rootPass, err := mysqlTemplate(ctx, opts, bins, sp)
	if err != nil {
		return nil, fmt.Errorf("preparing the template data directory: %w", err)
	}
	dir, sock, err := serviceDir(opts, runDir, sp.Name, mysqlSocket)
	if err != nil {
		return nil, err
	}
	p, err := startOnClone(ctx, opts.IDs, tmpl, dir, filepath.Join(runDir, sp.Name+".log"), syscall.SIGTERM,
		func(data string) []string {
			return append([]string{bins.Path(bins.Progs[0])}, mysqlArgs(bins, data, dir)...)
		},
		func(runData) bool { return accepting(sock) })
	srv := &Server{Name: sp.Name, Kind: sp.Kind, Version: bins.Version, Socket: sock, Port: 3306, proc: p}
	if err != nil {
		return srv, err
	}
	password, err := randomHex(16)
	if err != nil {
		return srv, err
	}
	setup := fmt.Sprintf("ALTER USER '%s'@'localhost' IDENTIFIED BY '%s';\nALTER USER 'root'@'localhost' ACCOUNT LOCK;\n", sp.User, password)
	argv, env := mysqlClient(bins, dir, "root", rootPass, "")
	if err := runClient(ctx, opts.IDs, env, strings.NewReader(setup), argv...); err != nil {
		return srv, fmt.Errorf("setting the run's password: %w", err)
	}
	argv, env = mysqlClient(bins, dir, sp.User, password, sp.Database)
	for _, rel := range sp.Fixtures {
		t0 := time.Now()
		if err := applyMysql(ctx, opts, env, argv, rel); err != nil {
			return srv, err
		}
		if opts.Event != nil {
			opts.Event(Event{Service: sp.Name, Kind: sp.Kind, Action: "fixture", Detail: rel, Duration: time.Since(t0)})
		}
	}
	srv.URL = fmt.Sprintf("mysql://%s:%s@%s.cordon.internal:3306/%s", sp.User, password, sp.Name, sp.Database)
	srv.HostHint = fmt.Sprintf("MYSQL_PWD=%s mariadb --socket=%s --user=%s %s", password, sock, sp.User, sp.Database)
	return srv, nil
}

// applyMysql runs one SQL fixture as the run's user, stopping at the first error, which names the
// fixture and the line the client stopped at.
func applyMysql(ctx context.Context, opts Options, env, argv []string, rel string) error {
	f, err := openFixture(opts.Project, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	err = runClient(ctx, opts.IDs, env, f, argv...)
	var ce *clientError
	if errors.As(err, &ce) {
		return &FixtureError{File: rel, Message: mysqlFixtureMessage(ce.msg, rel)}
	}
	return err
}

// mysqlFixtureMessage turns the client's "ERROR 1146 (42S02) at line 3: Table ... doesn't exist"
// (which it may print after the statement, between dashes) into "FILE:3: ERROR 1146 (42S02): Table
// ... doesn't exist".
func mysqlFixtureMessage(msg, file string) string {
	for _, line := range strings.Split(msg, "\n") {
		head, text, ok := strings.Cut(line, ": ")
		code, at, found := strings.Cut(head, " at line ")
		if ok && strings.HasPrefix(code, "ERROR") {
			if found {
				return fmt.Sprintf("%s:%s: %s: %s", file, at, code, text)
			}
			return line
		}
	}
	return fixtureMessage(msg, "\x00", file)
}

// accepting says whether a server listens on the unix socket at path. The socket's file is not
// enough: the server binds it before it listens, and a client that connects in between is refused
// (ECONNREFUSED). A connection the server has not accepted yet waits in its backlog, so a dial that
// succeeds means the next client's will too.
func accepting(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// mysqlTemplate returns the template data directory for this server version, user and database,
// making it if it is not there yet, and its root's password.
func mysqlTemplate(ctx context.Context, opts Options, bins Binaries, sp Spec) (string, string, error) {
	key := fmt.Sprintf("%s%s-v%d-%s-%s", bins.Progs[0], bins.Major, templateFormat, sp.User, sp.Database)
	return templateFor(opts, key, "mysql", func(tmpl string) (string, error) {
		return buildMysqlTemplate(ctx, opts, bins, sp, tmpl)
	})
}

// buildMysqlTemplate runs mariadb-install-db where the servers' id can reach it, gives root a
// password, removes every other account, creates the run's database and its user, shuts the server
// down cleanly and moves the data directory into the template store.
func buildMysqlTemplate(ctx context.Context, opts Options, bins Binaries, sp Spec, tmpl string) (string, error) {
	work, err := templateWorkDir(opts)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	data := filepath.Join(work, "data")
	if err := runClient(ctx, opts.IDs, []string{"LC_ALL=C.UTF-8"}, nil, bins.Path(bins.Progs[1]), "--no-defaults",
		"--datadir="+data, "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
		"--basedir="+mysqlBase(bins)); err != nil {
		return "", fmt.Errorf("%s: %w", bins.Progs[1], err)
	}
	p, err := spawn(opts.IDs, filepath.Join(work, "server.log"), syscall.SIGTERM, []string{"LC_ALL=C.UTF-8"},
		append([]string{bins.Path(bins.Progs[0])}, mysqlArgs(bins, data, work)...)...)
	if err != nil {
		return "", err
	}
	defer p.stop()
	if err := p.waitReady(ctx, func() bool { return accepting(filepath.Join(work, mysqlSocket)) }); err != nil {
		return "", err
	}
	pw, err := randomHex(24)
	if err != nil {
		return "", err
	}
	// Every account but root@localhost and mariadb.sys (locked: the definer of the system views)
	// goes, the install's socket-authenticated ones among them:
	// what remains is root, for cordon alone, and the run's user, for its database alone.
	setup := fmt.Sprintf("DELETE FROM mysql.global_priv WHERE NOT (User IN ('root', 'mariadb.sys') AND Host = 'localhost');\n"+
		"DELETE FROM mysql.db;\nDELETE FROM mysql.proxies_priv WHERE NOT (User = 'root' AND Host = 'localhost');\nFLUSH PRIVILEGES;\n"+
		"ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('%[3]s');\n"+
		"CREATE DATABASE `%[2]s`;\nCREATE USER '%[1]s'@'localhost';\nGRANT ALL PRIVILEGES ON `%[2]s`.* TO '%[1]s'@'localhost';\n",
		sp.User, sp.Database, pw)
	argv, env := mysqlClient(bins, work, "root", "", "")
	if err := runClient(ctx, opts.IDs, env, strings.NewReader(setup), argv...); err != nil {
		return "", fmt.Errorf("creating user %s and database %s: %w", sp.User, sp.Database, err)
	}
	if err := p.stop(); err != nil {
		return "", err
	}
	return pw, storeTemplate(ctx, data, tmpl, pw)
}

// mysqlBase is the installation's base directory (/usr for Debian's): the installer's bin/ is in it.
func mysqlBase(bins Binaries) string { return filepath.Dir(filepath.Dir(bins.Path(bins.Progs[1]))) }

// minorVersion is the part of a MariaDB version its data directory is bound to ("10.11").
func minorVersion(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// templateWorkDir is a directory of the servers' id below Runtime (which they can reach, unlike
// cordon's state) in which a template is made; Sweep removes one a killed cordon left.
func templateWorkDir(opts Options) (string, error) {
	mode := os.FileMode(0o700)
	if opts.IDs.Switch {
		mode = 0o711
	}
	if err := mkdirAll(opts.Runtime, mode); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(opts.Runtime, ".template-")
	if err != nil {
		return "", err
	}
	if err := chownTree(opts.IDs, work); err != nil {
		os.RemoveAll(work)
		return "", err
	}
	return work, nil
}

// storeTemplate moves a stopped server's data directory into the template store, with the password
// cordon logs in with beside it, replacing what was there.
func storeTemplate(ctx context.Context, data, tmpl, pw string) error {
	next := tmpl + ".new"
	os.RemoveAll(next)
	if err := copyTree(ctx, data, next); err != nil {
		return err
	}
	if err := os.WriteFile(tmpl+".password", []byte(pw+"\n"), 0o600); err != nil {
		return err
	}
	os.RemoveAll(tmpl)
	return os.Rename(next, tmpl)
}

// mysqlNames are the programs of a MySQL (or older MariaDB) installation, used where MariaDB's own
// names are missing.
var mysqlNames = []string{"mysqld", "mysql_install_db", "mysql"}

// findMysql looks for each of MariaDB's programs, else MySQL's, in the first of dirs that has it.
func findMysql(dirs []string) (Binaries, error) {
	for _, progs := range [][]string{required["mysql"], mysqlNames} {
		b := Binaries{Kind: "mysql", Progs: progs, paths: map[string]string{}}
		for _, prog := range progs {
			for _, d := range dirs {
				if d != "" && filepath.IsAbs(d) && allIn(d, []string{prog}) {
					b.paths[prog] = filepath.Join(d, prog)
					break
				}
			}
		}
		if len(b.paths) < len(progs) {
			continue
		}
		server := b.paths[progs[0]]
		b.Dir = filepath.Dir(server)
		out, err := exec.Command(server, "--version").Output()
		if err != nil {
			return Binaries{}, fmt.Errorf("%s --version: %w", server, err)
		}
		if b.Version = parseVersion("mysql", out); b.Version == "" {
			return Binaries{}, fmt.Errorf("%s --version: no version in %q", server, bytes.TrimSpace(out))
		}
		b.Major = minorVersion(b.Version)
		return b, nil
	}
	return Binaries{}, fmt.Errorf("mysql is not installed: %s (or %s) not found (install the Debian packages mariadb-server and mariadb-client)",
		strings.Join(required["mysql"], ", "), strings.Join(mysqlNames, ", "))
}
