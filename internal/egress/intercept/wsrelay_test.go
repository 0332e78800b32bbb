package intercept

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/redact"
)

// TestWebsocketMessageRelay: with a value of another length than its placeholder, a websocket is
// relayed message by message: the upstream's echo of the value (whole, in a message, in the 101's
// header, in a refused handshake's answer) reaches the client as the placeholder, the chosen
// subprotocol passes, a placeholder in a message becomes the value where the hook says so, and a
// value the upstream splits between two messages closes the connection before the first half is
// delivered (the control: the same split of a harmless string arrives whole).
func TestWebsocketMessageRelay(t *testing.T) {
	const (
		real = "REAL-0123456789abcdef"                   // what the upstream gets
		ph   = "PH-zyxwvutsrqponmlkjihgfedcba9876543210" // what the sandbox holds: longer
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"chat.v2"}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			switch s := string(msg); {
			case strings.HasPrefix(s, "split3 "):
				// The text cut in three messages, back to back.
				text := strings.TrimPrefix(s, "split3 ")
				n := len(text) / 3
				_ = c.Write(ctx, typ, []byte(text[:n]))
				_ = c.Write(ctx, typ, []byte(text[n:2*n]))
				_ = c.Write(ctx, typ, []byte(text[2*n:]))
			case strings.HasPrefix(s, "splitclose "):
				// The text's first half in a message, its second the close reason.
				text := strings.TrimPrefix(s, "splitclose ")
				_ = c.Write(ctx, typ, []byte(text[:len(text)/2]))
				_ = c.Close(websocket.StatusNormalClosure, text[len(text)/2:])
				return
			case strings.HasPrefix(s, "split "):
				// The text cut in two messages, back to back.
				text := strings.TrimPrefix(s, "split ")
				_ = c.Write(ctx, typ, []byte(text[:len(text)/2]))
				_ = c.Write(ctx, typ, []byte(text[len(text)/2:]))
			default:
				_ = c.Write(ctx, typ, []byte("echo:"+s+" auth="+r.Header.Get("Authorization")))
			}
		}
	})
	mux.HandleFunc("/badaccept", func(w http.ResponseWriter, r *http.Request) {
		// A 101 the websocket client refuses, whose refusal quotes the answer's header field.
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + r.Header.Get("Authorization") + "\r\n\r\n")
		brw.Flush()
	})
	mux.HandleFunc("/denied", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad token "+r.Header.Get("Authorization"), http.StatusUnauthorized)
	})
	up := newUpstream(t, mux, false)
	s := newSetup(t, up, "api.example.com", false, func(c *Config) {
		c.Hosts = []string{"api.example.com"}
		c.Modify = func(r *http.Request, _ string) (map[string]string, error) {
			r.Header.Set("Authorization", strings.ReplaceAll(r.Header.Get("Authorization"), ph, real))
			return map[string]string{audit.DetailCredentials: "TOKEN"}, nil
		}
		c.ModifyMessage = func(_ context.Context, _ string, msg []byte) ([]byte, []string, []string, error) {
			if !strings.Contains(string(msg), ph) {
				return msg, nil, nil, nil
			}
			return []byte(strings.ReplaceAll(string(msg), ph, real)), []string{"TOKEN"}, nil, nil
		}
		c.MessagesFor = func(string) bool { return true }
		c.Redactions = func(string) []redact.Pair { return []redact.Pair{{Secret: real, Replacement: ph}} }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(path string) (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, "wss://"+s.hostPort()+path, &websocket.DialOptions{
			HTTPClient: s.client(false), HTTPHeader: http.Header{"Authorization": {"Bearer " + ph}}, Subprotocols: []string{"chat.v1", "chat.v2"},
		})
	}
	c, res, err := dial("/ws")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if c.Subprotocol() != "chat.v2" || res.Header.Get("X-Echo") != "Bearer "+ph {
		t.Fatalf("subprotocol %q, X-Echo %q", c.Subprotocol(), res.Header.Get("X-Echo"))
	}
	exchange := func(send string) string {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(send)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	if got := exchange("token " + ph); got != "echo:token "+ph+" auth=Bearer "+ph {
		t.Errorf("echo %q", got)
	}
	if msgs := up.requests(); len(msgs) == 0 || msgs[len(msgs)-1].Header.Get("Authorization") != "Bearer "+real {
		t.Errorf("the upstream's handshake did not carry the value")
	}
	// The control: a harmless text split in two arrives as two messages.
	if got := exchange("split " + strings.Repeat("x", len(real))); got != strings.Repeat("x", len(real)/2) {
		t.Errorf("first half of the control: %q", got)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != strings.Repeat("x", len(real)-len(real)/2) {
		t.Errorf("second half of the control: %q %v", got, err)
	}
	// The attack: the value split between two messages.
	if err := c.Write(ctx, websocket.MessageText, []byte("split "+real)); err != nil {
		t.Fatal(err)
	}
	_, got, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after a value split between messages: %q %v, want the connection closed (policy violation)", got, err)
	}
	ev := s.rec.wait(t, func(e audit.Event) bool { return e.Detail["path"] == "/ws" && e.Detail["status"] == "101" })
	if ev.Decision != audit.Deny || !strings.Contains(ev.Reason, "split between websocket messages") || ev.Detail[audit.DetailCredentials] != "TOKEN" {
		t.Errorf("recorded as %+v", ev)
	}
	// The value split in three messages: no third of it reaches the client (with only the message
	// before each one searched with it, the first third was delivered).
	c3, _, err := dial("/ws")
	if err != nil {
		t.Fatal(err)
	}
	defer c3.CloseNow()
	if err := c3.Write(ctx, websocket.MessageText, []byte("split3 "+real)); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c3.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after a value split in three messages: %q %v, want the connection closed (policy violation)", got, err)
	}
	// The control: a harmless text split in three arrives as three messages.
	c4, _, err := dial("/ws")
	if err != nil {
		t.Fatal(err)
	}
	defer c4.CloseNow()
	if err := c4.Write(ctx, websocket.MessageText, []byte("split3 "+strings.Repeat("y", len(real)))); err != nil {
		t.Fatal(err)
	}
	var all string
	for range 3 {
		_, got, err := c4.Read(ctx)
		if err != nil {
			t.Fatalf("control split in three: %q %v", all, err)
		}
		all += string(got)
	}
	if all != strings.Repeat("y", len(real)) {
		t.Errorf("control split in three: %q", all)
	}
	// The value's first half in a message, its second the close reason: neither reaches the client
	// (the control: a harmless text so split arrives, half and reason).
	for _, text := range []string{strings.Repeat("z", len(real)), real} {
		c5, _, err := dial("/ws")
		if err != nil {
			t.Fatal(err)
		}
		defer c5.CloseNow()
		if err := c5.Write(ctx, websocket.MessageText, []byte("splitclose "+text)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c5.Read(ctx)
		var ce websocket.CloseError
		errors.As(err, &ce)
		if text == real {
			if ce.Code != websocket.StatusPolicyViolation {
				t.Errorf("value split between a message and the close reason: %q %v, want closed (policy violation)", got, err)
			}
			continue
		}
		if string(got) != text[:len(text)/2] {
			t.Fatalf("control's half: %q %v", got, err)
		}
		if _, _, err = c5.Read(ctx); !errors.As(err, &ce) || ce.Reason != text[len(text)/2:] {
			t.Errorf("control's close: %v", err)
		}
	}
	// A 101 the gateway's client refuses for a header field that holds the value: the refusal, to
	// the client and in the audit log, names the placeholder (the control: the value's placeholder is
	// there, so the field's text was quoted).
	if _, res, err = dial("/badaccept"); err == nil || res == nil || res.StatusCode != http.StatusBadGateway {
		t.Fatalf("refused 101: %v %v", res, err)
	}
	if b, _ := io.ReadAll(res.Body); strings.Contains(string(b), real) || !strings.Contains(string(b), ph) {
		t.Errorf("the refusal of a 101: %q", b)
	}
	bad := s.rec.wait(t, func(e audit.Event) bool { return e.Detail["path"] == "/badaccept" })
	if strings.Contains(bad.Detail["error"], real) {
		t.Errorf("the audit log holds the value: %q", bad.Detail["error"])
	}
	// A handshake the upstream refuses: its answer is searched as any other.
	if _, res, err = dial("/denied"); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("refused handshake: %v %v", res, err)
	}
	if b, _ := io.ReadAll(res.Body); strings.Contains(string(b), real) {
		t.Errorf("the refused handshake's answer carried the value: %q", b)
	}
}
