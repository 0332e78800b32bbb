package main

import (
	"context"
	"flag"
	"log/slog"
	"math"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/kube/inpod"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// This file is the part of `cordon kube` (kube.go) that runs inside a run's pod before and beside the
// agent (internal/kube/inpod): the setup step, the gateway sidecar and its startup probe. cordon
// renders the pod with these subcommands (kubepod.SetupArgs, GatewayArgs, ReadyArgs); nobody types
// them.

// kubeInPod runs the in-pod subcommand name with args; handled is false when name is none of them.
func (a *app) kubeInPod(name string, args []string) (code int, handled bool) {
	switch name {
	case kubepod.SetupArgs[1]:
		return a.kubeSetup(args), true
	case kubepod.GatewayArgs[1]:
		return a.kubeGateway(args), true
	case kubepod.ReadyArgs[1]:
		return a.kubeReady(args), true
	}
	return 0, false
}

// kubeParse parses an in-pod subcommand's flags, which take no arguments besides.
func (a *app) kubeParse(fs *flag.FlagSet, usage string, args []string) (int, bool) {
	if code, ok := a.parse(fs, usage, args); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		a.errorf("%s: takes no arguments (usage: cordon %s)", fs.Name(), usage)
		return exitUsage, false
	}
	return 0, true
}

// kubeSetup is the pod's init step: the binary copied for the other images' containers, the
// redirect installed (root with CAP_NET_ADMIN, and CAP_NET_RAW for gVisor's xtables).
func (a *app) kubeSetup(args []string) int {
	const usage = "kube setup [--gateway-uid N] [--copy-to PATH]"
	fs := a.flags("kube setup", usage)
	uid := fs.Uint64("gateway-uid", kubepod.GatewayUID, "the uid the redirect exempts: the gateway's")
	copyTo := fs.String("copy-to", kubepod.Binary, "where cordon's binary is copied (`PATH`)")
	if code, ok := a.kubeParse(fs, usage, args); !ok {
		return code
	}
	if *uid == 0 || *uid > math.MaxUint32 {
		a.errorf("kube setup: --gateway-uid %d is not a uid the redirect can exempt", *uid)
		return exitUsage
	}
	if err := inpod.Setup(context.Background(), inpod.SetupOptions{CopyTo: *copyTo, GatewayUID: uint32(*uid),
		Log: slog.New(slog.NewTextHandler(a.stderr, nil))}); err != nil {
		a.errorf("kube %v", err)
		return 1
	}
	return 0
}

// kubeGateway is the pod's gateway sidecar. It runs until SIGTERM or SIGINT (exit 0) or until it
// stops serving (exit 1). It must run as kubepod.GatewayUID: as any other uid its own connections
// would be sent back to it.
func (a *app) kubeGateway(args []string) int {
	const usage = "kube gateway [--config FILE]"
	fs := a.flags("kube gateway", usage)
	config := fs.String("config", filepath.Join(kubepod.SecretDir, kubepod.ConfigFile), "the run's gateway config (`FILE`)")
	if code, ok := a.kubeParse(fs, usage, args); !ok {
		return code
	}
	if a.uid != kubepod.GatewayUID {
		a.errorf("kube gateway: runs as uid %d, the one the pod's redirect exempts, not as %d", kubepod.GatewayUID, a.uid)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := inpod.Gateway(ctx, inpod.GatewayOptions{
		ConfigPath: *config, TrustDir: kubepod.TrustDir, AuditDir: kubepod.AuditDir,
		Stdout: a.stdout, Log: slog.New(slog.NewTextHandler(a.stderr, nil)),
	})
	if err != nil {
		a.errorf("kube %v", err)
		return 1
	}
	return 0
}

// kubeReady is the gateway's startup probe.
func (a *app) kubeReady(args []string) int {
	const usage = "kube ready [--dir DIR]"
	fs := a.flags("kube ready", usage)
	dir := fs.String("dir", kubepod.TrustDir, "the directory the gateway writes its ready file to (`DIR`)")
	if code, ok := a.kubeParse(fs, usage, args); !ok {
		return code
	}
	if err := inpod.Ready(*dir); err != nil {
		a.errorf("kube ready: %v", err)
		return 1
	}
	return 0
}
