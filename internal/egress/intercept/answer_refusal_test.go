package intercept

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// TestWebsocketFrameRefusalRecorded: a frame from the upstream that the answer redactor cannot
// search closes the connection after the frames before it, and is recorded as a refusal of its own.
func TestWebsocketFrameRefusalRecorded(t *testing.T) {
	frames := map[string][]byte{
		"masked":   wsFrame(1, []byte("hidden"), true),
		"reserved": {0x80 | 0x40 | 1, 2, 'h', 'i'},
		"length":   {0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws/", func(w http.ResponseWriter, r *http.Request) {
		c, brw, ok := wsHandshake(w, r)
		if !ok {
			return
		}
		defer c.Close()
		brw.Write(wsFrame(1, []byte("before"), false))
		brw.Write(frames[strings.TrimPrefix(r.URL.Path, "/ws/")])
		brw.Flush()
		io.Copy(io.Discard, brw) // until the gateway closes the connection
	})
	s := credentialSetup(t, mux)
	for _, tc := range []struct{ frame, reason string }{
		{"masked", "websocket frame refused: masked by the server"},
		{"reserved", "websocket frame refused: a reserved bit is set (an extension's payload)"},
		{"length", "websocket frame refused: its length has the most significant bit set"},
	} {
		t.Run(tc.frame, func(t *testing.T) {
			path := "/ws/" + tc.frame
			conn, br := s.raw(t)
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, s.hostPort())
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("websocket: %v %v", resp, err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if op, payload, err := wsRead(br); err != nil || op != 1 || string(payload) != "before" {
				t.Fatalf("the frame before the refused one: op %d %q %v", op, payload, err)
			}
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("after the refused frame: %q %v, want the connection closed", rest, err)
			}
			ev := s.rec.wait(t, func(e audit.Event) bool { return e.Detail["path"] == path && e.Decision == audit.Deny })
			if ev.Kind != audit.KindHTTP || ev.Rule != gatewayRule || ev.Reason != tc.reason || ev.Detail["method"] != "GET" {
				t.Errorf("recorded as %+v, want reason %q", ev, tc.reason)
			}
		})
	}
}

// TestSplitHeaderReason: an answer refused because a credential value is split across its header
// fields (in the final header, an informational answer's, or the trailer) is recorded as such.
func TestSplitHeaderReason(t *testing.T) {
	s := credentialSetup(t, splittingHost())
	const want = "credential value split across header fields"
	for _, h2 := range []bool{false, true} {
		c := s.client(h2)
		for _, path := range []string{"/split/values", "/split/early", "/split/trailer"} {
			if resp, err := c.Do(newRequest(t, "GET", s.url(path), nil)); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			ev := s.rec.wait(t, func(e audit.Event) bool {
				return e.Detail["path"] == path && e.Detail["proto"] == map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
			})
			if ev.Decision != audit.Deny || ev.Rule != gatewayRule || ev.Reason != want {
				t.Errorf("h2=%v %s: recorded as %+v, want reason %q", h2, path, ev, want)
			}
		}
	}
}
