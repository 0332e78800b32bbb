package sni

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

const maxHello = 64 << 10

// capture is what the peek-then-serve server learned from one connection.
type capture struct {
	hello  *Hello
	prefix []byte
	err    error
	// state is the TLS session the real server completed after the prefix was replayed to it.
	state tls.ConnectionState
	hsErr error
}

// peekServer accepts connections on loopback, Peeks each one's ClientHello, and then replays the
// prefix into a real crypto/tls server that answers one HTTP request with "ok": a client only gets
// its answer if Peek left the byte stream intact.
func peekServer(t *testing.T, pki *testPKI, ech []tls.EncryptedClientHelloKey) (port int, results <-chan capture) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan capture, 8)
	cfg := &tls.Config{
		Certificates:             []tls.Certificate{pki.leaf},
		NextProtos:               []string{"http/1.1"},
		EncryptedClientHelloKeys: ech,
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var cp capture
				cp.hello, cp.prefix, cp.err = Peek(c, maxHello)
				if cp.err == nil {
					tc := tls.Server(replay(c, cp.prefix), cfg)
					if cp.hsErr = tc.Handshake(); cp.hsErr == nil {
						cp.state = tc.ConnectionState()
						if _, err := http.ReadRequest(bufio.NewReader(tc)); err == nil {
							_, _ = io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
						}
						_ = tc.Close()
					}
				}
				out <- cp
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, out
}

func next(t *testing.T, results <-chan capture) capture {
	t.Helper()
	select {
	case c := <-results:
		return c
	case <-time.After(15 * time.Second):
		t.Fatal("no connection reached the peek server")
		return capture{}
	}
}

// goGet fetches / over TLS with crypto/tls as the client.
func goGet(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

func run(t *testing.T, name string, stdin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, needTool(t, name), args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPeekRealClients captures the ClientHello of real TLS clients on a loopback listener, checks what
// Peek makes of it, and checks that replaying Peek's prefix to a real TLS server completes the
// handshake and the request (so Peek consumed nothing for good).
func TestPeekRealClients(t *testing.T) {
	pki := newPKI(t)
	echList, echServerKeys := echKeys(t)
	longALPN := make([]string, 24)
	for i := range longALPN {
		longALPN[i] = fmt.Sprintf("cordon-test-protocol-%02d-%s", i, strings.Repeat("x", 60))
	}
	tests := []struct {
		name       string
		client     func(t *testing.T, port int) (string, error)
		ech        bool // the server accepts ECH
		wantName   string
		wantIP     bool
		wantALPN   []string // must be offered (others may be too)
		wantECH    bool
		minRecords int
		// seenBy is the name the real server saw after the replay, when it differs from wantName.
		seenBy string
	}{
		{
			name: "crypto/tls TLS 1.3",
			client: func(t *testing.T, port int) (string, error) {
				return goGet(fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: secretName, RootCAs: pki.pool,
					NextProtos: []string{"h2", "http/1.1"}})
			},
			wantName: secretName, wantALPN: []string{"h2", "http/1.1"}, minRecords: 1,
		},
		{
			name: "crypto/tls TLS 1.2, upper-case name",
			client: func(t *testing.T, port int) (string, error) {
				return goGet(fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: "API.Example.TEST", RootCAs: pki.pool,
					MaxVersion: tls.VersionTLS12})
			},
			wantName: secretName, minRecords: 1,
		},
		{
			name: "crypto/tls with ECH hides the name",
			client: func(t *testing.T, port int) (string, error) {
				return goGet(fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: secretName, RootCAs: pki.pool,
					MinVersion: tls.VersionTLS13, EncryptedClientHelloConfigList: echList})
			},
			ech: true, wantName: publicName, wantECH: true, minRecords: 1, seenBy: secretName,
		},
		{
			name: "curl --resolve",
			client: func(t *testing.T, port int) (string, error) {
				return run(t, "curl", "", "-sS", "--max-time", "10", "--cacert", pki.caFile,
					"--resolve", fmt.Sprintf("%s:%d:127.0.0.1", secretName, port),
					fmt.Sprintf("https://%s:%d/", secretName, port))
			},
			wantName: secretName, wantALPN: []string{"http/1.1"}, minRecords: 1,
		},
		{
			name: "curl to an IP address sends no SNI",
			client: func(t *testing.T, port int) (string, error) {
				return run(t, "curl", "", "-sS", "--max-time", "10", "--cacert", pki.caFile,
					fmt.Sprintf("https://127.0.0.1:%d/", port))
			},
			wantName: "", minRecords: 1,
		},
		{
			name: "openssl s_client -servername",
			client: func(t *testing.T, port int) (string, error) {
				return run(t, "openssl", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "s_client", "-quiet", "-ign_eof",
					"-connect", fmt.Sprintf("127.0.0.1:%d", port), "-servername", secretName, "-alpn", "h2,http/1.1",
					"-CAfile", pki.caFile, "-verify_return_error", "-verify_hostname", secretName)
			},
			wantName: secretName, wantALPN: []string{"h2", "http/1.1"}, minRecords: 1,
		},
		{
			name: "openssl s_client with an IP literal as server name",
			client: func(t *testing.T, port int) (string, error) {
				return run(t, "openssl", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "s_client", "-quiet", "-ign_eof",
					"-connect", fmt.Sprintf("127.0.0.1:%d", port), "-servername", "127.0.0.1",
					"-CAfile", pki.caFile, "-verify_return_error", "-verify_ip", "127.0.0.1")
			},
			wantName: "127.0.0.1", wantIP: true, minRecords: 1,
		},
		{
			name: "openssl s_client -noservername",
			client: func(t *testing.T, port int) (string, error) {
				return run(t, "openssl", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "s_client", "-quiet", "-ign_eof",
					"-connect", fmt.Sprintf("127.0.0.1:%d", port), "-noservername",
					"-CAfile", pki.caFile, "-verify_return_error")
			},
			wantName: "", minRecords: 1,
		},
		{
			name: "openssl s_client splits a large ClientHello over records",
			client: func(t *testing.T, port int) (string, error) {
				return run(t, "openssl", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "s_client", "-quiet", "-ign_eof",
					"-connect", fmt.Sprintf("127.0.0.1:%d", port), "-servername", secretName,
					"-max_send_frag", "512", "-alpn", strings.Join(append(longALPN, "http/1.1"), ","),
					"-CAfile", pki.caFile, "-verify_return_error")
			},
			wantName: secretName, wantALPN: append(longALPN, "http/1.1"), minRecords: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var keys []tls.EncryptedClientHelloKey
			if tt.ech {
				keys = echServerKeys
			}
			port, results := peekServer(t, pki, keys)
			out, clientErr := tt.client(t, port)
			cp := next(t, results)
			if cp.err != nil {
				t.Fatalf("Peek: %v", cp.err)
			}
			writeSeed(t, tt.name, cp.prefix)
			h := cp.hello
			if h.ServerName != tt.wantName || h.ServerNameIP.IsValid() != tt.wantIP || h.ECH != tt.wantECH {
				t.Errorf("Peek = name %q, ip %v, ech %v; want %q, %v, %v", h.ServerName, h.ServerNameIP, h.ECH,
					tt.wantName, tt.wantIP, tt.wantECH)
			}
			for _, p := range tt.wantALPN {
				if !slices.Contains(h.ALPN, p) {
					t.Errorf("ALPN %q not among %q", p, h.ALPN)
				}
			}
			if n := countRecords(cp.prefix); n < tt.minRecords {
				t.Errorf("ClientHello came in %d records, want at least %d", n, tt.minRecords)
			}
			// The replayed prefix must have carried the handshake to completion.
			if cp.hsErr != nil {
				t.Fatalf("real TLS server after replay: %v (client said %v: %s)", cp.hsErr, clientErr, out)
			}
			if clientErr != nil || !strings.Contains(out, "ok") {
				t.Fatalf("client did not get the answer through the replayed connection: %v: %q", clientErr, out)
			}
			seen := tt.wantName
			if tt.seenBy != "" {
				seen = tt.seenBy
				if !cp.state.ECHAccepted {
					t.Errorf("server did not accept ECH")
				}
			}
			if !strings.EqualFold(cp.state.ServerName, seen) {
				t.Errorf("server saw name %q after replay, want %q", cp.state.ServerName, seen)
			}
		})
	}
}

// TestPeekAcrossTCPReads puts a relay between a real client and the peek server that cuts the
// ClientHello into 9-byte TLS records and writes them a few bytes at a time: Peek must reassemble the
// hello, and the real server must still complete the handshake from the replayed bytes.
func TestPeekAcrossTCPReads(t *testing.T) {
	pki := newPKI(t)
	port, results := peekServer(t, pki, nil)
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
		defer c.Close()
		up, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return
		}
		defer up.Close()
		_, prefix, err := Peek(c, maxHello)
		if err != nil {
			return
		}
		frag := records(handshakeOf(t, prefix), 9)
		for len(frag) > 0 {
			n := min(4, len(frag))
			if _, err := up.Write(frag[:n]); err != nil {
				return
			}
			frag = frag[n:]
			time.Sleep(50 * time.Microsecond) // let the segments arrive apart
		}
		go func() { _, _ = io.Copy(up, c) }()
		_, _ = io.Copy(c, up)
	}()
	out, err := goGet(ln.Addr().String(), &tls.Config{ServerName: secretName, RootCAs: pki.pool})
	cp := next(t, results)
	if cp.err != nil {
		t.Fatalf("Peek: %v", cp.err)
	}
	if cp.hello.ServerName != secretName {
		t.Errorf("ServerName %q, want %q", cp.hello.ServerName, secretName)
	}
	if n := countRecords(cp.prefix); n < 20 {
		t.Errorf("only %d records: the relay did not fragment", n)
	}
	if cp.hsErr != nil || err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("handshake after fragmented replay: server %v, client %v %q", cp.hsErr, err, out)
	}
}

// TestPeekFragments feeds one ClientHello cut into records of every size through readers that return
// one byte, half the request, or everything at once, and checks that Peek stops exactly at the end of
// the hello: the bytes after it stay in the reader.
func TestPeekFragments(t *testing.T) {
	msg := handshake(helloBody(sniExt(secretName), alpnExt("h2", "http/1.1")))
	trailer := []byte("\x17\x03\x03 early data that must not be read")
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for _, frag := range []int{1, 2, 3, 4, 5, 9, 64, len(msg) - 1, len(msg), maxPlaintextRecord} {
		for rname, wrap := range readers {
			t.Run(fmt.Sprintf("%d/%s", frag, rname), func(t *testing.T) {
				in := records(msg, frag)
				src := bytes.NewReader(append(slices.Clone(in), trailer...))
				h, prefix, err := Peek(wrap(src), maxHello)
				if err != nil {
					t.Fatalf("Peek: %v", err)
				}
				if h.ServerName != secretName || !slices.Equal(h.ALPN, []string{"h2", "http/1.1"}) {
					t.Errorf("got %+v", h)
				}
				if !bytes.Equal(prefix, in) {
					t.Errorf("prefix is not the records read (%d bytes, want %d)", len(prefix), len(in))
				}
				rest, _ := io.ReadAll(src)
				if !bytes.Equal(rest, trailer) {
					t.Errorf("Peek read past the ClientHello: %d bytes left, want %d", len(rest), len(trailer))
				}
			})
		}
	}
}

// TestPeekRejects is the table of hostile and broken inputs. Each row but the first is a valid hello
// with one thing wrong; the first row is that valid hello, so the table proves it can tell them apart.
func TestPeekRejects(t *testing.T) {
	valid := handshake(helloBody(sniExt(secretName), alpnExt("h2")))
	mutate := func(f func([]byte) []byte) []byte { return f(records(valid, 1<<14)) }
	huge := handshake(helloBody(sniExt(secretName), ext{0x0015, make([]byte, 3000)})) // padding
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    error // nil: must parse
		name2   string
		ip      string
		prefix  int // bytes Peek must report having read; -1: all of in
		wantECH bool
	}{
		{name: "valid", in: records(valid, 100), name2: secretName, prefix: -1},
		{name: "upper-case name is folded", in: records(handshake(helloBody(sniExt("API.Example.Test"))), 1<<14), name2: secretName, prefix: -1},
		{name: "no server name", in: records(handshake(helloBody(alpnExt("h2"))), 1<<14), prefix: -1},
		{name: "no extensions at all", in: records(handshake(helloBody()[:2+32+1+32+6+2]), 1<<14), prefix: -1},
		{name: "IPv4 literal", in: records(handshake(helloBody(sniExt("192.0.2.1"))), 1<<14), name2: "192.0.2.1", ip: "192.0.2.1", prefix: -1},
		{name: "IPv6 literal", in: records(handshake(helloBody(sniExt("2001:db8::1"))), 1<<14), name2: "2001:db8::1", ip: "2001:db8::1", prefix: -1},
		{name: "ECH", in: records(handshake(helloBody(sniExt(publicName), ext{extECH, []byte{0, 1, 2}})), 1<<14), name2: publicName, prefix: -1, wantECH: true},
		{name: "ESNI draft", in: records(handshake(helloBody(sniExt(publicName), ext{extESNI, []byte{9}})), 1<<14), name2: publicName, prefix: -1, wantECH: true},

		{name: "HTTP is not TLS", in: []byte("GET / HTTP/1.1\r\n"), want: ErrNotTLS, prefix: 1},
		{name: "SSLv2 hello is not TLS", in: []byte{0x80, 0x2e, 0x01, 0x00, 0x02}, want: ErrNotTLS, prefix: 1},
		{name: "empty input", in: nil, want: io.EOF, prefix: 0},
		{name: "truncated record", in: records(valid, 1<<14)[:40], want: io.ErrUnexpectedEOF, prefix: 40},
		{name: "truncated across records", in: records(valid, 20)[:60], want: io.ErrUnexpectedEOF, prefix: 60},
		{name: "record version 2", in: mutate(func(b []byte) []byte { b[1] = 2; return b }), want: ErrMalformed, prefix: 5},
		{name: "zero-length record", in: append([]byte{0x16, 3, 1, 0, 0}, records(valid, 1<<14)...), want: ErrMalformed, prefix: 5},
		{name: "record over 2^14", in: append([]byte{0x16, 3, 1, 0x40, 0x01}, 1, 0, 0x40, 0), want: ErrMalformed, prefix: 5},
		{name: "alert record inside the hello", in: append(records(valid[:10], 10), 0x15, 3, 3, 0, 2, 2, 40), want: ErrMalformed, prefix: 20},
		{name: "ServerHello instead", in: mutate(func(b []byte) []byte { b[5] = 2; return b }), want: ErrMalformed, prefix: -1},
		{name: "bytes after the hello in its record", in: records(append(slices.Clone(valid), 1, 0, 0, 0), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "two server names", in: records(handshake(helloBody(sniExt(secretName, "evil.example"))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "two server_name extensions", in: records(handshake(helloBody(sniExt(secretName), sniExt("evil.example"))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "unknown name type", in: records(handshake(helloBody(ext{extServerName, []byte{0, 4, 1, 0, 1, 'a'}})), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "empty server name list", in: records(handshake(helloBody(ext{extServerName, []byte{0, 0}})), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "empty host name", in: records(handshake(helloBody(sniExt(""))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "trailing dot", in: records(handshake(helloBody(sniExt(secretName+"."))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "space in name", in: records(handshake(helloBody(sniExt("api.example.test evil.example"))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "NUL in name", in: records(handshake(helloBody(sniExt("evil.example\x00.api.example.test"))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "IPv6 literal with zone", in: records(handshake(helloBody(sniExt("fe80::1%eth0"))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "label over 63 bytes", in: records(handshake(helloBody(sniExt(strings.Repeat("a", 64)+".test"))), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "trailing bytes in server_name", in: records(handshake(helloBody(ext{extServerName, append(sniExt("a.test").data, 0)})), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "empty ALPN protocol", in: records(handshake(helloBody(ext{extALPN, []byte{0, 1, 0}})), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "session id over 32 bytes", in: records(handshake(func() []byte { b := helloBody(); b[34] = 33; return b }()), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "odd cipher suites length", in: records(handshake(func() []byte { b := helloBody(); b[2+32+1+32+1] = 3; return b }()), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "extension overruns its list", in: records(handshake(func() []byte { b := helloBody(sniExt("a.test")); b[len(b)-len(sniExt("a.test").data)-1]++; return b }()), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "bytes after the extensions", in: records(handshake(append(helloBody(sniExt("a.test")), 0)), 1<<14), want: ErrMalformed, prefix: -1},
		{name: "over the caller's limit", in: records(huge, 1<<14), max: 1024, want: ErrTooLarge, prefix: 0},
		{name: "claims 16 MiB", in: []byte{0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, want: ErrTooLarge, prefix: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			max := tt.max
			if max == 0 {
				max = maxHello
			}
			writeSeed(t, tt.name, tt.in)
			h, prefix, err := Peek(bytes.NewReader(tt.in), max)
			wantPrefix := tt.prefix
			if wantPrefix < 0 {
				wantPrefix = len(tt.in)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Peek: %v", err)
				}
				if h.ServerName != tt.name2 || h.ECH != tt.wantECH {
					t.Errorf("got name %q ech %v, want %q %v", h.ServerName, h.ECH, tt.name2, tt.wantECH)
				}
				if tt.ip != "" && h.ServerNameIP != netip.MustParseAddr(tt.ip) || tt.ip == "" && h.ServerNameIP.IsValid() {
					t.Errorf("ServerNameIP %v, want %q", h.ServerNameIP, tt.ip)
				}
			} else if !errors.Is(err, tt.want) {
				t.Fatalf("Peek error %v, want %v", err, tt.want)
			}
			if tt.name != "over the caller's limit" && len(prefix) != wantPrefix {
				t.Errorf("prefix has %d bytes, want %d", len(prefix), wantPrefix)
			}
			if len(prefix) > max || !bytes.HasPrefix(tt.in, prefix) {
				t.Errorf("prefix (%d bytes) is not a bounded prefix of the input", len(prefix))
			}
		})
	}
}

func BenchmarkPeek(b *testing.B) {
	in := records(handshake(helloBody(sniExt(secretName), alpnExt("h2", "http/1.1"), ext{0x0015, make([]byte, 1200)})), 1<<14)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, _, err := Peek(bytes.NewReader(in), maxHello); err != nil {
			b.Fatal(err)
		}
	}
}
