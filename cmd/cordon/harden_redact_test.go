//go:build linux

package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Issue 11, items 2 and 3: what the gateway's search of a bound host's answers gives away (the
// held-back tail must not say whether it began the credential) and what it missed (the value in a
// header's name, cut across two header fields, cut across websocket frames).

// redactUpstream is a bound host that reflects text the agent chooses and cuts the credential it was
// sent into parts; it records what it was sent.
type redactUpstream struct {
	port   int
	caFile string
	mu     sync.Mutex
	seen   map[string]string // path and query → the x-api-key it came with
}

func newRedactUpstream(t *testing.T, h *harness) *redactUpstream {
	u := &redactUpstream{seen: map[string]string{}}
	mux := http.NewServeMux()
	key := func(r *http.Request) string {
		u.mu.Lock()
		u.seen[r.URL.RequestURI()] = r.Header.Get("x-api-key")
		u.mu.Unlock()
		if r.URL.Query().Get("control") != "" {
			return strings.Repeat("c", len(r.Header.Get("x-api-key"))) // the same answer without it
		}
		return r.Header.Get("x-api-key")
	}
	// /reflect?text=T streams "data: T" and then nothing for 10 s (or until the client goes): an
	// echo endpoint, a model repeating its prompt.
	mux.HandleFunc("/reflect", func(w http.ResponseWriter, r *http.Request) {
		key(r)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s", r.URL.Query().Get("text"))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/header-name", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo-"+key(r), "1")
		fmt.Fprintln(w, "body")
	})
	mux.HandleFunc("/split", func(w http.ResponseWriter, r *http.Request) {
		k := key(r)
		w.Header().Set("X-Part-One", "key="+k[:len(k)/2])
		w.Header().Set("X-Part-Two", k[len(k)/2:])
		fmt.Fprintln(w, "body")
	})
	// /frames: a websocket whose one message comes in two fragments with the value cut between.
	mux.HandleFunc("/frames", func(w http.ResponseWriter, r *http.Request) {
		k := key(r)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
		x, y := "key "+k[:len(k)/3], k[len(k)/3:]+" end"
		brw.Write(append([]byte{0x01, byte(len(x))}, x...)) // text, not final
		brw.Write(append([]byte{0x80, byte(len(y))}, y...)) // continuation, final
		brw.Flush()
		bufio.NewReader(brw).ReadByte() // until the client goes
	})
	u.port, u.caFile = serveTLS(t, h, mux, "api.test")
	return u
}

func (u *redactUpstream) sent(uri string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[uri]
}

func redactPolicy(u *redactUpstream) string {
	return fmt.Sprintf(`network:
  allow:
    - {host: api.test, ports: [%d]}
  hosts: {api.test: 127.0.0.1}
  tls: {caFile: %q}
credentials:
  - name: API_KEY
    from: {env: CORDON_TEST_API_KEY}
    inject: {host: api.test, header: x-api-key}
`, u.port, u.caFile)
}

// TestRedactNotAnOracle: an agent that makes the bound host reflect its text, and watches what
// arrives while the stream stays open, learns nothing from it: curl (HTTP/1.1 and HTTP/2) reads all
// of a prefix of the real credential while the stream is open, just as it reads a string of the
// same length that begins nothing. (Before, the gateway held back a tail that began the credential
// until the upstream sent more, and only that: a character-by-character oracle.)
func TestRedactNotAnOracle(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		secret := "sk-ant-api03-" + h.canary + "REALSECRET"
		u := newRedactUpstream(t, h)
		// The guesses of an agent that has found the first k characters, beside strings that
		// begin nothing; each read for 4 s while the upstream keeps the stream open (10 s).
		type probe struct{ name, text, proto string }
		var probes []probe
		for _, k := range []int{4, 16, len(secret) - 1} {
			for short, proto := range map[string]string{"h1": "--http1.1", "h2": "--http2"} {
				probes = append(probes, probe{fmt.Sprintf("prefix%d-%s", k, short), secret[:k], proto},
					probe{fmt.Sprintf("other%d-%s", k, short), strings.Repeat("q", k), proto})
			}
		}
		var script strings.Builder
		for _, p := range probes {
			fmt.Fprintf(&script, "curl -sS -N -m 4 --noproxy '*' %s -H \"x-api-key: $API_KEY\" 'https://api.test:%d/reflect?text=%s' > %s.out 2>/dev/null &\n",
				p.proto, u.port, url.QueryEscape(p.text), p.name)
		}
		script.WriteString("wait\nfor f in *.out; do printf '%s=[%s]\\n' \"$f\" \"$(cat $f)\"; done\n")
		r := h.sandboxed(redactPolicy(u), script.String(), "CORDON_TEST_API_KEY="+secret)
		if r.code != 0 {
			t.Fatalf("run failed:\n%s", r)
		}
		for _, p := range probes {
			if got := u.sent("/reflect?text=" + url.QueryEscape(p.text)); got != secret {
				t.Fatalf("%s: the upstream got x-api-key %q, not the real value: nothing was searched", p.name, got)
			}
			want := fmt.Sprintf("%s.out=[data: %s]", p.name, p.text)
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: the agent did not read all of the reflected text while the stream was open: want %q in\n%s", p.name, want, r.stdout)
			}
		}
	})
}

// TestRedactHeaderNamesAndSplits: the real value in a header's name reaches the agent as its
// placeholder; cut across two header fields, the answer is refused with 502 and the refusal logged;
// cut across two websocket frames (python, a raw client), it is replaced in both. Each beside the
// same answer without the credential, which passes.
func TestRedactHeaderNamesAndSplits(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		secret := "sk-ant-api03-" + h.canary + "REALSECRET"
		u := newRedactUpstream(t, h)
		h.writeFile(filepath.Join(h.ws, "ws.py"), fmt.Sprintf(`import os, socket, ssl, sys
ctx = ssl.create_default_context()
s = ctx.wrap_socket(socket.create_connection(("api.test", %d), timeout=10), server_hostname="api.test")
s.sendall(("GET /frames%%s HTTP/1.1\r\nHost: api.test:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nx-api-key: %%s\r\n\r\n"
           %% (sys.argv[1], os.environ["API_KEY"])).encode())
buf = b""
while b"\r\n\r\n" not in buf:
    buf += s.recv(4096)
buf = buf.split(b"\r\n\r\n", 1)[1]
frames = []
while len(frames) < 2:
    while len(buf) < 2 or len(buf) < 2 + (buf[1] & 0x7f):
        buf += s.recv(4096)
    n = buf[1] & 0x7f
    frames.append(buf[2:2 + n].decode())
    buf = buf[2 + n:]
print("FRAMES%%s=%%s" %% (sys.argv[1], "|".join(frames)))
`, u.port, u.port), 0o644)
		script := fmt.Sprintf(`echo "KEY=$API_KEY"
curl -sS -m 10 --noproxy '*' -D - -o /dev/null -H "x-api-key: $API_KEY" https://api.test:%[1]d/header-name
for q in '' '?control=1'; do
  echo "SPLIT$q=$(curl -sS -m 10 --noproxy '*' -o split.body -w '%%{http_code}' -H "x-api-key: $API_KEY" "https://api.test:%[1]d/split$q")"
  cat split.body
  python3 ws.py "$q"
done
`, u.port)
		r := h.sandboxed(redactPolicy(u), script, "CORDON_TEST_API_KEY="+secret)
		if r.code != 0 {
			t.Fatalf("run failed:\n%s", r)
		}
		placeholder := ""
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, "KEY="); ok {
				placeholder = v
			}
		}
		if placeholder == "" || placeholder == secret {
			t.Fatalf("the agent's API_KEY is %q", placeholder)
		}
		for _, uri := range []string{"/header-name", "/split", "/frames"} {
			if got := u.sent(uri); got != secret {
				t.Errorf("the upstream got x-api-key %q on %s, not the real value", got, uri)
			}
		}
		out := strings.ToLower(r.stdout + r.stderr)
		if strings.Contains(out, "realsecret") || strings.Contains(strings.ReplaceAll(out, "|", ""), strings.ToLower(secret[len(secret)/3:])) {
			t.Fatalf("the real value reached the agent:\n%s", r)
		}
		if !strings.Contains(out, "x-echo-"+strings.ToLower(placeholder)+": 1") {
			t.Errorf("the header name does not carry the placeholder:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, "SPLIT=502") || !strings.Contains(r.stdout, "split across its header fields") {
			t.Errorf("a value cut across two header fields was not refused with 502:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, "SPLIT?control=1=200") {
			t.Errorf("the same answer without the credential was refused:\n%s", r.stdout)
		}
		k := len(placeholder) / 3
		if want := "FRAMES=key " + placeholder[:k] + "|" + placeholder[k:] + " end"; !strings.Contains(r.stdout, want) {
			t.Errorf("websocket frames: want %q in\n%s", want, r.stdout)
		}
		c := strings.Repeat("c", len(secret))
		if want := "FRAMES?control=1=key " + c[:k] + "|" + c[k:] + " end"; !strings.Contains(r.stdout, want) {
			t.Errorf("websocket frames without the credential: want %q in\n%s", want, r.stdout)
		}
		log := h.cordon(nil, "", "log", "last")
		if strings.Contains(strings.ToLower(log.stdout), "realsecret") || !strings.Contains(log.stdout, "/split") || !strings.Contains(log.stdout, "credential value split across header fields") {
			t.Errorf("the audit log does not record the refusal (or shows the value):\n%s", log.stdout)
		}
	})
}
