//go:build !linux

package kernelrelay

import (
	"context"
	"errors"
	"net"
)

// Relay is the kernel relay; only Linux has one.
type Relay struct{}

// Pipe is two connections relayed by the kernel; only Linux has them.
type Pipe struct{}

// New fails: the kernel relay needs Linux's sockmap.
func New() (*Relay, error) { return nil, errors.New("kernel relay: needs Linux") }

// Close does nothing.
func (*Relay) Close() error { return nil }

// Splice fails.
func (*Relay) Splice(a, b *net.TCPConn) (*Pipe, error) {
	return nil, errors.New("kernel relay: needs Linux")
}

// Wait returns at once.
func (*Pipe) Wait(context.Context) (int64, int64, error) {
	return 0, 0, errors.New("kernel relay: needs Linux")
}

// HandoverError is Splice's error.
type HandoverError struct {
	AB, BA int64
	Err    error
}

func (e *HandoverError) Error() string { return "kernel relay: " + e.Err.Error() }
func (e *HandoverError) Unwrap() error { return e.Err }
