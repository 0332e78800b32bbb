package sni

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzPeek from the real clients and the table tests")

// writeSeed stores one input in FuzzPeek's seed corpus (only with -update-seeds).
func writeSeed(t *testing.T, name string, data []byte) {
	t.Helper()
	if !*updateSeeds {
		return
	}
	slug := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(name))
	dir := filepath.Join("testdata", "fuzz", "FuzzPeek")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
	if err := os.WriteFile(filepath.Join(dir, slug), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzPeek checks, for any input, that Peek never reads past what it reports in prefix, never
// reports more than the limit, only fails with its documented errors, is deterministic on its own
// prefix, only returns valid names, and never disagrees with crypto/tls's own server about the name
// and the ALPN list of a ClientHello both of them accept: a disagreement is exactly the gap an
// attacker would use to make the gateway check one name while the server serves another.
func FuzzPeek(f *testing.F) {
	f.Add(records(handshake(helloBody(sniExt(secretName), alpnExt("h2"))), 7))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 8 << 10
		r := bytes.NewReader(data)
		h, prefix, err := Peek(r, max)
		if len(prefix) > max || !bytes.HasPrefix(data, prefix) {
			t.Fatalf("prefix of %d bytes is not a bounded prefix of the input", len(prefix))
		}
		if r.Len() != len(data)-len(prefix) {
			t.Fatalf("read %d bytes but reported %d", len(data)-r.Len(), len(prefix))
		}
		if err != nil {
			for _, known := range []error{ErrNotTLS, ErrMalformed, ErrTooLarge, io.EOF, io.ErrUnexpectedEOF} {
				if errors.Is(err, known) {
					return
				}
			}
			t.Fatalf("undocumented error %v", err)
		}
		again, prefix2, err := Peek(bytes.NewReader(prefix), max)
		if err != nil || !reflect.DeepEqual(again, h) || !bytes.Equal(prefix, prefix2) {
			t.Fatalf("Peek of its own prefix differs: %+v %v", again, err)
		}
		if h.ServerName != strings.ToLower(h.ServerName) {
			t.Fatalf("name %q not lower-case", h.ServerName)
		}
		if h.ServerName != "" && !h.ServerNameIP.IsValid() && checkHostName(h.ServerName) != nil {
			t.Fatalf("invalid name %q accepted", h.ServerName)
		}
		if info := goServerSees(prefix); info != nil {
			if !strings.EqualFold(info.ServerName, h.ServerName) {
				t.Fatalf("crypto/tls sees server name %q, Peek %q", info.ServerName, h.ServerName)
			}
			if !slices.Equal(info.SupportedProtos, h.ALPN) {
				t.Fatalf("crypto/tls sees ALPN %q, Peek %q", info.SupportedProtos, h.ALPN)
			}
		}
	})
}

// goServerSees runs crypto/tls's server over the bytes and returns the ClientHelloInfo it parsed, or
// nil if it refused them.
func goServerSees(in []byte) *tls.ClientHelloInfo {
	var seen *tls.ClientHelloInfo
	stop := errors.New("stop")
	c := tls.Server(&bytesConn{r: bytes.NewReader(in)}, &tls.Config{
		GetConfigForClient: func(info *tls.ClientHelloInfo) (*tls.Config, error) {
			seen = info
			return nil, stop
		},
	})
	_ = c.Handshake()
	return seen
}

// bytesConn is a net.Conn that reads from a buffer and swallows writes.
type bytesConn struct{ r io.Reader }

func (c *bytesConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)        { return len(p), nil }
func (c *bytesConn) Close() error                       { return nil }
func (c *bytesConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *bytesConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *bytesConn) SetDeadline(t time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(t time.Time) error { return nil }
