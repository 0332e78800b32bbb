//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/egress/proxy/kernelrelay"
)

// The bench binary has three other roles, chosen by its first argument, so that every contender runs
// as a process of its own, as cordon's gateway does:
//
//	serve PORT            the upstream alone, on 127.0.0.1:PORT (0: any), for redirect.sh
//	relay-go UPSTREAM     a plain Go relay: a goroutine per direction, 4 MiB buffers
//	relay-epoll UPSTREAM  the cheapest relay we know how to write: one thread, one epoll loop
//	relay-splice UPSTREAM a Go relay whose bytes stay in the kernel: io.Copy between TCP sockets
//	                      (splice(2) through a pipe)
//	relay-sockmap UPSTREAM the kernel relays: cordon's eBPF sockmap (internal/egress/proxy/kernelrelay)
//	client ADDR N PAR     N connections (HEAD, read the answer, close), PAR at a time
//
// A relay listens on a loopback port of its own and prints "READY port". The relays check nothing and
// log nothing: they measure what relaying alone costs on this machine, the floor under any user-space
// gateway, cordon's included. Their listeners are transparent (IP_TRANSPARENT) where the process may
// make them so, which changes nothing for connections made to them and lets redirect.sh hand them
// connections with an nftables tproxy rule instead of a NAT redirect.
func role(args []string) bool {
	if len(args) < 3 {
		return false
	}
	switch args[1] {
	case "serve":
		ln, err := net.Listen("tcp", "127.0.0.1:"+args[2])
		check(err)
		fmt.Println("READY", ln.Addr().(*net.TCPAddr).Port)
		serve(ln)
	case "relay-go":
		ln, err := floorListener()
		check(err)
		fmt.Println("READY", ln.Addr().(*net.TCPAddr).Port)
		relayGo(ln, args[2])
	case "relay-splice", "relay-sockmap":
		ln, err := floorListener()
		check(err)
		fmt.Println("READY", ln.Addr().(*net.TCPAddr).Port)
		relayKernel(ln, args[2], args[1] == "relay-sockmap")
	case "relay-epoll":
		check(relayEpoll(args[2], func(port int) { fmt.Println("READY", port) }))
	case "client":
		if len(args) < 5 {
			return false
		}
		n, err := strconv.Atoi(args[3])
		check(err)
		par, err := strconv.Atoi(args[4])
		check(err)
		rate, p50 := client(args[2], n, par)
		var ru syscall.Rusage
		check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		fmt.Printf("%f %f %f\n", rate, p50.Seconds()*1e6, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Seconds())
	default:
		return false
	}
	return true
}

// floorListener is a Go relay's loopback listener, transparent where allowed (see role).
func floorListener() (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1) })
	}}
	return lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
}

// onlyWriter and onlyReader hide ReadFrom and WriteTo, so io.CopyBuffer uses its buffer (not
// splice(2), nor a 32 KiB buffer of its own).
type (
	onlyWriter struct{ io.Writer }
	onlyReader struct{ io.Reader }
)

func relayGo(ln net.Listener, upstream string) {
	bufs := sync.Pool{New: func() any { b := make([]byte, 4<<20); return &b }}
	pipe := func(dst, src net.Conn) {
		b := bufs.Get().(*[]byte)
		defer bufs.Put(b)
		_, _ = io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, *b)
		_ = dst.(*net.TCPConn).CloseWrite()
	}
	for {
		c, err := ln.Accept()
		check(err)
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{})
			go func() { pipe(u, c); close(done) }()
			pipe(c, u)
			<-done
		}()
	}
}

// relayKernel relays each connection in the kernel: with splice(2) (io.Copy between two TCP
// sockets), or handed to cordon's sockmap relay.
func relayKernel(ln net.Listener, upstream string, sockmap bool) {
	var kr *kernelrelay.Relay
	if sockmap {
		var err error
		kr, err = kernelrelay.New()
		check(err)
	}
	for {
		c, err := ln.Accept()
		check(err)
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			if kr != nil {
				p, err := kr.Splice(c.(*net.TCPConn), u.(*net.TCPConn))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				_, _, _ = p.Wait(context.Background())
				return
			}
			done := make(chan struct{})
			go func() { _, _ = io.Copy(u, c); _ = u.(*net.TCPConn).CloseWrite(); close(done) }()
			_, _ = io.Copy(c, u)
			_ = c.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// relayEpoll relays on one locked thread with non-blocking sockets. A write that the peer's buffer
// cannot take whole stops reading from the source until the rest is written, so no byte is lost.
func relayEpoll(upstream string, ready func(port int)) error {
	runtime.LockOSThread()
	ua, err := netip.ParseAddrPort(upstream)
	if err != nil {
		return err
	}
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_ = unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	_ = unix.SetsockoptInt(ln, unix.SOL_IP, unix.IP_TRANSPARENT, 1) // where allowed: see role
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	if err := unix.Listen(ln, 4096); err != nil {
		return err
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		return err
	}
	ready(sa.(*unix.SockaddrInet4).Port)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	type end struct {
		fd, peer int
		pending  []byte // read from fd, not yet written to peer
		eof      bool
		events   uint32 // what fd is watched for
	}
	ends := map[int]*end{}
	watch := func(op, fd int, ev uint32) {
		_ = unix.EpollCtl(ep, op, fd, &unix.EpollEvent{Events: ev, Fd: int32(fd)})
	}
	watch(unix.EPOLL_CTL_ADD, ln, unix.EPOLLIN)
	// The set is level-triggered, so a socket is watched for reading only while there is somewhere
	// to put what it has (nothing of it pending, its end not yet read), and for writing only while
	// its peer's bytes wait for room in it. Otherwise a socket at its end of stream, or one whose
	// bytes wait for a full peer, would wake the loop at once, again and again: the loop would spin.
	update := func(e *end) {
		if e == nil || ends[e.fd] != e {
			return
		}
		var ev uint32
		if !e.eof && len(e.pending) == 0 {
			ev |= unix.EPOLLIN | unix.EPOLLRDHUP
		}
		if p := ends[e.peer]; p != nil && len(p.pending) > 0 {
			ev |= unix.EPOLLOUT
		}
		if ev != e.events {
			watch(unix.EPOLL_CTL_MOD, e.fd, ev)
			e.events = ev
		}
	}
	closePair := func(e *end) {
		for _, fd := range []int{e.fd, e.peer} {
			if ends[fd] != nil {
				_ = unix.Close(fd)
				delete(ends, fd)
			}
		}
	}
	buf := make([]byte, 4<<20)
	evs := make([]unix.EpollEvent, 256)
	// pump moves bytes from e to its peer until e has nothing to read or the peer is full, then
	// sets what both sockets are watched for.
	pump := func(e *end) {
		defer func() { update(e); update(ends[e.peer]) }()
		for {
			if len(e.pending) > 0 {
				k, err := unix.Write(e.peer, e.pending)
				if err == unix.EAGAIN {
					return
				}
				if err != nil {
					closePair(e)
					return
				}
				e.pending = e.pending[k:]
				continue
			}
			if e.eof {
				return
			}
			k, err := unix.Read(e.fd, buf)
			switch {
			case err == unix.EAGAIN:
				return
			case err != nil:
				closePair(e)
				return
			case k == 0:
				e.eof = true
				_ = unix.Shutdown(e.peer, unix.SHUT_WR)
				if p := ends[e.peer]; p != nil && p.eof {
					closePair(e)
				}
				return
			}
			e.pending = slices.Clone(buf[:k])
		}
	}
	for {
		n, err := unix.EpollWait(ep, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range evs[:n] {
			fd := int(ev.Fd)
			if fd == ln {
				for {
					c, _, err := unix.Accept4(ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					if err != nil {
						break
					}
					u, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
					if err == nil {
						err = unix.Connect(u, &unix.SockaddrInet4{Port: int(ua.Port()), Addr: ua.Addr().As4()})
					}
					if err != nil && err != unix.EINPROGRESS {
						_ = unix.Close(c)
						_ = unix.Close(u)
						continue
					}
					reading := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
					ends[c], ends[u] = &end{fd: c, peer: u, events: reading}, &end{fd: u, peer: c, events: reading}
					watch(unix.EPOLL_CTL_ADD, c, reading)
					watch(unix.EPOLL_CTL_ADD, u, reading)
				}
				continue
			}
			e := ends[fd]
			if e == nil {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				// fd's send buffer has room: finish what its peer had pending for it.
				if p := ends[e.peer]; p != nil {
					pump(p)
				}
			}
			if ends[fd] != nil && ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				pump(e)
			}
		}
	}
}

// client makes n connections to addr, par at a time: connect, send a HEAD request, read the answer,
// close. It returns connections per second and the median time of one connection.
func client(addr string, n, par int) (float64, time.Duration) {
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if _, err := netip.ParseAddr(host); err != nil {
			ips, err := net.LookupHost(host) // once: the rate is of connections, not of DNS queries
			check(err)
			addr = net.JoinHostPort(ips[0], port)
		}
	}
	req := []byte("HEAD /?mib=0 HTTP/1.1\r\nHost: bench.test\r\n\r\n")
	one := func(buf []byte) time.Duration {
		t := time.Now()
		c, err := net.Dial("tcp", addr)
		check(err)
		_, err = c.Write(req)
		check(err)
		_, err = c.Read(buf)
		check(err)
		check(c.Close())
		return time.Since(t)
	}
	buf := make([]byte, 1024)
	for range 50 {
		one(buf) // warm up
	}
	lat := make([][]time.Duration, par)
	var wg sync.WaitGroup
	start := time.Now()
	for p := range par {
		wg.Go(func() {
			buf := make([]byte, 1024)
			for range n / par {
				lat[p] = append(lat[p], one(buf))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	return float64(len(all)) / el.Seconds(), all[len(all)/2]
}

// relay is a relay process started by startRelay.
type relay struct {
	name string // as the results name it
	port int
	cmd  *exec.Cmd
}

// relayNames are the relay roles' names in the results.
var relayNames = map[string]string{"relay-go": "Go relay", "relay-splice": "splice", "relay-sockmap": "sockmap", "relay-epoll": "epoll relay"}

// startRelay runs this binary as a relay (role "relay-go" or "relay-epoll") to upstream, returning
// once it listens.
func startRelay(role, upstream string) *relay {
	self, err := os.Executable()
	check(err)
	r := &relay{name: relayNames[role], cmd: exec.Command(self, role, upstream)}
	r.cmd.Stderr = os.Stderr
	// A bench that exits on an error (check) runs no deferred stop: the relays go with it.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := r.cmd.StdoutPipe()
	check(err)
	check(r.cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, perr := fmt.Sscanf(line, "READY %d", &r.port); err != nil || perr != nil {
		check(errors.Join(fmt.Errorf("%s did not start", role), err, perr))
	}
	return r
}

func (r *relay) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// cpu is the CPU time the relay has used so far (user and system, from /proc: it is not waited for).
func (r *relay) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	check(err)
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])) // after "pid (comm) "
	utime, err := strconv.ParseInt(f[11], 10, 64)
	check(err)
	stime, err := strconv.ParseInt(f[12], 10, 64)
	check(err)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
