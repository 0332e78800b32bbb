//go:build !linux

package proxy

import (
	"io"
	"net"
)

// pipePool is the splice pipe pool of Linux; elsewhere relays copy through user space.
type pipePool struct{}

// relay copies from src to dst until src's end of stream.
func (*pipePool) relay(dst io.Writer, src net.Conn) (int64, error) { return io.Copy(dst, src) }

// relayN copies exactly n bytes from src to dst, like io.CopyN.
func (*pipePool) relayN(dst io.Writer, src net.Conn, n int64) (int64, error) {
	return io.CopyN(dst, src, n)
}

// drain has nothing to close.
func (*pipePool) drain() {}
