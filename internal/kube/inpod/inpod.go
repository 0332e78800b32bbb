package inpod

// This file is what cordon's binary does inside a Kubernetes run's pod before and beside the
// agent (internal/kube/kubepod names the pod's layout): Setup, the init step that copies the binary
// for the other images' containers and installs the redirect that sends every uid but the gateway's
// to the gateway; Gateway, the sidecar that holds the run's credentials and serves the pod's
// loopback as the local gateway serves a sandbox's; and Ready and WaitReady, by which the clone step waits for it. The
// pieces are the local run's own (netns for the rules, egress/gateway for the gateway, creds for the
// credentials), so a pod's run is judged as a local one is.
//
// Everything fails closed. The rules stay when the gateway stops, so a gateway that fails leaves a
// pod whose connections reach only the gateway's closed ports; the gateway refuses a config of
// another version and a policy it cannot enforce in a pod (budgets, fixture services, presets, which
// need the machine the run was started on), and writes its ready file only once it serves.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// SetupOptions are the setup step's (kubepod.SetupArgs).
type SetupOptions struct {
	// CopyTo is where cordon's binary is copied for the containers of the agent's image
	// (kubepod.Binary).
	CopyTo string
	// GatewayUID is the one uid the redirect exempts (kubepod.GatewayUID).
	GatewayUID uint32
	// Self is the binary to copy; empty means this process's own (/proc/self/exe).
	Self string
	// Log receives the line that says which rules were installed (nftables, or xtables where the
	// network stack has no nf_tables); nil discards it.
	Log *slog.Logger
}

// Setup copies the binary to CopyTo (mode 0555, atomically: a container that starts later sees the
// whole file or none) and then installs the pod's rules in this process's network namespace, which
// needs CAP_NET_ADMIN there: nftables, or, where netlink to nf_tables is refused as unsupported (a
// pod on gVisor, whose netstack has none), the same rules in xtables (netns.InstallPodXT, which
// also needs CAP_NET_RAW for its raw socket). Any error means the pod must not go on.
func Setup(ctx context.Context, opts SetupOptions) error {
	if opts.CopyTo == "" {
		return errors.New("setup: no path to copy cordon's binary to")
	}
	self := opts.Self
	if self == "" {
		self = "/proc/self/exe"
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	f, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("setup: reading cordon's binary: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := atomicfile.WriteFrom(opts.CopyTo, f, 0o555); err != nil {
		return fmt.Errorf("setup: copying cordon's binary: %w", err)
	}
	how, why, err := installPod(kubepod.Ports(), opts.GatewayUID)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if why != nil {
		log.Info("the pod's redirect is installed", "rules", how, "because", why.Error())
	} else {
		log.Info("the pod's redirect is installed", "rules", how)
	}
	return nil
}

// Ready is nil once the gateway in the pod serves (it has written
// dir/kubepod.ReadyFile after its trust files).
func Ready(dir string) error {
	fi, err := os.Stat(filepath.Join(dir, kubepod.ReadyFile))
	if err != nil {
		return fmt.Errorf("the gateway is not ready: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("the gateway is not ready: %s is not a regular file", fi.Name())
	}
	return nil
}

// WaitReady waits until the gateway in dir is ready (Ready), for the step after it: the kubelet
// starts a native sidecar's next init container as soon as the sidecar runs, and this wait is what
// orders the clone after the gateway (a startup probe would, too, but only at its period).
func WaitReady(ctx context.Context, dir string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := Ready(dir)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waited %s)", err, timeout)
		case <-tick.C:
		}
	}
}

// GatewayOptions are the gateway sidecar's (kubepod.GatewayArgs).
type GatewayOptions struct {
	// ConfigPath is the run's kubepod.GatewayConfig (kubepod.SecretDir/kubepod.ConfigFile).
	ConfigPath string
	// TrustDir and AuditDir are where the trust files and the ready file, and the audit log, go
	// (kubepod.TrustDir, kubepod.AuditDir).
	TrustDir, AuditDir string
	// Stdout receives one kubepod.GatewayLine per line the user should see; nil discards them.
	Stdout io.Writer
	// Log receives the gateway's own diagnostics; nil discards them.
	Log *slog.Logger
	// LookupNetIP, if set, resolves allowed names instead of the pod's resolver (or
	// network.dns.upstream), as gateway.Config.LookupNetIP does.
	LookupNetIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// Listen, if set, makes the gateway's sockets instead of listening on this namespace's
	// loopback at the given ports (a test serving sockets it made elsewhere).
	Listen func(sandbox.EgressPorts) (*sandbox.Listeners, error)
}

// Gateway runs the pod's gateway until ctx ends (the caller cancels it on SIGTERM or SIGINT):
// it reads and checks the config, builds the gateway as a local run does (the policy parsed again,
// --allow appended, the credentials restored), serves the pod's loopback at kubepod.Ports(), writes
// the trust files and then the ready file. A nil error means it was told to stop and closed cleanly
// (the audit log flushed); a gateway that stops serving on its own returns an error, so that the
// container exits non-zero while the rules keep the pod shut.
func Gateway(ctx context.Context, opts GatewayOptions) error {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ready := filepath.Join(opts.TrustDir, kubepod.ReadyFile)
	// A ready file left by a gateway that ran before this one (the sidecar restarted) says nothing
	// of this one.
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("gateway: removing the old ready file: %w", err)
	}
	cfg, err := readConfig(opts.ConfigPath)
	if err != nil {
		return err
	}
	if reason, stopped := Stopped(opts.TrustDir); stopped {
		// The sidecar restarted after the lease lapsed: it must not serve again. It stays up, so that
		// the kubelet does not restart it in a loop, and serves nothing.
		log.Warn("the run was stopped; this gateway does not serve", "run", cfg.RunID, "reason", reason)
		<-ctx.Done()
		return nil
	}
	if reason, lapsed := leaseLapsed(opts.TrustDir, time.Duration(cfg.LeaseSeconds)*time.Second); lapsed {
		// The sidecar restarted after the lease lapsed but before the stop was recorded: it records
		// it now, before it serves anything, where watchLease would let it serve until its first look.
		if err := stopRun(opts.TrustDir, reason); err != nil {
			log.Error("stopping the run", "err", err)
		}
		log.Warn("the run's lease had lapsed: this gateway does not serve", "run", cfg.RunID, "reason", reason)
		<-ctx.Done()
		return nil
	}
	gw, err := build(ctx, cfg, opts)
	if err != nil {
		return err
	}
	listen := opts.Listen
	if listen == nil {
		listen = listenHere
	}
	ls, err := listen(kubepod.Ports())
	if err != nil {
		_, _ = gw.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	if err := gw.Serve(*ls); err != nil {
		_, _ = gw.Close()
		return err
	}
	if err := writeTrust(opts.TrustDir, cfg.Roots, gw.TrustCA()); err != nil {
		_, _ = gw.Close()
		return err
	}
	if err := atomicfile.Write(ready, nil, 0o644); err != nil {
		_, _ = gw.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	log.Info("the gateway serves", "run", cfg.RunID, "ports", kubepod.Ports())

	var lapsed <-chan string
	if cfg.LeaseSeconds > 0 {
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		lapsed = watchLease(lctx, opts.TrustDir, time.Duration(cfg.LeaseSeconds)*time.Second)
	}
	select {
	case <-ctx.Done():
	case <-gw.Done():
	case reason := <-lapsed:
		return stopServing(ctx, gw, cfg, opts.TrustDir, reason, log)
	}
	_ = os.Remove(ready)
	sum, err := gw.Close()
	log.Info("the gateway stopped", "run", cfg.RunID, "allowed", sum.Allowed, "denied", sum.Denied)
	if ctx.Err() == nil {
		// It stopped on its own: a server failed.
		if err == nil {
			err = errors.New("a server stopped")
		}
		return fmt.Errorf("gateway: stopped serving: %w", err)
	}
	if err != nil {
		return fmt.Errorf("gateway: closing: %w", err)
	}
	return nil
}

// stopServing ends a run whose lease lapsed: the lapse is written to the audit log, the gateway
// closed, which cuts every connection the agent has open, and the stop recorded (for the wrapper,
// and for this gateway should its container restart); then it waits for its own end, serving nothing, so
// that the kubelet does not start another.
func stopServing(ctx context.Context, gw *gateway.Gateway, cfg *kubepod.GatewayConfig, dir, reason string, log *slog.Logger) error {
	// Egress stops first; then the wrapper is told.
	_ = os.Remove(filepath.Join(dir, kubepod.ReadyFile))
	gw.Record(audit.Event{Time: time.Now(), Kind: audit.KindLease, Decision: audit.Deny, Name: cfg.RunID, Reason: reason})
	sum, err := gw.Close()
	serr := stopRun(dir, reason)
	log.Warn("the run's lease lapsed: the gateway stopped serving", "run", cfg.RunID, "reason", reason,
		"allowed", sum.Allowed, "denied", sum.Denied)
	if err = errors.Join(serr, err); err != nil {
		log.Error("stopping the run", "err", err)
	}
	<-ctx.Done()
	return nil
}

// readConfig reads the gateway's config, refusing one this cordon does not read (another version,
// fields it does not know, no policy).
func readConfig(path string) (*kubepod.GatewayConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: reading the config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var cfg kubepod.GatewayConfig
	if err := dec.Decode(&cfg); err != nil {
		// The decoder's errors name fields and offsets, never values.
		return nil, fmt.Errorf("gateway: the config %s: %w", path, err)
	}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return &cfg, nil
}

// podHome expands ~ in the policy's paths. The gateway reads no file the policy names (the CA file
// comes in the config), so the paths only need to parse; this home exists nowhere.
const podHome = "/nonexistent"

// build makes the gateway from the config as cordon run makes it locally.
func build(ctx context.Context, cfg *kubepod.GatewayConfig, opts GatewayOptions) (*gateway.Gateway, error) {
	pol, err := policy.Parse(cfg.PolicyName, cfg.Policy, policy.Options{Home: podHome})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if len(cfg.Allow) > 0 && pol.Network == nil {
		pol.Network = &policy.Network{}
	}
	for _, a := range cfg.Allow {
		ep, err := policy.ParseEndpoint(a)
		if err != nil {
			return nil, fmt.Errorf("gateway: --allow %s: %w", a, err)
		}
		pol.Network.Allow = append(pol.Network.Allow, ep)
	}
	switch {
	case len(pol.Budgets) > 0:
		return nil, fmt.Errorf("gateway: policy %s has budgets, which the Kubernetes backend does not keep yet", cfg.PolicyName)
	case len(pol.Services) > 0:
		return nil, fmt.Errorf("gateway: policy %s has services, which the Kubernetes backend does not start yet", cfg.PolicyName)
	}
	if pol.Network == nil {
		// No network section: the pod has an interface all the same, so the gateway serves and
		// refuses everything (the local sandbox, with loopback only, needs none).
		pol.Network = &policy.Network{}
	}
	if pol.Network.TLS.CAFile != "" && len(cfg.CAFile) == 0 {
		return nil, fmt.Errorf("gateway: policy %s names network.tls.caFile, and the config carries no CA file", cfg.PolicyName)
	}
	set, err := creds.Restore(ctx, cfg.Credentials)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	out := &lineWriter{w: opts.Stdout}
	hostname := cfg.Hostname
	if hostname == "" {
		hostname = policy.DefaultHostname
	}
	gcfg := gateway.Config{
		Network: pol.Network, Hostname: hostname,
		AuditPath: filepath.Join(opts.AuditDir, kubepod.AuditFile), AuditMaxBytes: cfg.AuditMaxBytes,
		// The keeper reads it through the pod's fsGroup, the group every file in the pod's volumes has.
		AuditGroupReadable: true,
		Notify:             out.kind(kubepod.LineNotice), NotifyUpstream: out.kind(kubepod.LineUpstream),
		LookupNetIP: opts.LookupNetIP, Roots: cfg.Roots,
	}
	if len(cfg.CAFile) > 0 {
		gcfg.CAFile = cfg.CAFile
	}
	gcfg.WithCredentials(set)
	gw, err := gateway.New(gcfg)
	if err != nil {
		return nil, err
	}
	return gw, nil
}

// writeTrust writes the pod's trust files: TrustBundle, the roots with what the gateway adds (the
// run's CA and the policy's CA file), and RunCA, the additions alone. Each is replaced whole.
func writeTrust(dir string, roots, added []byte) error {
	bundle := append(bytes.Clone(roots), '\n')
	bundle = append(bundle, added...)
	if err := atomicfile.Write(filepath.Join(dir, kubepod.TrustBundle), bundle, 0o644); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, kubepod.RunCA), added, 0o644); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// lineWriter prints kubepod.GatewayLines. The gateway's notifiers print at most a few dozen lines
// in a run, which a pipe's buffer holds, so a write never waits on the log's reader for long.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// kind returns the notifier for lines of one kind.
func (l *lineWriter) kind(kind string) func(string) {
	return func(line string) {
		if l.w == nil {
			return
		}
		b, err := json.Marshal(kubepod.GatewayLine{Cordon: kind, Line: line})
		if err != nil {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		_, _ = l.w.Write(append(b, '\n'))
	}
}
