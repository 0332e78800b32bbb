package inpod

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Keep is the keeper container's entry point: it holds the pod open after the agent has exited, so
// that cordon can still exec Fetch in it, and returns when it is told to stop (SIGTERM, as kubelet
// ends a pod, or SIGINT) or ctx ends. A keeper that stops is a keeper that did its job: it never
// fails.
func Keep(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
