//go:build linux

package inpod

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/nstest"
)

// envMode makes the test binary, re-executed inside a test pod (nstest.NS.Command), one of the
// pod's steps, as cordon's binary is in a real pod:
//   - setup COPY-TO: Setup, as root;
//   - gateway CONFIG TRUST-DIR AUDIT-DIR: Gateway until SIGTERM or SIGINT, as the gateway's uid.
const envMode = "CORDON_INPOD_TEST"

// TestMain lets the test binary be the agent's wrapper in a pid namespace of its own (see
// agentChild): the wrapper kills every process it can signal, which outside such a namespace would be
// every process of the machine the tests run as. It also lets it be a command inside a test pod
// (nstest.Main) and the pod's setup step or gateway there (envMode).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(agentChildMain())
	}
	nstest.Main()
	switch os.Getenv(envMode) {
	case "":
		os.Exit(m.Run())
	case "setup":
		os.Exit(exitOf(Setup(context.Background(), SetupOptions{CopyTo: os.Args[1], GatewayUID: kubepod.GatewayUID,
			Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})))
	case "gateway":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		os.Exit(exitOf(Gateway(ctx, GatewayOptions{ConfigPath: os.Args[1], TrustDir: os.Args[2], AuditDir: os.Args[3],
			Stdout: os.Stdout, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", envMode, os.Getenv(envMode))
		os.Exit(2)
	}
}

func exitOf(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}
