package intercept

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// The credential of these tests: no space, so that it can stand in a header name too.
const (
	oracleReal = "ghs_REAL0123456789abcdefghijklmnop"
	oraclePH   = "ghs_PHPHzyxwvutsrqponmlkjihgfedcba" // as long
)

// credentialSetup intercepts api.example.com, sends it oracleReal in Authorization on every request
// and searches its answers for it.
func credentialSetup(t *testing.T, h http.Handler) *setup {
	t.Helper()
	up := newUpstream(t, h, false)
	return newSetup(t, up, "api.example.com", false, func(c *Config) {
		c.Hosts = []string{"api.example.com"}
		c.Modify = func(r *http.Request, _ string) (map[string]string, error) {
			r.Header.Set("Authorization", oracleReal)
			return map[string]string{audit.DetailCredentials: "GH"}, nil
		}
		c.Redactions = func(string) []redact.Pair { return []redact.Pair{{Secret: oracleReal, Replacement: oraclePH}} }
	})
}

// reflectingHost is a host that reflects text the agent chooses: /reflect?text=T streams "data: T"
// (as server-sent events if sse=1) and then nothing until the client goes or 10 s pass; /ws echoes
// each websocket frame.
func reflectingHost() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/reflect", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sse") != "" {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		io.WriteString(w, "data: "+r.URL.Query().Get("text"))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/ws", wsEcho)
	return mux
}

// oracleGuesses are prefixes of the credential an agent would try, each beside a string of the same
// length that begins nothing.
func oracleGuesses() [][2]string {
	var gs [][2]string
	for _, k := range []int{1, 5, 12, len(oracleReal) - 1} {
		gs = append(gs, [2]string{oracleReal[:k], strings.Repeat("q", k)})
	}
	return gs
}

// upTo reads r until it has want bytes or 2 s pass (the upstream sends nothing more meanwhile), and
// returns what it got: what an agent watching the stream learns.
func upTo(r io.Reader, want int) string {
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, want)
		n, _ := io.ReadAtLeast(r, buf, want)
		got <- buf[:n]
	}()
	select {
	case b := <-got:
		return string(b)
	case <-time.After(2 * time.Second):
		return "(not all of it within 2 s)"
	}
}

// TestAnswerOracle: an agent that makes the bound host reflect its text, over HTTP/1.1, HTTP/2, as
// server-sent events and over a websocket, reads the same for a prefix of the credential as for
// any other string of its length: all of it, shortly, while the stream stays open. (Before, a tail
// that began the credential was held back until the upstream sent more, and the agent could tell,
// and so learn the credential one character at a time.)
func TestAnswerOracle(t *testing.T) {
	s := credentialSetup(t, reflectingHost())
	for _, h2 := range []bool{false, true} {
		for _, sse := range []bool{false, true} {
			c := s.client(h2)
			for _, g := range oracleGuesses() {
				for _, text := range g {
					q := url.Values{"text": {text}}
					if sse {
						q.Set("sse", "1")
					}
					resp, err := c.Do(newRequest(t, "GET", s.url("/reflect?"+q.Encode()), nil))
					if err != nil {
						t.Fatal(err)
					}
					want := "data: " + text
					if got := upTo(resp.Body, len(want)); got != want {
						t.Errorf("h2=%v sse=%v: the agent read %q while the stream was open, want %q", h2, sse, got, want)
					}
					resp.Body.Close()
				}
			}
			if reqs := s.up.requests(); reqs[len(reqs)-1].Header.Get("Authorization") != oracleReal {
				t.Fatal("the upstream did not get the credential: nothing was searched")
			}
		}
	}
	// A websocket echo: each frame comes back whole, whatever it begins with.
	conn, br := s.raw(t)
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", s.hostPort())
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("websocket: %v %v", resp, err)
	}
	for _, g := range oracleGuesses() {
		for _, text := range g {
			conn.Write(wsFrame(1, []byte("echo "+text), true))
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			op, payload, err := wsRead(br)
			if err != nil || op != 1 || string(payload) != "echo "+text {
				t.Errorf("websocket echo of %q: op %d %q %v", text, op, payload, err)
			}
		}
	}
}

// splittingHost is a host that cuts the credential it was sent into parts: across websocket frames,
// across header fields (values, names, two values of one name, a name and its value, an
// informational answer's fields), across trailer fields, and into a header or trailer name.
func splittingHost() http.Handler {
	mux := http.NewServeMux()
	auth := func(r *http.Request) (string, string, string) {
		a := r.Header.Get("Authorization")
		if r.URL.Query().Get("control") != "" {
			a = strings.Repeat("c", len(a)) // the same answer without the credential
		}
		return a, a[:len(a)/3], a[len(a)/3:]
	}
	mux.HandleFunc("/header-name", func(w http.ResponseWriter, r *http.Request) {
		a, _, _ := auth(r)
		w.Header().Set("X-Echo-"+a, "1")
		w.Header().Set("Trailer", "X-Trailer-"+a)
		io.WriteString(w, "body")
		w.Header().Set("X-Trailer-"+a, "2")
	})
	mux.HandleFunc("/split/", func(w http.ResponseWriter, r *http.Request) {
		a, x, y := auth(r)
		h := w.Header()
		_ = a
		switch r.URL.Path {
		case "/split/values":
			h.Set("X-A", "first "+x)
			h.Set("X-B", y+" last")
		case "/split/reversed":
			h.Set("X-A", y)
			h.Set("X-B", x)
		case "/split/one-name":
			h.Add("X-Part", x)
			h.Add("X-Part", y)
		case "/split/name-value":
			h.Set("X-"+x, y)
		case "/split/early":
			h.Set("Link", "</style.css>; rel=preload; v="+x)
			h.Set("X-Hint", y)
			w.WriteHeader(http.StatusEarlyHints)
			h.Del("Link")
			h.Del("X-Hint")
		case "/split/trailer":
			h.Set("Trailer", "X-T1, X-T2")
			io.WriteString(w, "body")
			h.Set("X-T1", x)
			h.Set("X-T2", y)
			return
		case "/split/frames":
			c, brw, ok := wsHandshake(w, r)
			if !ok {
				return
			}
			defer c.Close()
			// One message in two fragments, the value cut between them, then a message that
			// ends with the start of the value and one that begins with the rest.
			brw.Write([]byte{0x01, byte(len(x) + 6)})
			brw.WriteString("hello " + x)
			brw.Write([]byte{0x80, byte(len(y))})
			brw.WriteString(y)
			brw.Write(wsFrame(1, []byte("bye "+a[:5]), false))
			brw.Write(wsFrame(1, []byte(a[5:]), false))
			brw.Flush()
			wsRead(brw.Reader)
			return
		}
		io.WriteString(w, "body")
	})
	return mux
}

// TestAnswerSplits: a credential in a header or trailer name is replaced like one in a value; one
// cut into parts that two header fields hold is refused with 502 (or, in the trailer, the answer is
// cut off), and recorded; each beside the same answer without the credential, which passes. A
// value cut across websocket frames is replaced in both.
func TestAnswerSplits(t *testing.T) {
	s := credentialSetup(t, splittingHost())
	hasReal := func(s string) bool { return strings.Contains(strings.ToLower(s), strings.ToLower(oracleReal[4:])) }
	for _, h2 := range []bool{false, true} {
		c := s.client(h2)
		resp, body := get(t, c, newRequest(t, "GET", s.url("/header-name"), nil))
		var names []string
		for k := range resp.Header {
			names = append(names, k)
		}
		for k := range resp.Trailer {
			names = append(names, k)
		}
		all := strings.Join(names, " ")
		if resp.StatusCode != 200 || body != "body" || hasReal(all) ||
			!strings.Contains(strings.ToLower(all), "x-echo-"+strings.ToLower(oraclePH)) ||
			!strings.Contains(strings.ToLower(all), "x-trailer-"+strings.ToLower(oraclePH)) {
			t.Errorf("h2=%v: a credential in header and trailer names: %d %q, names %q", h2, resp.StatusCode, body, names)
		}
		for _, path := range []string{"/split/values", "/split/reversed", "/split/one-name", "/split/name-value", "/split/early"} {
			var hints []string
			for _, control := range []bool{false, true} {
				u := path
				if control {
					u += "?control=1"
				}
				req := newRequest(t, "GET", s.url(u), nil)
				req = withHints(req, &hints)
				resp, body := get(t, c, req)
				dump := fmt.Sprint(resp.Header, body, hints)
				switch {
				case hasReal(dump) || hasReal(strings.ReplaceAll(dump, " ", "")):
					t.Errorf("h2=%v %s: the agent read the credential: %s", h2, u, dump)
				case control && resp.StatusCode != 200:
					t.Errorf("h2=%v %s: the answer without the credential was refused: %d %s", h2, u, resp.StatusCode, body)
				case !control && (resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "split across its header fields")):
					t.Errorf("h2=%v %s: a value split across two header fields: %d %q %v", h2, u, resp.StatusCode, body, resp.Header)
				}
				if path == "/split/early" && len(hints) != map[bool]int{false: 0, true: 1}[control] {
					t.Errorf("h2=%v %s: informational answers relayed: %q", h2, u, hints)
				}
				if !control {
					ev := s.rec.last(t, "GET", path)
					if ev.Decision != audit.Deny || ev.Rule != gatewayRule || !strings.Contains(ev.Detail["error"], "split") || hasReal(fmt.Sprint(ev)) {
						t.Errorf("h2=%v %s: recorded as %+v", h2, path, ev)
					}
				}
				hints = nil
			}
		}
		// The trailer: the header and body have gone; the answer is cut off before the trailer.
		for _, control := range []bool{false, true} {
			u := "/split/trailer"
			if control {
				u += "?control=1"
			}
			resp, err := c.Do(newRequest(t, "GET", s.url(u), nil))
			var b []byte
			tr := ""
			if err == nil { // else the header had not gone yet when the answer was cut off
				b, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				tr = fmt.Sprint(resp.Trailer)
				if control && resp.Trailer.Get("X-T1") == "" {
					t.Errorf("h2=%v %s: no trailer: %s", h2, u, tr)
				}
			}
			if hasReal(tr) || control != (err == nil) {
				t.Errorf("h2=%v %s: body %q, %v, trailer %s", h2, u, b, err, tr)
			}
		}
	}
	evs := s.rec.events()
	refused := 0
	for _, ev := range evs {
		if ev.Detail["path"] == "/split/trailer" && ev.Decision == audit.Deny && strings.Contains(ev.Detail["error"], "split") {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d refusals of a split trailer recorded, want 2 (HTTP/1.1 and HTTP/2)", refused)
	}

	// A websocket whose frames cut the value.
	for _, control := range []bool{false, true} {
		conn, br := s.raw(t)
		target := "/split/frames"
		if control {
			target += "?control=1"
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", target, s.hostPort())
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("websocket: %v %v", resp, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got []string
		for range 4 {
			op, payload, err := wsRead(br)
			if err != nil {
				t.Fatalf("websocket frames: %q %v", got, err)
			}
			got = append(got, fmt.Sprintf("%d:%s", op, payload))
		}
		a := oraclePH
		if control {
			a = strings.Repeat("c", len(oracleReal))
		}
		x, y := a[:len(a)/3], a[len(a)/3:]
		want := []string{"1:hello " + x, "0:" + y, "1:bye " + a[:5], "1:" + a[5:]}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("websocket frames (control %v): %q, want %q", control, got, want)
		}
		conn.Write(wsFrame(8, nil, true))
		conn.Close()
	}
	if reqs := s.up.requests(); reqs[len(reqs)-1].Header.Get("Authorization") != oracleReal {
		t.Fatal("the upstream did not get the credential")
	}
}

// withHints records the informational answers' Link and X-Hint fields in hints.
func withHints(req *http.Request, hints *[]string) *http.Request {
	return req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			*hints = append(*hints, h.Get("Link")+h.Get("X-Hint"))
			return nil
		},
	}))
}
