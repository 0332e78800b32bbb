//go:build linux

package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Published ports: the sandbox's network namespace has loopback only, so a host connection to a
// server the command runs cannot be routed in. cordon asks init instead, over a socket pair made at
// launch (publishFD): init, which lives in the namespace, connects to 127.0.0.1:PORT for a port the
// launch published and sends the connected socket back (SCM_RIGHTS); cordon relays the host's
// connection over it. A request is two bytes (the port); an answer is one status byte (0 with the
// descriptor, 1 with an error text).

// servePublish is init's side: it answers requests until cordon's end closes.
func servePublish(f *os.File, ports []uint16) {
	defer f.Close()
	fd := int(f.Fd())
	req := make([]byte, 16)
	for {
		n, err := unix.Read(fd, req)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		if n != 2 {
			_, _ = unix.Write(fd, []byte("\x01a request is two bytes"))
			continue
		}
		port := binary.BigEndian.Uint16(req)
		if !slices.Contains(ports, port) {
			_, _ = unix.Write(fd, []byte(fmt.Sprintf("\x01port %d is not published", port)))
			continue
		}
		c, err := dialLoopback(port)
		if err != nil {
			_, _ = unix.Write(fd, append([]byte{1}, err.Error()...))
			continue
		}
		err = unix.Sendmsg(fd, []byte{0}, unix.UnixRights(c), nil, 0)
		unix.Close(c)
		if err != nil {
			return
		}
	}
}

// dialLoopback connects a TCP socket to 127.0.0.1:port, then [::1]:port, in this namespace.
func dialLoopback(port uint16) (int, error) {
	var errs []error
	for _, sa := range []unix.Sockaddr{&unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}, &unix.SockaddrInet6{Port: int(port), Addr: [16]byte{15: 1}}} {
		family := unix.AF_INET
		if _, v6 := sa.(*unix.SockaddrInet6); v6 {
			family = unix.AF_INET6
		}
		s, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Connect(s, sa); err != nil {
			unix.Close(s)
			errs = append(errs, err)
			continue
		}
		return s, nil
	}
	return -1, fmt.Errorf("nothing listens on port %d inside: %w", port, errors.Join(errs...))
}

// publisher is cordon's side of the channel; one request at a time.
type publisher struct {
	mu sync.Mutex
	f  *os.File
}

// DialPublished connects to port on the sandbox's loopback through init.
func (s *running) DialPublished(port uint16) (net.Conn, error) {
	p := s.publish
	if p == nil {
		return nil, errors.New("sandbox: no port was published")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil, errors.New("sandbox: the sandbox has ended")
	}
	fd := int(p.f.Fd())
	if _, err := unix.Write(fd, binary.BigEndian.AppendUint16(nil, port)); err != nil {
		return nil, fmt.Errorf("sandbox: asking for port %d: %w", port, err)
	}
	buf := make([]byte, 512)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: port %d: %w", port, err)
	}
	if n == 0 {
		return nil, errors.New("sandbox: the sandbox's init is gone")
	}
	if buf[0] != 0 {
		return nil, fmt.Errorf("sandbox: %s", buf[1:n])
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("sandbox: port %d: no connection came back", port)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("sandbox: port %d: no connection came back", port)
	}
	f := os.NewFile(uintptr(fds[0]), "published")
	defer f.Close()
	return net.FileConn(f)
}

// close ends the channel (init's side returns) once no request is waiting for its answer.
func (p *publisher) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}
