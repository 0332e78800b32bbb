//go:build linux

package linux

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// socketRole says which of the gateway's sockets a descriptor in a sockets message is.
type socketRole string

const (
	roleTransparent socketRole = "transparent"
	roleProxy       socketRole = "proxy"
	roleDNSTCP      socketRole = "dns-tcp"
	roleDNSUDP      socketRole = "dns-udp"
)

// maxSockets bounds a sockets message: four roles, on IPv4 and IPv6 loopback.
const maxSockets = 8

func (r socketRole) valid() bool {
	switch r {
	case roleTransparent, roleProxy, roleDNSTCP, roleDNSUDP:
		return true
	}
	return false
}

// listenerFiles duplicates every socket of l as a file, with its role, so that init, which can make
// the sockets in its own namespace, can hand them to cordon outside.
func listenerFiles(l *sandbox.Listeners) (files []*os.File, roles []socketRole, err error) {
	type filer interface{ File() (*os.File, error) }
	add := func(role socketRole, x any) {
		if err != nil {
			return
		}
		var f *os.File
		if f, err = x.(filer).File(); err == nil {
			files, roles = append(files, f), append(roles, role)
		}
	}
	for _, ln := range l.Transparent {
		add(roleTransparent, ln)
	}
	for _, ln := range l.Proxy {
		add(roleProxy, ln)
	}
	for _, ln := range l.DNSTCP {
		add(roleDNSTCP, ln)
	}
	for _, c := range l.DNSUDP {
		add(roleDNSUDP, c)
	}
	if err != nil {
		closeAll(files)
		return nil, nil, fmt.Errorf("socket as file: %w", err)
	}
	return files, roles, nil
}

// listenersFromFiles is the inverse of listenerFiles: it wraps received sockets by role. It takes
// ownership of files, and refuses a set without a transparent and a DNS socket, which the gateway
// cannot serve.
func listenersFromFiles(files []*os.File, roles []socketRole) (sandbox.Listeners, error) {
	var l sandbox.Listeners
	if len(files) != len(roles) {
		closeAll(files)
		return l, fmt.Errorf("%d sockets for %d roles", len(files), len(roles))
	}
	var err error
	for i, f := range files {
		if err == nil {
			switch roles[i] {
			case roleDNSUDP:
				var c net.PacketConn
				if c, err = net.FilePacketConn(f); err == nil {
					l.DNSUDP = append(l.DNSUDP, c)
				}
			case roleTransparent, roleProxy, roleDNSTCP:
				var ln net.Listener
				if ln, err = net.FileListener(f); err == nil {
					switch roles[i] {
					case roleTransparent:
						l.Transparent = append(l.Transparent, ln)
					case roleProxy:
						l.Proxy = append(l.Proxy, ln)
					default:
						l.DNSTCP = append(l.DNSTCP, ln)
					}
				}
			default:
				err = fmt.Errorf("unknown socket role %q", roles[i])
			}
		}
		f.Close()
	}
	if err == nil && (len(l.Transparent) == 0 || len(l.DNSUDP) == 0) {
		err = errors.New("the gateway's sockets are incomplete")
	}
	if err != nil {
		l.Close()
		return sandbox.Listeners{}, err
	}
	return l, nil
}
