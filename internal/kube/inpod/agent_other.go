//go:build !linux

package inpod

import (
	"context"
	"errors"
)

// runAndKill needs Linux (a subreaper, kill(-1), pidfds); pods run Linux, so elsewhere the wrapper
// refuses to start.
func runAndKill(context.Context, AgentOptions) (int, error, error) {
	err := errors.New("agent: the pod's agent wrapper runs on Linux only")
	return exitWrapper, err, err
}
