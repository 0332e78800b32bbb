//go:build linux

package main

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRelayEpoll checks the epoll floor relay the connection-rate targets are measured against: it
// delivers every byte both ways, passes a half-close on, and does not spin while one side has ended
// and the other has not (a floor that spins takes a processor from the client and the upstream, and
// its figures are wrong).
func TestRelayEpoll(t *testing.T) {
	up, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	payload := bytes.Repeat([]byte("cordon-floor-"), 8<<20/13) // larger than the sockets' buffers
	release := make(chan struct{})
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, _ := io.ReadAll(c) // to the client's end of stream
				c.Write(payload)
				c.Write(req)
				<-release // keep the upstream's side open: the relay must wait without spinning
			}()
		}
	}()
	ports := make(chan int, 1)
	go relayEpoll(up.Addr().String(), func(p int) { ports <- p }) // runs until the test process ends
	port := <-ports

	c, err := net.DialTCP("tcp4", nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(payload), "request"...)
	got := make([]byte, len(want))
	time.Sleep(100 * time.Millisecond) // let the relay meet a full client, then read it all
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the answer through the relay: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the answer through the relay differs from what the upstream sent")
	}

	// Now the client's end is read and the upstream's is not: nothing to do until it comes.
	before := processCPU(t)
	time.Sleep(300 * time.Millisecond)
	if spent := processCPU(t) - before; spent > 100*time.Millisecond {
		t.Errorf("the relay used %v of CPU in 300 ms with nothing to relay: it spins", spent)
	}
	close(release)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the upstream closed, the client read %d bytes, %v; want the end of stream", n, err)
	}
}

func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
