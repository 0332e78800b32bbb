package intercept

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// echoing is an upstream that hands back the Authorization header it received, in every way an
// answer can carry it: a header, a body of known length, a chunked body with the value split across
// writes, a trailer, a gzip body sent whether asked for or not, a body in an encoding the gateway
// cannot search, and a websocket frame.
func echoing(t *testing.T, proceed <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		// Server-sent events: the first event must reach the client while the stream stays open.
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: delta\ndata: {\"text\": \"hello\"}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-proceed:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "data: "+r.Header.Get("Authorization")+"\n\n")
	})
	mux.HandleFunc("/header", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", "you sent "+r.Header.Get("Authorization"))
		w.Header().Set("X-Accept-Encoding", r.Header.Get("Accept-Encoding"))
	})
	mux.HandleFunc("/body", func(w http.ResponseWriter, r *http.Request) {
		b := `{"error": "bad token", "authorization": "` + r.Header.Get("Authorization") + `"}`
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		io.WriteString(w, b)
	})
	mux.HandleFunc("/split", func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		w.Header().Set("Trailer", "X-Trailer-Echo")
		io.WriteString(w, "start "+a[:len(a)/2])
		http.NewResponseController(w).Flush()
		// No pause: the flush sends the halves as two chunks, and a pause could outlast releaseDelay on
		// a loaded machine (a value split across a pause is the documented residual). The redact
		// package's fuzz targets split the value across reads deterministically.
		io.WriteString(w, a[len(a)/2:]+" end")
		w.Header().Set("X-Trailer-Echo", a)
	})
	mux.HandleFunc("/early", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css?t="+r.Header.Get("Authorization")+">; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "after the hints")
	})
	mux.HandleFunc("/gzip", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, "compressed echo: "+r.Header.Get("Authorization"))
		zw.Close()
	})
	mux.HandleFunc("/br", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, "\x8b\x03\x80"+r.Header.Get("Authorization")) // not real brotli: unsearchable all the same
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Sec-Websocket-Extensions") != "" {
			http.Error(w, "extensions reached the upstream", http.StatusBadRequest)
			return
		}
		c, brw, ok := wsHandshake(w, r)
		if !ok {
			return
		}
		defer c.Close()
		brw.Write(wsFrame(1, []byte("hello "+r.Header.Get("Authorization")), false))
		brw.Flush()
		wsRead(brw.Reader) // until the client closes
	})
	return mux
}

// TestRedactions: a host that echoes the credential the gateway put into a request hands the
// sandbox the placeholder, never the real value, however the answer carries it, over HTTP/1.1 and
// HTTP/2; what cannot be searched is refused. Each case first checks that the upstream did get the
// real value, so the test cannot pass by the value never being sent.
func TestRedactions(t *testing.T) {
	const (
		real = "Bearer REAL-0123456789abcdefghij"
		ph   = "Bearer PHPH-zyxwvutsrqponmlkjihg" // same length
	)
	for _, tc := range []struct {
		name        string
		replacement string
	}{{"same length", ph}, {"longer placeholder", ph + "-longer"}} {
		t.Run(tc.name, func(t *testing.T) {
			proceed := make(chan struct{}, 2)
			up := newUpstream(t, echoing(t, proceed), false)
			sent := false
			s := newSetup(t, up, "api.example.com", false, func(c *Config) {
				c.Hosts = []string{"api.example.com"}
				c.Modify = func(r *http.Request, _ string) (map[string]string, error) {
					r.Header.Set("Authorization", real)
					sent = true
					return map[string]string{audit.DetailCredentials: "API"}, nil
				}
				c.Redactions = func(name string) []redact.Pair {
					if !sent || name != "api.example.com" {
						return nil
					}
					return []redact.Pair{{Secret: real, Replacement: tc.replacement}}
				}
			})
			for _, h2 := range []bool{false, true} {
				c := s.client(h2)
				check := func(path, got string) {
					t.Helper()
					if strings.Contains(got, "REAL-") || !strings.Contains(got, tc.replacement) {
						t.Errorf("h2=%v %s: the sandbox read %q", h2, path, got)
					}
					reqs := up.requests()
					if last := reqs[len(reqs)-1]; last.Header.Get("Authorization") != real {
						t.Fatalf("h2=%v %s: the upstream did not get the real value: %+v", h2, path, last.Header)
					}
				}
				resp, _ := get(t, c, newRequest(t, "GET", s.url("/header"), nil))
				check("/header", resp.Header.Get("X-Echo"))
				if ae := resp.Header.Get("X-Accept-Encoding"); ae != "identity" {
					t.Errorf("h2=%v: the upstream was asked for Accept-Encoding %q, want identity", h2, ae)
				}
				resp, body := get(t, c, newRequest(t, "GET", s.url("/body"), nil))
				check("/body", body)
				if cl := resp.ContentLength; (cl == int64(len(body))) != (len(real) == len(tc.replacement)) {
					t.Errorf("h2=%v: Content-Length %d for a body of %d", h2, cl, len(body))
				}
				resp, body = get(t, c, newRequest(t, "GET", s.url("/split"), nil))
				check("/split", body)
				check("/split trailer", resp.Trailer.Get("X-Trailer-Echo"))
				// A stream that pauses is not held up: the first event arrives before the next is sent.
				resp, err := c.Do(newRequest(t, "GET", s.url("/events"), nil))
				if err != nil {
					t.Fatal(err)
				}
				first := make([]byte, 64)
				got := make(chan int, 1)
				go func() {
					n, _ := io.ReadAtLeast(resp.Body, first, len("event: delta\ndata: {\"text\": \"hello\"}\n\n"))
					got <- n
				}()
				var n int
				select {
				case n = <-got:
				case <-time.After(3 * time.Second):
					proceed <- struct{}{}
					t.Fatalf("h2=%v /events: the first event did not arrive while the stream was open", h2)
				}
				proceed <- struct{}{}
				rest, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				check("/events", string(first[:n])+string(rest))

				var hints []string
				req := newRequest(t, "GET", s.url("/early"), nil)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
						hints = append(hints, h.Get("Link"))
						return nil
					},
				}))
				if resp, body = get(t, c, req); resp.StatusCode != 200 || len(hints) != 1 {
					t.Errorf("h2=%v /early: %d %q, hints %q", h2, resp.StatusCode, body, hints)
				} else {
					check("/early", hints[0])
				}
				resp, body = get(t, c, newRequest(t, "GET", s.url("/gzip"), nil))
				check("/gzip", body)
				if resp.Header.Get("Content-Encoding") != "" || !resp.Uncompressed && !strings.HasPrefix(body, "compressed echo") {
					t.Errorf("h2=%v: gzip answer not decoded: %v %q", h2, resp.Header, body)
				}
				resp, body = get(t, c, newRequest(t, "GET", s.url("/br"), nil))
				if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, "REAL-") || !strings.Contains(body, "cannot be searched") {
					t.Errorf("h2=%v: unsearchable encoding: %d %q", h2, resp.StatusCode, body)
				}
			}
			ev := s.rec.last(t, "GET", "/body")
			if ev.Detail[audit.DetailCredentialEchoed] != "1" {
				t.Errorf("the audit event does not count the echo: %+v", ev)
			}
			if ev := s.rec.last(t, "GET", "/br"); ev.Decision != audit.Deny || ev.Rule != gatewayRule {
				t.Errorf("refused answer recorded as %+v", ev)
			}

			// A websocket: the upstream's first frame quotes the header.
			conn, br := s.raw(t)
			fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n", s.hostPort())
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Of another length too: then relayed message by message (wsrelay.go), each written
			// anew with its own length.
			if resp.StatusCode != http.StatusSwitchingProtocols {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("websocket: %d %s", resp.StatusCode, b)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			op, payload, err := wsRead(br)
			if err != nil || op != 1 || string(payload) != "hello "+tc.replacement {
				t.Fatalf("websocket frame: op %d %q %v", op, payload, err)
			}
			conn.Write(wsFrame(8, nil, true))
			conn.Close()
		})
	}
}

// FuzzRedactResponse: whatever an upstream answers (the value anywhere in a header or the body, the
// body in pieces of any size, gzip-encoded or not, the value's length equal to its placeholder's or
// not), the answer the sandbox reads holds no credential value, or the gateway refuses it.
func FuzzRedactResponse(f *testing.F) {
	f.Add("prefix ", " suffix", "X-Debug", []byte{3, 7, 1}, false, true)
	f.Add("", "", "Set-Cookie", []byte{1}, true, false)
	f.Add("a\"b", "\r\n", "Location", []byte{200, 2}, true, true)
	f.Fuzz(func(t *testing.T, before, after, header string, sizes []byte, gzipped, sameLength bool) {
		const secret = "ghs_REALREALREALREALREALREALREAL12"
		replacement := "ghs_PLACEHOLDERPLACEHOLDERPLACE34"
		if !sameLength {
			replacement += "-longer"
		}
		red := redact.New([]redact.Pair{{Secret: secret, Replacement: replacement}})
		body := []byte(before + secret + after + secret)
		h := http.Header{"Content-Type": {"text/plain"}}
		if name := textproto.CanonicalMIMEHeaderKey(strings.Map(func(r rune) rune {
			if r <= ' ' || r > '~' || r == ':' {
				return -1
			}
			return r
		}, header)); name != "" {
			h.Set(name, before+secret+after)
		}
		h.Set("X-Name-"+secret, "1") // canonicalized, as the transport does: the value in another case
		// A value split across two fields, by the body's cut: refused, never relayed.
		split := len(sizes) > 0 && sizes[0]%3 != 0
		if split {
			cut := 1 + int(sizes[0])%(len(secret)-1)
			if sizes[0]%3 == 1 {
				h.Set("X-One", before+secret[:cut])
				h.Set("X-Two", secret[cut:]+after)
			} else {
				h.Set("X-"+secret[:cut], secret[cut:])
			}
		}
		if gzipped {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(body)
			zw.Close()
			body = b.Bytes()
			h.Set("Content-Encoding", "gzip")
		}
		var sz []int
		for _, b := range sizes {
			sz = append(sz, int(b))
		}
		res := &http.Response{StatusCode: 200, Header: h, ContentLength: int64(len(body)), Trailer: http.Header{"X-T": {secret}},
			Body: io.NopCloser(&pieces{b: body, sizes: sz})}
		err := redactResponse(res, red, 0)
		if split {
			if !errors.Is(err, errUnredactable) || strings.Contains(strings.ToLower(err.Error()), "real") {
				t.Fatalf("a value split across two header fields: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("an identity or gzip answer was refused: %v", err)
		}
		got, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range res.Header {
			for _, v := range vs {
				if strings.Contains(strings.ToLower(k+v), strings.ToLower(secret)) {
					t.Fatalf("header %s: %q holds the value", k, v)
				}
			}
		}
		if bytes.Contains(got, []byte(secret)) && !strings.Contains(before+after, "ghs_") {
			t.Fatalf("the body holds the value: %q", got)
		}
		if strings.Contains(res.Trailer.Get("X-T"), secret) {
			t.Fatal("the trailer holds the value")
		}
		if res.ContentLength >= 0 && res.ContentLength != int64(len(got)) {
			t.Fatalf("Content-Length %d for a body of %d", res.ContentLength, len(got))
		}
	})
}

// pieces reads b in pieces of the given sizes, in turn.
type pieces struct {
	b     []byte
	sizes []int
	i     int
}

func (p *pieces) Read(buf []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := len(p.b)
	if len(p.sizes) > 0 {
		n = max(1, p.sizes[p.i%len(p.sizes)])
		p.i++
	}
	n = copy(buf, p.b[:min(n, len(p.b))])
	p.b = p.b[n:]
	return n, nil
}
