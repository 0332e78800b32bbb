package cordon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/services"
)

// serviceRangeID is the id of cordon's reserved range (see the sandbox's id maps) that fixture
// servers run as when cordon runs as root; the agent is 1000 of the same range, so the two never
// share an id.
const serviceRangeID = 65000

// rootServiceRuntime is where running fixture servers keep their data and sockets when cordon runs
// as root. It is not below cordon's state (/var/lib/cordon, 0700 root), which the servers' id could
// not pass through; a directory per run below it is 0711 root, the server's own 0700.
const rootServiceRuntime = "/run/cordon/services"

// Service is a fixture server of the run (policy services), started before the command and
// destroyed with the run.
type Service struct {
	// Name is the policy's service name; the command reaches it as Name.cordon.internal.
	Name string
	// Kind is "postgres" or "redis"; Version is the server's.
	Kind, Version string
	// URL is the connection string the command gets, with the run's own password.
	URL string
	// HostHint is a command that connects to the server from the host, while it runs.
	HostHint string
}

// serviceRuntime is the directory below which a caller's runs keep their servers' data and sockets:
// a runtime directory rather than cordon's state, because a unix socket's path must stay under 108
// bytes (a state directory below a long home would not) and the data is worth nothing after the run.
// As root it is rootServiceRuntime; otherwise $XDG_RUNTIME_DIR/cordon/services, else
// /tmp/cordon-UID/services, whose top the caller must own with mode 0700 (as tmux checks its
// /tmp/tmux-UID): a directory someone else made there first is refused, not used.
func serviceRuntime(env []string) (string, error) {
	uid := os.Getuid()
	if uid == 0 {
		return rootServiceRuntime, nil
	}
	if d := getenv(env, "XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "cordon", "services"), nil
	}
	top := filepath.Join(os.TempDir(), fmt.Sprintf("cordon-%d", uid))
	if err := os.Mkdir(top, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("services: %w", err)
	}
	fi, err := os.Lstat(top)
	if err != nil {
		return "", fmt.Errorf("services: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != uid || fi.Mode().Perm() != 0o700 {
		return "", fmt.Errorf("services: %s is not a 0700 directory of yours (someone else made it?); remove it or set XDG_RUNTIME_DIR", top)
	}
	return filepath.Join(top, "services"), nil
}

// serviceLog holds the services' audit events until the gateway's log exists, then writes them
// there as they happen.
type serviceLog struct {
	mu      sync.Mutex
	gw      *gateway.Gateway
	pending []audit.Event
}

func (l *serviceLog) record(e services.Event) {
	ev := audit.Event{Time: time.Now().Add(-e.Duration), Kind: audit.KindService, Name: e.Service, Duration: e.Duration,
		Detail: map[string]string{"action": e.Action, "kind": e.Kind}}
	if e.Detail != "" {
		key := "fixture"
		if e.Action == "start" {
			key = "version"
		}
		ev.Detail[key] = e.Detail
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gw != nil {
		l.gw.Record(ev)
		return
	}
	l.pending = append(l.pending, ev)
}

// attach writes what was held to gw's log, and everything after it.
func (l *serviceLog) attach(gw *gateway.Gateway) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gw = gw
	for _, e := range l.pending {
		gw.Record(e)
	}
	l.pending = nil
}

// withServiceNetwork gives a policy with services but no network section an empty one: the gateway
// is what reaches the services, and it still lets nothing else out.
func withServiceNetwork(pol *policy.Policy) *policy.Policy {
	if len(pol.Services) == 0 || pol.Network != nil {
		return pol
	}
	p := *pol
	p.Network = &policy.Network{}
	return &p
}

// startServices starts the policy's services for the run, seeded from the project (the run's view
// of it: nothing has changed it yet), and says on the caller's stream what the command gets.
func (b *builder) startServices(ctx context.Context, pol *policy.Policy, project, runID string, log *serviceLog) (*services.Set, error) {
	if len(pol.Services) == 0 {
		return nil, nil
	}
	var ids services.IDs
	if os.Getuid() == 0 {
		uid, gid, err := serviceHostIDs()
		if err != nil {
			return nil, fmt.Errorf("services: picking the servers' id: %w", err)
		}
		ids = services.IDs{UID: uid, GID: gid, Switch: true}
	}
	specs := make([]services.Spec, len(pol.Services))
	for i, s := range pol.Services {
		specs[i] = services.Spec{Name: s.Name, Kind: s.Kind, Fixtures: s.Fixtures, Restore: s.Restore,
			Database: s.Database, User: s.User, Where: fmt.Sprintf("%s:%d", pol.Source, s.Line)}
	}
	runtime, err := serviceRuntime(b.env)
	if err != nil {
		return nil, err
	}
	set, err := services.Start(ctx, services.Options{
		Runtime: runtime, Templates: filepath.Join(b.store.Root, "service-templates"),
		RunID: runID, Project: project, Path: getenv(b.env, "PATH"), IDs: ids, Event: log.record,
	}, specs)
	if err != nil {
		return nil, err
	}
	for i, srv := range set.Servers() {
		s := pol.Services[i]
		line := fmt.Sprintf("service %s: %s %s at %s.%s:%d", s.Name, srv.Kind, srv.Version, s.Name, policy.ServiceDomain, srv.Port)
		if seeded := append(nonEmpty(s.Restore), s.Fixtures...); len(seeded) > 0 {
			line += ", seeded from " + strings.Join(seeded, ", ")
		}
		if s.Env != "" {
			line += fmt.Sprintf("; $%s inside is its URL, not one found in your environment (connection strings in the project are masked)", s.Env)
		}
		b.warn.notice(line)
	}
	return set, nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// serviceEnv is NAME=URL for the services whose policy entry names a variable.
func serviceEnv(pol *policy.Policy, set *services.Set) []string {
	vars := map[string]string{}
	for _, s := range pol.Services {
		vars[s.Name] = s.Env
	}
	return set.Env(vars)
}

// gatewayServices are the services as the gateway dials them.
func gatewayServices(set *services.Set) []gateway.Service {
	var out []gateway.Service
	for _, srv := range set.Servers() {
		out = append(out, gateway.Service{Name: srv.Name, Port: srv.Port, Socket: srv.Socket})
	}
	return out
}

// Services returns the run's fixture servers (policy services) while they run: until Wait has
// finished the run, or, with Config.KeepServices, until StopServices.
func (r *Run) Services() []Service {
	r.svcMu.Lock()
	defer r.svcMu.Unlock()
	var out []Service
	for _, srv := range r.services.Servers() {
		out = append(out, Service{Name: srv.Name, Kind: srv.Kind, Version: srv.Version, URL: srv.URL, HostHint: srv.HostHint})
	}
	return out
}

// StopServices stops the run's fixture servers and removes their data. Wait calls it unless
// Config.KeepServices; it is safe to call more than once.
func (r *Run) StopServices() error {
	r.svcMu.Lock()
	defer r.svcMu.Unlock()
	err := r.services.Stop()
	r.services = nil
	return err
}

// sweepServices removes the fixture servers' data that runs whose cordon was killed left behind.
func sweepServices(env []string) error {
	if uid := os.Getuid(); uid != 0 && !filepath.IsAbs(getenv(env, "XDG_RUNTIME_DIR")) {
		if _, err := os.Lstat(filepath.Join(os.TempDir(), fmt.Sprintf("cordon-%d", uid))); err != nil {
			return nil // no run of this caller ever had services
		}
	}
	runtime, err := serviceRuntime(env)
	if err != nil {
		return err
	}
	return services.Sweep(runtime)
}

// ServiceServer is what this host offers for one kind of fixture service (cordon doctor).
type ServiceServer struct {
	// Kind is "postgres" or "redis".
	Kind string
	// Version and Dir are the server's version and where its programs are, when found.
	Version, Dir string
	// Err says why the kind cannot be used (not installed: which Debian package to install).
	Err error
}

// ServiceServers lists the fixture servers this host has, searched as a run would (env's PATH).
func ServiceServers(env []string) []ServiceServer {
	var out []ServiceServer
	for _, kind := range services.Kinds() {
		b, err := services.Find(kind, getenv(env, "PATH"))
		out = append(out, ServiceServer{Kind: kind, Version: b.Version, Dir: b.Dir, Err: err})
	}
	return out
}

// SweepServices removes what fixture servers of runs whose cordon was killed left behind (a
// server whose Pdeathsig was lost, its data). Every Start does it too; cordon gc calls it.
func SweepServices(env []string) error { return sweepServices(env) }
