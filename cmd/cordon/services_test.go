//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

// The fixture-service tests run real PostgreSQL and Redis servers (Debian's packages, installed by
// .ci/run) and their real clients inside the sandbox (psql, redis-cli), asserting on what the
// servers hold and on what the host shows of them.

const svcSchema = "CREATE TABLE users (id int PRIMARY KEY, name text NOT NULL);\n"
const svcSeed = "INSERT INTO users VALUES (1, 'ada');\nINSERT INTO users VALUES (2, 'grace');\n"

// svcPolicy is a postgres service "db" seeded from db/schema.sql and db/seed.sql and a redis
// service "cache" seeded from db/cache.redis.
const svcPolicy = `services:
  db:
    postgres: {fixtures: [db/schema.sql, db/seed.sql]}
    env: DATABASE_URL
  cache:
    redis: {fixtures: [db/cache.redis]}
    env: REDIS_URL
`

// requireServers fails (never skips) when a server's package is missing: .ci/run installs them.
func requireServers(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"/usr/lib/postgresql", "/usr/bin/psql", "/usr/bin/redis-server", "/usr/bin/redis-cli"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s: %v (.ci/run installs postgresql, postgresql-client, redis-server and redis-tools)", tool, err)
		}
	}
}

func (h *harness) svcFixtures() {
	h.writeFile(filepath.Join(h.ws, "db", "schema.sql"), svcSchema, 0o644)
	h.writeFile(filepath.Join(h.ws, "db", "seed.sql"), svcSeed, 0o644)
	h.writeFile(filepath.Join(h.ws, "db", "cache.redis"), "# greeting\nSET greeting \"hello world\"\nRPUSH queue a b\n", 0o644)
}

// svcRuntime is where this caller's runs keep their servers (as cordon picks it, with no
// XDG_RUNTIME_DIR in the harness's environment).
func (h *harness) svcRuntime() string {
	if h.who.uid == 0 {
		return "/run/cordon/services"
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("cordon-%d", h.who.uid), "services")
}

// svcDirs lists the run directories below the caller's service runtime.
func (h *harness) svcDirs() []string {
	entries, _ := os.ReadDir(h.svcRuntime())
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// newDirs are the entries of after that before lacks.
func newDirs(before, after []string) []string {
	var out []string
	for _, d := range after {
		if !slices.Contains(before, d) {
			out = append(out, d)
		}
	}
	return out
}

// TestServicesFixtures: the agent's psql and redis-cli find the fixtures' data at the URLs cordon
// put in its environment, its writes work, and nothing of them is left after the run: a second run
// sees the fixtures alone, and no server directory remains. A production URL in the caller's
// environment and in the project's .env never reaches the agent: it gets the fixture's. In both
// tiers: the servers and the gateway are outside the box either way.
func TestServicesFixtures(t *testing.T) {
	requireServers(t)
	forEachTier(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		// Split at the password, so that this file holds no connection string itself.
		prod := "postgres://admin:" + "hunter2@prod.example.com/app"
		h.writeFile(filepath.Join(h.ws, ".env"), "DATABASE_URL="+prod+"\n", 0o644)
		before := h.svcDirs()
		script := `echo "ENV=$(cat .env)"; psql -X -tA "$DATABASE_URL" -c "SELECT string_agg(name, ',' ORDER BY id) FROM users" &&
psql -X -tA -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "INSERT INTO users VALUES (3, 'run-write')" -c "SELECT count(*) FROM users" &&
redis-cli --no-auth-warning -u "$REDIS_URL" GET greeting &&
redis-cli --no-auth-warning -u "$REDIS_URL" LRANGE queue 0 -1 &&
redis-cli --no-auth-warning -u "$REDIS_URL" SET written yes &&
echo "URL=$DATABASE_URL"`
		r := h.sandboxed(svcPolicy, script, "DATABASE_URL="+prod)
		if r.code != 0 {
			t.Fatalf("run:\n%s", r)
		}
		if strings.Contains(r.stdout, "prod.example.com") || !strings.Contains(r.stdout, "ENV=\n") {
			t.Errorf("the production URL reached the agent:\n%s", r)
		}
		for _, want := range []string{"ada,grace\n", "INSERT 0 1\n3\n", "hello world\n", "a\nb\n", "OK\n", "URL=postgres://app:", "@db.cordon.internal:5432/app\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r)
			}
		}
		for _, want := range []string{"service db: postgres ", "at db.cordon.internal:5432, seeded from db/schema.sql, db/seed.sql; $DATABASE_URL inside is its URL",
			"service cache: redis "} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r)
			}
		}
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("the run's server data is left in %s: %v", h.svcRuntime(), left)
		}
		// A second run gets a fresh copy: the first one's writes are gone.
		r = h.sandboxed(svcPolicy, `psql -X -tA "$DATABASE_URL" -c "SELECT count(*) FROM users"; redis-cli --no-auth-warning -u "$REDIS_URL" EXISTS written`)
		if r.code != 0 || r.stdout != "2\n0\n" {
			t.Errorf("second run: want the fixtures alone (2 rows, no key written):\n%s", r)
		}
	})
}

// TestServicesAgentIsNotSuperuser: the agent's role owns its database and nothing more: it is no
// superuser, the server-side program and file access a superuser has (COPY ... TO PROGRAM would run
// a command on the host as the server's id) is refused, and the bootstrap superuser cannot log in
// even with its password (read here from cordon's state, where the agent cannot). The control: the
// same password is what cordon itself logged in with to set the run up (the run started).
func TestServicesAgentIsNotSuperuser(t *testing.T) {
	requireServers(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		if r := h.sandboxed(svcPolicy, "true"); r.code != 0 {
			t.Fatalf("control run:\n%s", r)
		}
		pwFiles, _ := filepath.Glob(filepath.Join(h.home, ".local", "state", "cordon", "service-templates", "postgres*-app-app.password"))
		if len(pwFiles) != 1 {
			t.Fatalf("want the template's superuser password file, found %v", pwFiles)
		}
		pw, err := os.ReadFile(pwFiles[0])
		if err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(os.TempDir(), "cordon-svc-"+h.canary)
		defer os.Remove(marker)
		script := `psql -X -tA "$DATABASE_URL" -c "SELECT rolsuper FROM pg_roles WHERE rolname = current_user";
psql -X -tA "$DATABASE_URL" -c "COPY (SELECT 1) TO PROGRAM 'touch ` + marker + `'" 2>&1;
psql -X -tA "$DATABASE_URL" -c "SELECT pg_read_file('/etc/hostname')" 2>&1;
psql -X -tA "postgres://cordon:$SUPER@db.cordon.internal:5432/app" -c "SELECT 1" 2>&1; true`
		r := h.sandboxed(svcPolicy+"env:\n  set: {SUPER: "+strings.TrimSpace(string(pw))+"}\n", script)
		if !strings.HasPrefix(r.stdout, "f\n") {
			t.Errorf("the agent's role is a superuser:\n%s", r)
		}
		if !strings.Contains(r.stdout, "pg_execute_server_program") || !strings.Contains(r.stdout, "permission denied for function pg_read_file") {
			t.Errorf("server-side program or file access was not refused:\n%s", r)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("COPY TO PROGRAM ran a command on the host")
		}
		if !strings.Contains(r.stdout, `role "cordon" is not permitted to log in`) {
			t.Errorf("the bootstrap superuser can log in from the sandbox:\n%s", r)
		}
	})
}

// TestServicesBrokenFixture: a fixture the server refuses stops the start with exit 125, naming the
// fixture and the server's message with its line; the command never runs and no server is left.
// The control is the same policy with the fixture fixed.
func TestServicesBrokenFixture(t *testing.T) {
	requireServers(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		h.writeFile(filepath.Join(h.ws, "db", "seed.sql"), "INSERT INTO users VALUES (1, 'ada');\n\nINSERT INTO nosuch VALUES (2);\n", 0o644)
		before := h.svcDirs()
		r := h.sandboxed(svcPolicy, "echo COMMAND-RAN")
		if r.code != 125 || strings.Contains(r.stdout, "COMMAND-RAN") {
			t.Fatalf("want exit 125 and the command not run:\n%s", r)
		}
		if !strings.Contains(r.stderr, "db/seed.sql:3: ERROR:") || !strings.Contains(r.stderr, `relation "nosuch" does not exist`) ||
			!strings.Contains(r.stderr, "services.db (") {
			t.Errorf("the error does not name the service, the fixture, its line and the server's message:\n%s", r)
		}
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("a failed start left server data: %v", left)
		}
		h.writeFile(filepath.Join(h.ws, "db", "cache.redis"), "SET a b\nLPUSH a x\n", 0o644)
		h.writeFile(filepath.Join(h.ws, "db", "seed.sql"), svcSeed, 0o644)
		r = h.sandboxed(svcPolicy, "echo COMMAND-RAN")
		if r.code != 125 || !strings.Contains(r.stderr, "db/cache.redis:2: WRONGTYPE") {
			t.Errorf("a refused redis command does not stop the start with its line:\n%s", r)
		}
		h.writeFile(filepath.Join(h.ws, "db", "cache.redis"), "SET a b\n", 0o644)
		if r := h.sandboxed(svcPolicy, "echo COMMAND-RAN"); r.code != 0 || !strings.Contains(r.stdout, "COMMAND-RAN") {
			t.Errorf("control: fixed fixtures do not start:\n%s", r)
		}
	})
}

// svcRun is a run whose command holds the services open until its stdin closes.
type svcRun struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *syncbuf.Buffer
}

// startHeld starts a run whose script runs first, then prints READY and waits for a line on stdin.
func (h *harness) startHeld(t *testing.T, pol, script string) *svcRun {
	t.Helper()
	cmd := h.command(nil, cordonBin, "run", "--policy", h.policy(pol), "--", "sh", "-c", script+"\necho READY; read line; echo AFTER")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &svcRun{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), stderr: &syncbuf.Buffer{}}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return r
}

// until reads the run's stdout up to a line holding want, returning what it read.
func (r *svcRun) until(t *testing.T, want string) string {
	t.Helper()
	var got strings.Builder
	for {
		line, err := r.out.ReadString('\n')
		got.WriteString(line)
		if strings.Contains(line, want) {
			return got.String()
		}
		if err != nil {
			t.Fatalf("the run ended before %q: %v\nstdout: %s\nstderr: %s", want, err, got.String(), r.stderr.String())
		}
	}
}

// finish lets the held command end and waits for cordon, returning the rest of stdout.
func (r *svcRun) finish(t *testing.T) string {
	t.Helper()
	r.stdin.Write([]byte("go\n"))
	r.stdin.Close()
	rest, _ := io.ReadAll(r.out)
	r.cmd.Wait()
	return string(rest)
}

// serverPids are the host processes of the servers below dir (their command lines name it).
func serverPids(dir string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestServicesNotReachableFromHost: while a run's servers serve its sandbox, no host process can
// reach them: they have no TCP socket in the host's network namespace (no port to find on
// loopback), run in a network namespace of their own, never as root, and their socket directory
// refuses another id. The controls: the sandbox reaches them, and the servers' own id connects to
// the same socket.
func TestServicesNotReachableFromHost(t *testing.T) {
	requireServers(t)
	requireTool(t, "python3")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		before := h.svcDirs()
		run := h.startHeld(t, svcPolicy, `psql -X -tA "$DATABASE_URL" -c "SELECT count(*) FROM users"`)
		if out := run.until(t, "READY"); !strings.Contains(out, "2\n") {
			t.Fatalf("control: the sandbox does not reach its database:\n%s", out)
		}
		dirs := newDirs(before, h.svcDirs())
		if len(dirs) != 1 {
			t.Fatalf("want one new run directory in %s, got %v", h.svcRuntime(), dirs)
		}
		runDir := filepath.Join(h.svcRuntime(), dirs[0])
		pids := serverPids(runDir)
		if len(pids) < 2 {
			t.Fatalf("want the postgres and redis processes, found %v", pids)
		}
		hostTCP := tcpInodes("/proc/self/net/tcp", "/proc/self/net/tcp6")
		hostNet, _ := os.Readlink("/proc/self/ns/net")
		var serverUID int
		for _, pid := range pids {
			fi, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
			if err != nil {
				continue
			}
			uid := int(fi.Sys().(*syscall.Stat_t).Uid)
			serverUID = uid
			if uid == 0 {
				t.Errorf("server process %d runs as root", pid)
			}
			if h.who.uid != 0 && uid != h.who.uid {
				t.Errorf("server process %d runs as %d, not as the caller %d", pid, uid, h.who.uid)
			}
			if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); ns == hostNet {
				t.Errorf("server process %d shares the host's network namespace", pid)
			}
			for _, ino := range socketInodes(pid) {
				if hostTCP[ino] {
					t.Errorf("server process %d holds a TCP socket of the host's network namespace", pid)
				}
			}
		}
		sock := filepath.Join(runDir, "db", ".s.PGSQL.5432")
		connect := `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("CONNECTED")
except OSError as e:
    print("REFUSED", e.errno)`
		as := func(uid int) string {
			cmd := exec.Command("/usr/bin/python3", "-c", connect, sock)
			if uid != os.Getuid() {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python3 as %d: %v\n%s", uid, err, out)
			}
			return strings.TrimSpace(string(out))
		}
		if got := as(serverUID); got != "CONNECTED" {
			t.Errorf("control: the servers' own id cannot connect to %s: %s", sock, got)
		}
		stranger := 65533 // an id of no account, neither the caller's nor the servers'
		if got := as(stranger); got != fmt.Sprintf("REFUSED %d", syscall.EACCES) {
			t.Errorf("another host id reaches the database socket: %s", got)
		}
		if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("the socket directory is not 0700: %v %v", fi.Mode(), err)
		}
		run.finish(t)
	})
}

// tcpInodes reads the socket inodes of /proc/net/tcp-format files.
func tcpInodes(files ...string) map[string]bool {
	out := map[string]bool{}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n")[1:] {
			if fields := strings.Fields(line); len(fields) > 9 {
				out[fields[9]] = true
			}
		}
	}
	return out
}

// socketInodes are the inodes of the sockets pid holds.
func socketInodes(pid int) []string {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var out []string
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			out = append(out, strings.TrimSuffix(ino, "]"))
		}
	}
	return out
}

// TestServicesTwoRunsSeparate: the same service name in two concurrent runs is two databases: what
// one run writes, the other never sees.
func TestServicesTwoRunsSeparate(t *testing.T) {
	requireServers(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		a := h.startHeld(t, svcPolicy, `psql -X -tA "$DATABASE_URL" -c "INSERT INTO users VALUES (10, 'only-in-a')" && redis-cli --no-auth-warning -u "$REDIS_URL" SET owner a`)
		a.until(t, "READY")
		r := h.sandboxed(svcPolicy, `psql -X -tA "$DATABASE_URL" -c "SELECT string_agg(name, ',' ORDER BY id) FROM users"; redis-cli --no-auth-warning -u "$REDIS_URL" GET owner; echo "B=$DATABASE_URL"`)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "ada,grace\n\n") {
			t.Errorf("the second run sees the first one's writes (want the fixtures alone and no key):\n%s", r)
		}
		rest := a.finish(t)
		if !strings.Contains(rest, "AFTER") {
			t.Errorf("the first run did not finish: %s\n%s", rest, a.stderr.String())
		}
	})
}

// TestServicesKillNine: kill -9 of cordon takes its servers with it (Pdeathsig), and the next
// start removes what is left of their data.
func TestServicesKillNine(t *testing.T) {
	requireServers(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		before := h.svcDirs()
		run := h.startHeld(t, svcPolicy, "true")
		run.until(t, "READY")
		dirs := newDirs(before, h.svcDirs())
		if len(dirs) != 1 {
			t.Fatalf("want one new run directory, got %v", dirs)
		}
		runDir := filepath.Join(h.svcRuntime(), dirs[0])
		if len(serverPids(runDir)) < 2 {
			t.Fatalf("control: no server processes found for %s", runDir)
		}
		run.cmd.Process.Kill()
		run.cmd.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for len(serverPids(runDir)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("servers survived cordon's SIGKILL: %v", serverPids(runDir))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := os.Stat(runDir); err != nil {
			t.Fatalf("control: a killed cordon cannot remove its data, yet %s is gone: %v", runDir, err)
		}
		if r := h.sandboxed("", "true"); r.code != 0 {
			t.Fatalf("next run:\n%s", r)
		}
		if _, err := os.Stat(runDir); err == nil {
			t.Errorf("the next start left the killed run's server data in %s", runDir)
		}
	})
}

// TestServicesEndWithATimeoutOrSignal: a run that limits.timeout stops, or that Ctrl-C (SIGINT to
// cordon) ends, takes its servers and their data with it. The control: they existed while it ran.
func TestServicesEndWithATimeoutOrSignal(t *testing.T) {
	requireServers(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		before := h.svcDirs()
		r := h.sandboxed(svcPolicy+"limits:\n  timeout: 3s\n", `psql -X -tA "$DATABASE_URL" -c "SELECT count(*) FROM users" && sleep 60`)
		if !strings.Contains(r.stdout, "2\n") || !strings.Contains(r.stderr, "limits.timeout") {
			t.Fatalf("want the database reached, then the timeout:\n%s", r)
		}
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("a timed-out run left its servers' data: %v", left)
		}
		run := h.startHeld(t, svcPolicy, "true")
		run.until(t, "READY")
		dirs := newDirs(before, h.svcDirs())
		if len(dirs) != 1 || len(serverPids(filepath.Join(h.svcRuntime(), dirs[0]))) == 0 {
			t.Fatalf("control: no running servers for the held run (%v)", dirs)
		}
		run.cmd.Process.Signal(os.Interrupt)
		run.cmd.Wait()
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("Ctrl-C left the run's servers' data: %v", left)
		}
		if pids := serverPids(filepath.Join(h.svcRuntime(), dirs[0])); len(pids) > 0 {
			t.Errorf("Ctrl-C left server processes: %v", pids)
		}
	})
}

// TestServicesKept: --keep-services keeps the servers after the command ends and says how to reach
// them from the host; the hint works, and Ctrl-C removes them.
func TestServicesKept(t *testing.T) {
	requireServers(t)
	forEachIdentity(t, func(t *testing.T, h *harness) {
		h.svcFixtures()
		before := h.svcDirs()
		cmd := h.command(nil, cordonBin, "run", "--keep-services", "--policy", h.policy(svcPolicy), "--", "true")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		var hint string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, h, ok := strings.Cut(sc.Text(), "kept; from the host: "); ok && strings.HasPrefix(h, "psql ") {
				hint = h
			}
			if strings.Contains(sc.Text(), "press Ctrl-C") {
				break
			}
		}
		if hint == "" {
			t.Fatalf("no host hint for the kept database")
		}
		r := h.plain(hint + ` -X -tA -c "SELECT count(*) FROM users"`)
		if r.code != 0 || r.stdout != "2\n" {
			t.Errorf("the hint does not reach the kept database: %s\n%s", hint, r)
		}
		cmd.Process.Signal(os.Interrupt)
		go io.Copy(io.Discard, stderr)
		cmd.Wait()
		if left := newDirs(before, h.svcDirs()); len(left) > 0 {
			t.Errorf("Ctrl-C left the kept services' data: %v", left)
		}
	})
}
