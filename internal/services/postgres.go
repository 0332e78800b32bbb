package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// superuser is the template cluster's bootstrap role. Only cordon logs in as it, with a password
// kept in cordon's state, to set the run's password; each run then makes it NOLOGIN before the agent
// starts, so no connection through the gateway can become superuser (COPY ... TO PROGRAM would run
// commands on the host as the server's id).
const superuser = "cordon"

// postgresArgs are the settings every cluster runs with: a unix socket only, and no durability,
// which a fixture that dies with the run does not need.
func postgresArgs(data, sockDir string) []string {
	return []string{"-D", data, "-k", sockDir, "-p", "5432",
		"-c", "listen_addresses=", "-c", "unix_socket_permissions=0700",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=50", "-c", "shared_buffers=32MB", "-c", "logging_collector=off",
		"-c", "dynamic_shared_memory_type=posix", "-c", "shared_preload_libraries="}
}

// pgEnv is a client's environment for a cluster whose socket is in sockDir.
func pgEnv(sockDir, user, password, db string) []string {
	return []string{"PGHOST=" + sockDir, "PGPORT=5432", "PGUSER=" + user, "PGPASSWORD=" + password,
		"PGDATABASE=" + db, "PGCONNECT_TIMEOUT=10", "LC_ALL=C.UTF-8", "PGAPPNAME=cordon", "PGSSLMODE=disable"}
}

func startPostgres(ctx context.Context, opts Options, sp Spec, runDir string) (*Server, error) {
	bins, err := Find("postgres", opts.Path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range append([]string{sp.Restore}, sp.Fixtures...) {
		if f != "" {
			files = append(files, f)
		}
	}
	if err := checkFixtures(opts, files); err != nil {
		return nil, err
	}
	tmpl, superPass, err := pgTemplate(ctx, opts, bins, sp)
	if err != nil {
		return nil, fmt.Errorf("preparing the template cluster: %w", err)
	}
	dir, sock, err := serviceDir(opts, runDir, sp.Name, ".s.PGSQL.5432")
	if err != nil {
		return nil, err
	}
	p, err := startOnClone(ctx, opts.IDs, tmpl, dir, filepath.Join(runDir, sp.Name+".log"), syscall.SIGQUIT,
		func(data string) []string { return append([]string{bins.Path("postgres")}, postgresArgs(data, dir)...) },
		func(rd runData) bool { return pgReady(rd.ready) })
	srv := &Server{Name: sp.Name, Kind: sp.Kind, Version: bins.Version, Socket: sock, Port: 5432, proc: p}
	if err != nil {
		return srv, err
	}
	password, err := randomHex(16)
	if err != nil {
		return srv, err
	}
	setup := fmt.Sprintf("ALTER ROLE %s PASSWORD '%s';\nALTER ROLE %s NOLOGIN;\n", sp.User, password, superuser)
	if err := runClient(ctx, opts.IDs, pgEnv(dir, superuser, superPass, "template1"), strings.NewReader(setup),
		bins.Path("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"); err != nil {
		return srv, fmt.Errorf("setting the run's password: %w", err)
	}
	env := pgEnv(dir, sp.User, password, sp.Database)
	for _, f := range files {
		t0 := time.Now()
		action := "fixture"
		if f == sp.Restore {
			action = "restore"
		}
		if err := applyPostgres(ctx, opts, bins, env, f, action == "restore"); err != nil {
			return srv, err
		}
		if opts.Event != nil {
			opts.Event(Event{Service: sp.Name, Kind: sp.Kind, Action: action, Detail: f, Duration: time.Since(t0)})
		}
	}
	srv.URL = fmt.Sprintf("postgres://%s:%s@%s.cordon.internal:5432/%s", sp.User, password, sp.Name, sp.Database)
	srv.HostHint = fmt.Sprintf("psql 'host=%s port=5432 user=%s password=%s dbname=%s'", dir, sp.User, password, sp.Database)
	return srv, nil
}

// runData is a run's data directory: data as the server sees it, ready where cordon reads the
// server's postmaster.pid, and ov the overlay the server's helper mounts, if it does.
type runData struct {
	data, ready string
	ov          *nsOverlay
}

// cloneTemplate makes the run's data directory from the template below dir, never writing the
// template: as root an overlay on it mounted here (Stop and Sweep unmount it), or, if that mount
// fails, a copy; as an ordinary user an overlay the server's helper mounts in its own user and mount
// namespace, which only the server sees and which ends with it (upper then holds every file the
// server writes, postmaster.pid among them).
func cloneTemplate(ctx context.Context, ids IDs, tmpl, dir string) (runData, error) {
	data := filepath.Join(dir, "data")
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	err := privateDir(ids, upper)
	if err == nil {
		err = os.Mkdir(work, 0o700)
	}
	if err == nil {
		err = os.Mkdir(data, 0o700)
	}
	if err == nil {
		if !ids.Switch {
			return runData{data: data, ready: upper, ov: &nsOverlay{Lower: tmpl, Upper: upper, Work: work, Target: data}}, nil
		}
		// The template's root is 0700 for the server's id; the copy's root is upper's.
		if err = mountOverlay(tmpl, upper, work, data); err == nil {
			return runData{data: data, ready: data}, nil
		}
	}
	return copyInstead(ctx, runData{data: data}, tmpl)
}

// startOnClone makes a run's data directory from tmpl below dir (cloneTemplate), starts the server
// argv gives for the data directory it sees, and waits until ready says so. Where the server's helper
// could not mount the overlay, it starts the server again on a copy, the kernel's reason logged. The
// process comes back with an error too, for Stop to end.
func startOnClone(ctx context.Context, ids IDs, tmpl, dir, logPath string, stopSig syscall.Signal,
	argv func(data string) []string, ready func(runData) bool) (*process, error) {
	rd, err := cloneTemplate(ctx, ids, tmpl, dir)
	if err != nil {
		return nil, err
	}
	start := func() (*process, error) {
		p, err := spawnOn(ids, rd.ov, logPath, stopSig, []string{"LC_ALL=C.UTF-8"}, argv(rd.data)...)
		if err != nil {
			return nil, err
		}
		return p, p.waitReady(ctx, func() bool { return ready(rd) })
	}
	p, err := start()
	if err != nil && rd.ov != nil && p.exitCode() == mountRefused {
		slog.Warn("services: no overlay on the template in the server's namespace; copying it", "server", p.name,
			"reason", strings.TrimPrefix(logTail(p.log), mountRefusedPrefix))
		if rd, err = copyInstead(ctx, rd, tmpl); err != nil {
			return p, err
		}
		p, err = start()
	}
	return p, err
}

// copyInstead replaces an overlay's directories with a copy of the template.
func copyInstead(ctx context.Context, rd runData, tmpl string) (runData, error) {
	dir := filepath.Dir(rd.data)
	for _, d := range []string{"upper", "work", "data"} {
		if err := runstate.RemoveAll(filepath.Join(dir, d)); err != nil {
			return rd, err
		}
	}
	return runData{data: rd.data, ready: rd.data}, copyTree(ctx, tmpl, rd.data)
}

// applyPostgres runs one fixture as the database's owner: an SQL script through psql (stopping at
// the first error), or a pg_dump archive through pg_restore. The error names the fixture and, for
// SQL, the line psql stopped at.
func applyPostgres(ctx context.Context, opts Options, bins Binaries, env []string, rel string, restore bool) error {
	f, err := openFixture(opts.Project, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	if restore {
		err = runClient(ctx, opts.IDs, env, f, bins.Path("pg_restore"), "--no-owner", "--no-privileges", "--exit-on-error", "-d", envValue(env, "PGDATABASE"))
	} else {
		err = runClient(ctx, opts.IDs, env, f, bins.Path("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-")
	}
	var ce *clientError
	if errors.As(err, &ce) {
		return &FixtureError{File: rel, Message: fixtureMessage(ce.msg, "psql:<stdin>:", rel)}
	}
	return err
}

// FixtureError is a fixture the server refused: the run does not start.
type FixtureError struct {
	// File is the fixture's path in the project; Message is the server's, with the line where it
	// has one ("db/seed.sql:3: ERROR:  relation ... does not exist").
	File, Message string
}

func (e *FixtureError) Error() string {
	if strings.HasPrefix(e.Message, e.File+":") {
		return "fixture " + e.Message
	}
	return fmt.Sprintf("fixture %s: %s", e.File, e.Message)
}

// fixtureMessage rewrites a client's name for its input ("psql:<stdin>:3: ERROR: ...") to the
// fixture's, and keeps the first few lines.
func fixtureMessage(msg, prefix, file string) string {
	msg = strings.ReplaceAll(msg, prefix, file+":")
	lines := strings.Split(msg, "\n")
	if len(lines) > 4 {
		lines = lines[:4]
	}
	return strings.Join(lines, "\n")
}

// pgReady reads postmaster.pid, whose eighth line the server sets to "ready" once it accepts
// connections.
func pgReady(data string) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready"
}

// templateFormat is the layout of a template cluster this cordon makes (the roles and databases in
// it, its WAL segment size); a change makes new templates rather than reuse old ones.
const templateFormat = 2

// pgTemplate returns the template cluster for this server version, role and database, making it
// (initdb, the role and database created) if it is not there yet, and the superuser's password.
func pgTemplate(ctx context.Context, opts Options, bins Binaries, sp Spec) (string, string, error) {
	key := fmt.Sprintf("postgres%s-v%d-%s-%s", bins.Major, templateFormat, sp.User, sp.Database)
	return templateFor(opts, key, "PG_VERSION", func(tmpl string) (string, error) {
		return buildPgTemplate(ctx, opts, bins, sp, tmpl)
	})
}

// templateFor returns the template key names in the template store, with the password cordon logs
// in with, making it with build if it is not there yet (marker, a path in it, says it is).
// Concurrent runs make it once: the first takes a lock, the others wait for it.
func templateFor(opts Options, key, marker string, build func(tmpl string) (string, error)) (string, string, error) {
	if err := mkdirAll(opts.Templates, 0o700); err != nil {
		return "", "", err
	}
	tmpl := filepath.Join(opts.Templates, key)
	read := func() (string, bool) {
		pw, err := os.ReadFile(tmpl + ".password")
		if _, serr := os.Stat(filepath.Join(tmpl, marker)); err != nil || serr != nil {
			return "", false
		}
		return strings.TrimSpace(string(pw)), true
	}
	if pw, ok := read(); ok {
		return tmpl, pw, nil
	}
	unlock, err := lockFile(tmpl + ".lock")
	if err != nil {
		return "", "", err
	}
	defer unlock()
	if pw, ok := read(); ok {
		return tmpl, pw, nil
	}
	pw, err := build(tmpl)
	return tmpl, pw, err
}

// buildPgTemplate runs initdb in a directory the servers' id can reach (below Runtime), creates the
// role and its database there, shuts the cluster down cleanly and moves it into the template store.
func buildPgTemplate(ctx context.Context, opts Options, bins Binaries, sp Spec, tmpl string) (string, error) {
	work, err := templateWorkDir(opts)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	pw, err := randomHex(24)
	if err != nil {
		return "", err
	}
	if err := writePrivate(opts.IDs, filepath.Join(work, "pw"), []byte(pw+"\n")); err != nil {
		return "", err
	}
	data := filepath.Join(work, "data")
	if err := runClient(ctx, opts.IDs, []string{"LC_ALL=C.UTF-8"}, nil, bins.Path("initdb"), "-D", data, "-U", superuser,
		"--auth=scram-sha-256", "--pwfile="+filepath.Join(work, "pw"), "-E", "UTF8", "--locale=C",
		"--no-sync", "--no-instructions", "--wal-segsize=1"); err != nil {
		return "", fmt.Errorf("initdb: %w", err)
	}
	os.Remove(filepath.Join(work, "pw"))
	p, err := spawn(opts.IDs, filepath.Join(work, "server.log"), syscall.SIGINT, []string{"LC_ALL=C.UTF-8"},
		append([]string{bins.Path("postgres")}, postgresArgs(data, work)...)...)
	if err != nil {
		return "", err
	}
	defer p.stop()
	if err := p.waitReady(ctx, func() bool { return pgReady(data) }); err != nil {
		return "", err
	}
	// The run's role owns its database and is nothing more: no superuser, no roles, no server-side
	// file or program access. It may create databases (test runners make their own), which it then
	// owns. The postgres database goes: nothing needs it, and every run would copy it.
	setup := fmt.Sprintf("CREATE ROLE %[1]s LOGIN NOSUPERUSER CREATEDB NOCREATEROLE NOREPLICATION;\n"+
		"CREATE DATABASE %[2]s OWNER %[1]s;\nDROP DATABASE postgres;\nCHECKPOINT;\n", sp.User, sp.Database)
	if err := runClient(ctx, opts.IDs, pgEnv(work, superuser, pw, "template1"), strings.NewReader(setup),
		bins.Path("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"); err != nil {
		return "", fmt.Errorf("creating role %s and database %s: %w", sp.User, sp.Database, err)
	}
	// A fast shutdown checkpoints, so that each copy starts without recovery.
	if err := p.stop(); err != nil {
		return "", err
	}
	os.Remove(filepath.Join(data, "postmaster.opts"))
	return pw, storeTemplate(ctx, data, tmpl, pw)
}

// lockFile takes an exclusive lock on path (made if missing), waiting for it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// resolveFixture is a fixture's real path, which must be a regular file inside the project however
// links lead.
func resolveFixture(project, rel string) (string, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(project, rel))
	if err != nil {
		return "", fmt.Errorf("fixture %s: %w", rel, err)
	}
	proj, err := filepath.EvalSymlinks(project)
	if err != nil {
		return "", err
	}
	if r, err := filepath.Rel(proj, real); err != nil || !filepath.IsLocal(r) {
		return "", fmt.Errorf("fixture %s leads to %s, outside the project", rel, real)
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("fixture %s is not a regular file", rel)
	}
	return real, nil
}

// openFixture opens a fixture (by cordon, so the server's id needs no access to the project).
func openFixture(project, rel string) (*os.File, error) {
	real, err := resolveFixture(project, rel)
	if err != nil {
		return nil, err
	}
	return os.Open(real)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}
