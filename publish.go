package cordon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// published is a run's published ports: the host's listeners, opened before the box starts (a port
// that cannot be had stops the run), and the relays of their connections into the sandbox.
type published struct {
	listeners []net.Listener
	ports     []uint16
	wg        sync.WaitGroup
}

// listenPublished opens the host side of cfg.Publish. It needs the policy's network section: the
// gateway's audit log records every inbound connection.
func listenPublished(pubs []Publish, hasNetwork bool) (*published, error) {
	if len(pubs) == 0 {
		return nil, nil
	}
	if !hasNetwork {
		return nil, errors.New("publishing a port needs a network section in the policy (its audit log records each inbound connection; network: {} allows nothing out)")
	}
	p := &published{}
	for _, pub := range pubs {
		if pub.Port == 0 || !pub.Host.IsValid() {
			p.close()
			return nil, fmt.Errorf("publish %v:%d: a host address and port and a sandbox port are required", pub.Host, pub.Port)
		}
		if gp := gateway.Ports(); pub.Port == gp.Proxy || pub.Port == gp.Transparent || pub.Port == gp.DNS {
			// The gateway listens there inside: a host connection would be the sandbox's egress,
			// with its credentials, for whoever on the host can reach the address.
			p.close()
			return nil, fmt.Errorf("publish %s: port %d inside is cordon's egress gateway, not a server of the command", pub.Host, pub.Port)
		}
		ln, err := net.Listen("tcp", pub.Host.String())
		if err != nil {
			p.close()
			return nil, fmt.Errorf("publish %s: %w", pub.Host, err)
		}
		p.listeners = append(p.listeners, ln)
		p.ports = append(p.ports, pub.Port)
	}
	return p, nil
}

// insidePorts are the sandbox ports to publish, for the launch.
func (p *published) insidePorts() []uint16 {
	if p == nil {
		return nil
	}
	return p.ports
}

// serve relays each connection to a listener into its port inside sb, recording each in gw's log.
func (p *published) serve(sb sandbox.Sandbox, gw *gateway.Gateway) error {
	if p == nil {
		return nil
	}
	pub, ok := sb.(sandbox.Publisher)
	if !ok {
		return errors.New("this sandbox cannot publish ports")
	}
	for i, ln := range p.listeners {
		port := p.ports[i]
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return // closed
				}
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					p.relay(c, ln.Addr().String(), port, pub, gw)
				}()
			}
		}()
	}
	return nil
}

// relay connects one host connection to port inside and copies both ways until either side ends.
func (p *published) relay(c net.Conn, host string, port uint16, pub sandbox.Publisher, gw *gateway.Gateway) {
	defer c.Close()
	start := time.Now()
	ev := audit.Event{Time: start, Kind: audit.KindInbound, Name: "localhost", Port: port, Decision: audit.Allow,
		Rule: "--publish " + host + ":" + strconv.Itoa(int(port)), Detail: map[string]string{"from": c.RemoteAddr().String(), "published": host}}
	defer func() {
		ev.Duration = time.Since(start)
		gw.Record(ev)
	}()
	in, err := pub.DialPublished(port)
	if err != nil {
		ev.Decision, ev.Reason = audit.Deny, err.Error()
		return
	}
	defer in.Close()
	done := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(in, c) // the host's bytes into the sandbox
		closeWrite(in)
		done <- n
	}()
	out, _ := io.Copy(c, in)
	closeWrite(c)
	// The server inside is done: a host client that keeps its side open must not hold the run.
	_ = c.SetReadDeadline(time.Now())
	ev.BytesOut, ev.BytesIn = <-done, out
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// close stops accepting and waits for the relays, which end with the sandbox.
func (p *published) close() {
	if p == nil {
		return
	}
	for _, ln := range p.listeners {
		ln.Close()
	}
	p.wg.Wait()
}
