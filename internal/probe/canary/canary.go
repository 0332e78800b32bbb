// Package canary plants secrets on the host for cordon verify's probes to find, and removes them
// afterwards: a file in the real home, a variable for the caller's environment, a process holding a
// secret in its environment, a TCP/UDP listener on every host address, an abstract unix socket, an
// ssh-agent-like socket and a DNS server that records what reaches it. Each has something real to
// give away, so a probe that escapes can prove it; the probes get only coordinates and hashes.
package canary

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/miekg/dns"

	"github.com/cordon-sandbox/cordon/internal/probe"
)

// ProcessArg0 is the argv[0] under which the cordon binary runs as the canary process (see
// ProcessMain).
const ProcessArg0 = "cordon-canary-process"

// EnvName is the variable that carries the environment canary in the caller's environment.
const EnvName = "CORDON_VERIFY_SECRET"

// ProcessEnvName is the variable that carries the canary process's secret.
const ProcessEnvName = "CORDON_CANARY_PROCESS_SECRET"

// Options say where to plant.
type Options struct {
	// Home is the host user's real home; the secret file goes there (else into Dir).
	Home string
	// Dir is a private directory for the agent socket; it must exist.
	Dir string
	// Exe is the binary run as the canary process (the cordon binary).
	Exe string
	// ExtraPorts are further loopback TCP ports to listen on when free (the ports of allowed names).
	ExtraPorts []int
	// WriteDirs are host directories the probes will try to write to.
	WriteDirs []string
}

// Set is the planted canaries. Close removes them all.
type Set struct {
	nonce   string
	coords  probe.Canaries
	envVar  string
	closers []func()

	mu      sync.Mutex
	dnsSeen []string
	udpSeen []string
}

func random() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("canary: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Plant plants every canary. On error, whatever was planted is removed.
func Plant(opts Options) (_ *Set, err error) {
	nonce, err := random()
	if err != nil {
		return nil, err
	}
	nonce = nonce[:12]
	s := &Set{nonce: nonce}
	s.coords.Nonce = nonce
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for _, step := range []func(Options) error{s.secretFile, s.env, s.process, s.listener, s.abstract, s.agent, s.dns} {
		if err := step(opts); err != nil {
			return nil, err
		}
	}
	s.coords.WriteDirs = opts.WriteDirs
	return s, nil
}

// Coordinates are what the probes are told: where to look, and hashes to recognise what they find.
func (s *Set) Coordinates() probe.Canaries { return s.coords }

// Nonce marks everything the probes create.
func (s *Set) Nonce() string { return s.nonce }

// EnvVar is the NAME=value to add to the environment cordon is started with.
func (s *Set) EnvVar() string { return s.envVar }

// AgentSocket is the ssh-agent-like socket's path (for SSH_AUTH_SOCK).
func (s *Set) AgentSocket() string { return s.coords.AgentSocket }

// DNSAddr is the canary resolver's address, to use as the gateway's upstream.
func (s *Set) DNSAddr() netip.AddrPort { return netip.MustParseAddrPort(s.coords.DNS) }

// DNSSeen lists the names the canary resolver was asked for that carry the nonce: data that left
// the sandbox through DNS.
func (s *Set) DNSSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.dnsSeen...)
}

// UDPSeen lists the sources of datagrams carrying the nonce that reached the host listener.
func (s *Set) UDPSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.udpSeen...)
}

// Close removes every canary. It is safe to call more than once.
func (s *Set) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

func (s *Set) secretFile(o Options) error {
	token, err := random()
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range []string{o.Home, o.Dir} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, ".cordon-canary-"+s.nonce)
		if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
			errs = append(errs, err)
			continue
		}
		s.closers = append(s.closers, func() { os.Remove(p) })
		s.coords.SecretFile = &probe.Secret{Path: p, SHA256: probe.Sum([]byte(token))}
		return nil
	}
	return fmt.Errorf("canary: planting the secret file: %w", errors.Join(errs...))
}

func (s *Set) env(Options) error {
	token, err := random()
	if err != nil {
		return err
	}
	s.envVar = EnvName + "=" + token
	s.coords.Env = &probe.Secret{Name: EnvName, SHA256: probe.Sum([]byte(token))}
	return nil
}

func (s *Set) process(o Options) error {
	token, err := random()
	if err != nil {
		return err
	}
	marker := "cordon-canary-" + s.nonce
	cmd := exec.Command(o.Exe, marker)
	cmd.Args[0] = ProcessArg0
	cmd.Env = []string{ProcessEnvName + "=" + token}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("canary: process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("canary: starting the canary process: %w", err)
	}
	s.closers = append(s.closers, func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	s.coords.Process = &probe.Process{PID: cmd.Process.Pid, MarkerSHA256: probe.Sum([]byte(marker)), Env: probe.Secret{Name: ProcessEnvName, SHA256: probe.Sum([]byte(token))}}
	return nil
}

// ProcessMain is the canary process: it holds its secret in its environment and lives until its
// stdin closes (verify ends, or dies).
func ProcessMain() int {
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// greeter accepts connections on l and greets each with line.
func (s *Set) greeter(l net.Listener, line string) {
	s.closers = append(s.closers, func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, line+"\n")
				bufio.NewReader(c).ReadString('\n')
			}()
		}
	}()
}

func (s *Set) listener(o Options) error {
	token, err := random()
	if err != nil {
		return err
	}
	line := "cordon-canary-listener " + token
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return fmt.Errorf("canary: host listener: %w", err)
	}
	s.greeter(l, line)
	port := l.Addr().(*net.TCPAddr).Port
	c := &probe.Listener{Port: port, SHA256: probe.Sum([]byte(line))}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLinkLocalUnicast() {
				c.Addrs = append(c.Addrs, ip.Unmap().String())
			}
		}
	}
	for _, p := range o.ExtraPorts {
		if p == port {
			continue
		}
		if el, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			s.greeter(el, line)
			c.ExtraPorts = append(c.ExtraPorts, p)
		}
	}
	if pc, err := net.ListenPacket("udp", ":"+strconv.Itoa(port)); err == nil {
		s.closers = append(s.closers, func() { pc.Close() })
		go s.udpEcho(pc, line)
	}
	s.coords.Listener = c
	return nil
}

func (s *Set) udpEcho(pc net.PacketConn, line string) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if strings.Contains(string(buf[:n]), s.nonce) {
			s.mu.Lock()
			s.udpSeen = append(s.udpSeen, from.String())
			s.mu.Unlock()
		}
		pc.WriteTo([]byte(line+"\n"), from)
	}
}

func (s *Set) abstract(Options) error {
	token, err := random()
	if err != nil {
		return err
	}
	line := "cordon-canary-abstract " + token
	name := "cordon-canary-" + s.nonce
	l, err := net.Listen("unix", "@"+name)
	if err != nil {
		return fmt.Errorf("canary: abstract socket: %w", err)
	}
	s.greeter(l, line)
	s.coords.Abstract = &probe.Named{Name: name, SHA256: probe.Sum([]byte(line))}
	return nil
}

func (s *Set) agent(o Options) error {
	p := filepath.Join(o.Dir, "agent-"+s.nonce+".sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		return fmt.Errorf("canary: agent socket: %w", err)
	}
	s.greeter(l, "cordon-canary-agent")
	s.closers = append(s.closers, func() { os.Remove(p) })
	s.coords.AgentSocket = p
	return nil
}

func (s *Set) dns(Options) error {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("canary: DNS server: %w", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			if strings.Contains(strings.ToLower(qq.Name), s.nonce) {
				s.mu.Lock()
				s.dnsSeen = append(s.dnsSeen, qq.Name)
				s.mu.Unlock()
			}
			if qq.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(127, 0, 0, 1)})
			}
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	s.closers = append(s.closers, func() { srv.Shutdown() })
	s.coords.DNS = pc.LocalAddr().String()
	return nil
}
