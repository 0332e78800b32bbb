//go:build linux

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClientSource is a websocket client of the standard library alone (RFC 6455 by hand), built
// outside the sandbox and run inside: it sends a handshake with "Authorization: Bearer $TOKEN",
// prints the server's first message, then for each argument sends it ($TOKEN expanded) and prints
// the echo.
const wsClientSource = `package main

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
)

func frame(op byte, p []byte) []byte {
	b := []byte{0x80 | op}
	switch {
	case len(p) < 126:
		b = append(b, 0x80|byte(len(p)))
	case len(p) < 1<<16:
		b = append(b, 0x80|126, byte(len(p)>>8), byte(len(p)))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
	}
	var m [4]byte
	rand.Read(m[:])
	b = append(b, m[:]...)
	for i, c := range p {
		b = append(b, c^m[i%4])
	}
	return b
}

func read(br *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		io.ReadFull(br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		io.ReadFull(br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	p := make([]byte, n)
	_, err := io.ReadFull(br, p)
	return h[0] & 0x0f, p, err
}

func main() {
	u, err := url.Parse(os.Args[1])
	if err != nil {
		panic(err)
	}
	c, err := tls.Dial("tcp", u.Host, &tls.Config{ServerName: u.Hostname()})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer %s\r\n\r\n", u.RequestURI(), u.Host, os.Getenv("TOKEN"))
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	fmt.Println("STATUS", strings.TrimSpace(status))
	for {
		l, err := br.ReadString('\n')
		if err != nil || strings.TrimSpace(l) == "" {
			break
		}
	}
	if !strings.Contains(status, " 101 ") {
		os.Exit(1)
	}
	print := func() {
		op, p, err := read(br)
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Printf("MSG %d %s\n", op, p)
	}
	print()
	for _, m := range os.Args[2:] {
		c.Write(frame(1, []byte(strings.ReplaceAll(m, "$TOKEN", os.Getenv("TOKEN")))))
		print()
	}
	c.Write(frame(8, []byte{0x03, 0xe8}))
}
`

// wsEchoUpstream is a websocket server (github.com/coder/websocket) on TLS with its own CA: it
// greets each connection with the Authorization it was sent, then echoes every message, and records
// what it received.
type wsEchoUpstream struct {
	port   int
	caFile string
	mu     sync.Mutex
	auth   []string
	msgs   []string
}

func newWSEchoUpstream(t *testing.T, h *harness, names ...string) *wsEchoUpstream {
	u := &wsEchoUpstream{}
	u.port, u.caFile = serveTLS(t, h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte("auth="+r.Header.Get("Authorization"))); err != nil {
			return
		}
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			u.mu.Lock()
			u.msgs = append(u.msgs, string(msg))
			u.mu.Unlock()
			if err := c.Write(ctx, typ, append([]byte("echo:"), msg...)); err != nil {
				return
			}
		}
	}), names...)
	return u
}

// TestWebsocketCredentialOfAnyLength: a websocket to a credential's host whose real value is not as
// long as its placeholder (issue 13: the upgrade failed with a 502 after the upstream had answered
// 101) works: the upstream gets the real value in the handshake's Authorization and, where the
// credential allows the body, in the messages the agent sends (a Go client and node's WebSocket
// inside), and every echo of it reaches the agent as the placeholder.
func TestWebsocketCredentialOfAnyLength(t *testing.T) {
	wsClient := buildProgram(t, wsClientSource)
	_, nodeErr := exec.LookPath("node")
	forEachTier(t, func(t *testing.T, h *harness) {
		secret := "sk-" + h.canary[:10] // shorter than any placeholder cordon makes
		up := newWSEchoUpstream(t, h, "ws.test")
		h.writeFile(filepath.Join(h.ws, "wsclient"), string(wsClient), 0o755)
		pol := fmt.Sprintf(`network:
  allow: [{host: ws.test, ports: [%d]}]
  hosts: {ws.test: 127.0.0.1}
  tls: {caFile: %q}
credentials:
  - name: TOKEN
    from: {env: CORDON_TEST_WS_TOKEN}
    inject: {host: ws.test, scheme: bearer, body: true}
`, up.port, up.caFile)
		node := ""
		if nodeErr == nil {
			node = fmt.Sprintf(`node --experimental-websocket -e '
const ws = new WebSocket("wss://ws.test:%d/node"); let n = 0;
ws.onopen = () => ws.send("node:" + process.env.TOKEN);
ws.onmessage = (e) => { console.log("NODE " + e.data); if (++n == 2) ws.close(1000); };
ws.onerror = (e) => { console.error("NODE ERROR", e.message); process.exit(1); };' 2>&1 | grep -v ExperimentalWarning`, up.port)
		}
		script := fmt.Sprintf(`echo "TOKEN=$TOKEN"
./wsclient wss://ws.test:%d/go 'go:$TOKEN' 'plain message'
%s
true`, up.port, node)
		r := h.sandboxed(pol, script, "CORDON_TEST_WS_TOKEN="+secret)
		if r.code != 0 {
			t.Fatalf("run failed:\n%s", r)
		}
		ph := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "TOKEN="); ok {
				ph = v
			}
		}
		if ph == "" || ph == secret || len(ph) == len(secret) {
			t.Fatalf("placeholder %q: want one of another length than the value", ph)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Fatalf("the real value reached the agent:\n%s", r)
		}
		want := []string{"STATUS HTTP/1.1 101", "MSG 1 auth=Bearer " + ph, "MSG 1 echo:go:" + ph, "MSG 1 echo:plain message"}
		if nodeErr == nil {
			want = append(want, "NODE auth=", "NODE echo:node:"+ph)
		}
		for _, w := range want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("the agent did not read %q:\n%s", w, r)
			}
		}
		up.mu.Lock()
		defer up.mu.Unlock()
		if len(up.auth) == 0 || up.auth[0] != "Bearer "+secret {
			t.Errorf("the upstream's handshakes carried %q, want the real value", up.auth)
		}
		got := strings.Join(up.msgs, "|")
		for _, w := range []string{"go:" + secret, "plain message"} {
			if !strings.Contains(got, w) {
				t.Errorf("the upstream got messages %q, want %q", up.msgs, w)
			}
		}
		if nodeErr == nil && !strings.Contains(got, "node:"+secret) {
			t.Errorf("the upstream got messages %q, want node's with the real value", up.msgs)
		}
	})
}

// buildProgram builds a Go program of the standard library alone, outside the sandbox.
func buildProgram(t *testing.T, source string) []byte {
	t.Helper()
	src := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "program")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the program: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
