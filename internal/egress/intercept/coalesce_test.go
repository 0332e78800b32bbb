package intercept

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"
)

type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestBatchedTLSWrites: one large Write through the TLS layer reaches the socket in a few syscalls
// instead of one per 16 KiB record, and the peer reads exactly what was written; the handshake, which
// the TLS layer writes on its own, is not held back.
func TestBatchedTLSWrites(t *testing.T) {
	ca := testpki.NewCA(t, "batch test CA")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		counted := &countingConn{Conn: c}
		raw := &batchConn{Conn: counted}
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "batch.test")}})
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		before := counted.writes.Load()
		w := &batchedTLS{Conn: tc, raw: raw}
		payload := bytes.Repeat([]byte("cordon-"), 1<<18/7*4) // about 1 MiB: 64 records
		w.Write(payload)
		if n := counted.writes.Load() - before; n > 8 {
			t.Errorf("a %d-byte Write took %d writes to the socket", len(payload), n)
		}
		tc.Close()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "batch.test", RootCAs: ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "close_notify") {
		t.Fatal(err)
	}
	if want := bytes.Repeat([]byte("cordon-"), 1<<18/7*4); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, and the same bytes", len(got), len(want))
	}
}

// TestFullReader: a body of known length is read in full buffers, and its end is an ordinary EOF.
func TestFullReader(t *testing.T) {
	r := fullReader{io.NopCloser(io.MultiReader(strings.NewReader("abc"), strings.NewReader("defg")))}
	buf := make([]byte, 5)
	n, err := r.Read(buf)
	if n != 5 || err != nil || string(buf[:n]) != "abcde" {
		t.Fatalf("first read: %d %v %q", n, err, buf[:n])
	}
	n, err = r.Read(buf)
	if n != 2 || err != io.EOF || string(buf[:n]) != "fg" {
		t.Fatalf("second read: %d %v %q", n, err, buf[:n])
	}
}
