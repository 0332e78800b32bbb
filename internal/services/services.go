// Package services starts, seeds and stops the fixture servers a policy's services section asks for
// (PostgreSQL, Redis): real servers from the host's own binaries, started by cordon outside the
// sandbox before the agent starts and destroyed with the run, so that the connection string the agent
// gets leads to data shaped like production that belongs to nobody.
//
// A server never runs as root and never listens on TCP. It runs as the caller, or, when cordon runs
// as root, as an id of cordon's reserved range that no account owns; either way in a user namespace of
// its own (that id is "nobody" inside, which is all initdb needs of an account), a network namespace
// with nothing in it (no port exists for any host process to find) and its own IPC namespace. It
// listens on a unix socket in a 0700 directory of the server's id, which only cordon's gateway dials,
// for the sandbox's NAME.cordon.internal:PORT. The kernel sends it SIGKILL when cordon dies
// (Pdeathsig); what a killed cordon leaves on disk, the next start (Sweep) removes.
//
// PostgreSQL pays initdb once per server version, role and database: a template cluster kept in
// cordon's state, of which each run gets a copy (cp --reflink=auto).
package services

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// Spec is one service to start, from the policy.
type Spec struct {
	// Name is the policy's service name: the sandbox reaches it as Name.cordon.internal.
	Name string
	// Kind is "postgres" or "redis".
	Kind string
	// Fixtures and Restore are workspace-relative paths, applied in order (Restore first).
	Fixtures []string
	Restore  string
	// Database and User are PostgreSQL's database and its owning role.
	Database, User string
	// Where is the policy file and line that defined the service, for messages ("policy.yaml:12").
	Where string
}

// IDs are whom the servers run as. Switch is false when cordon runs as an ordinary user: the servers
// are the caller's own processes. As root, UID and GID are an unprivileged id no account owns.
type IDs struct {
	UID, GID int
	Switch   bool
}

// Options are what starting a run's services needs.
type Options struct {
	// Runtime is where running servers keep their data and sockets, one directory per run below it.
	// Every directory above it must let IDs.UID search it (cordon's own state does not, as root).
	Runtime string
	// Templates is where template clusters are kept between runs (cordon's state).
	Templates string
	// RunID names the run's directory below Runtime.
	RunID string
	// Project is the run's view of the project on the host, where fixtures are read.
	Project string
	// Path is the caller's PATH, searched for server binaries after their packages' own places.
	Path string
	// IDs are whom the servers run as.
	IDs IDs
	// Event, when set, is told about each server's start, fixtures and removal.
	Event func(Event)
}

// Event is one step of a service's life, for the run's audit log.
type Event struct {
	Service, Kind string
	// Action is "start", "fixture", "restore", "stop" or "keep".
	Action string
	// Detail: the server's version for start, the fixture's path for fixture and restore.
	Detail   string
	Duration time.Duration
}

// Server is one running service.
type Server struct {
	Name, Kind, Version string
	// Socket is the unix socket the gateway dials for the sandbox's connections.
	Socket string
	// Port is the port the sandbox connects to at Name.cordon.internal.
	Port uint16
	// URL is the connection string the agent gets (with the run's own password).
	URL string
	// HostHint is how to connect from the host while the server is kept (--keep-services).
	HostHint string

	proc *process
}

// Set is a run's running services.
type Set struct {
	dir     string
	servers []*Server
	event   func(Event)
}

// ownerFile, in a run's directory, names the cordon process (pid and start time) the services
// belong to, so that Sweep can tell a live run's servers from a killed one's.
const ownerFile = "owner"

// Start starts every service in order, applying its fixtures. On any error it stops what it
// started and removes the run's directory: nothing is left half seeded.
func Start(ctx context.Context, opts Options, specs []Spec) (_ *Set, err error) {
	if len(specs) == 0 {
		return &Set{}, nil
	}
	if !opts.IDs.Switch && os.Getuid() == 0 {
		return nil, errors.New("services: refusing to run fixture servers as root (give them an unprivileged id)")
	}
	if err := Sweep(opts.Runtime); err != nil {
		return nil, err
	}
	dir := filepath.Join(opts.Runtime, opts.RunID)
	s := &Set{dir: dir, event: opts.Event}
	if err := s.prepare(opts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	for _, sp := range specs {
		t0 := time.Now()
		var srv *Server
		switch sp.Kind {
		case "postgres":
			srv, err = startPostgres(ctx, opts, sp, dir)
		case "redis":
			srv, err = startRedis(ctx, opts, sp, dir)
		case "mysql":
			srv, err = startMysql(ctx, opts, sp, dir)
		default:
			err = fmt.Errorf("unknown kind %q", sp.Kind)
		}
		if srv != nil {
			s.servers = append(s.servers, srv)
		}
		if err != nil {
			return nil, fmt.Errorf("services.%s (%s): %w", sp.Name, sp.Where, err)
		}
		s.record(Event{Service: sp.Name, Kind: sp.Kind, Action: "start", Detail: srv.Version, Duration: time.Since(t0)})
	}
	return s, nil
}

// prepare makes the run's directory, searchable by the servers' id, and records its owner.
func (s *Set) prepare(opts Options) error {
	mode := os.FileMode(0o700)
	if opts.IDs.Switch {
		mode = 0o711 // the servers' id must pass through to its own directory below
	}
	if err := mkdirAll(opts.Runtime, mode); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := os.Mkdir(s.dir, mode); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	if err := os.Chmod(s.dir, mode); err != nil { // past the umask
		return fmt.Errorf("services: %w", err)
	}
	pid, start, err := runstate.Self()
	if err == nil {
		err = os.WriteFile(filepath.Join(s.dir, ownerFile), fmt.Appendf(nil, "%d %d\n", pid, start), 0o600)
	}
	if err != nil {
		os.RemoveAll(s.dir)
		return fmt.Errorf("services: recording the run's owner: %w", err)
	}
	return nil
}

// mkdirAll makes dir and its missing parents with mode, and gives dir itself mode past the umask.
func mkdirAll(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&mode != mode {
		return os.Chmod(dir, fi.Mode().Perm()|mode)
	}
	return nil
}

// Servers returns the running services in the policy's order.
func (s *Set) Servers() []*Server {
	if s == nil {
		return nil
	}
	return s.servers
}

// Env returns NAME=URL for each service whose policy entry names a variable.
func (s *Set) Env(vars map[string]string) []string {
	var env []string
	for _, srv := range s.Servers() {
		if v := vars[srv.Name]; v != "" {
			env = append(env, v+"="+srv.URL)
		}
	}
	return env
}

// Stop stops every server (each gets a moment to exit, then SIGKILL) and removes the run's
// directory with their data. It is safe to call more than once.
func (s *Set) Stop() error {
	if s == nil || s.dir == "" {
		return nil
	}
	var errs []error
	for _, srv := range s.servers {
		t0 := time.Now()
		if err := srv.proc.stop(); err != nil {
			errs = append(errs, fmt.Errorf("services.%s: %w", srv.Name, err))
		}
		s.record(Event{Service: srv.Name, Kind: srv.Kind, Action: "stop", Duration: time.Since(t0)})
	}
	s.servers = nil
	unmountBelow(s.dir)
	if err := runstate.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("services: removing the servers' data: %w", err))
	}
	s.dir = ""
	return errors.Join(errs...)
}

func (s *Set) record(e Event) {
	if s.event != nil {
		s.event(e)
	}
}

// Sweep removes what runs whose cordon is gone left below runtime: a server still running (its
// Pdeathsig lost) is killed, its data removed. Live runs' directories are left alone.
func Sweep(runtime string) error {
	entries, err := os.ReadDir(runtime)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("services: %w", err)
	}
	var errs []error
	for _, e := range entries {
		dir := filepath.Join(runtime, e.Name())
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".") {
			// A template being made (buildPgTemplate) takes seconds; one older than this was left
			// by a killed cordon, its server dead with it.
			if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), ".template-") && time.Since(fi.ModTime()) > 10*time.Minute {
				killRecorded(dir)
				errs = append(errs, runstate.RemoveAll(dir))
			}
			continue
		}
		if ownerAlive(filepath.Join(dir, ownerFile)) {
			continue
		}
		killRecorded(dir)
		unmountBelow(dir)
		if err := runstate.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("services: removing a killed run's servers: %w", err))
		}
	}
	return errors.Join(errs...)
}

// ownerAlive reads a "pid start" file and says whether that process still runs. A file being
// written (a run starting this moment) counts as alive while it is young.
func ownerAlive(path string) bool {
	pid, start, ok := readPidFile(path)
	if !ok {
		fi, err := os.Stat(filepath.Dir(path))
		return err == nil && time.Since(fi.ModTime()) < time.Minute
	}
	return runstate.Alive(pid, start)
}

func readPidFile(path string) (pid int, start uint64, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	_, err = fmt.Sscanf(string(data), "%d %d", &pid, &start)
	return pid, start, err == nil
}
