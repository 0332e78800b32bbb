package intercept

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestStreamedAnswerWhileRequestBodyChecked is a regression test of a race that cut HTTP/1.1
// answers short: an upstream that has read a POST's body answers at once, and the reverse proxy's
// writing of the answer's header made net/http's server discard and close the request body while
// the transport was still reading it for bytes past its Content-Length. The transport took the
// closed body for a write error and closed the upstream connection, so the answer being streamed
// ended mid-way ("use of closed network connection"; the client saw an unexpected EOF). Each of
// many exchanges on one kept-alive connection must arrive whole.
func TestStreamedAnswerWhileRequestBodyChecked(t *testing.T) {
	chunk := bytes.Repeat([]byte("data: {\"type\":\"ping\"}\n\n"), 170) // ~4 KiB
	const chunks = 16
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range chunks {
			w.Write(chunk)
			w.(http.Flusher).Flush()
		}
	}), false)
	s := newSetup(t, up, "api.example.com", false, func(c *Config) { c.Hosts = []string{"api.example.com"} })
	c := s.client(false)
	t.Cleanup(c.CloseIdleConnections)
	for i := range 300 {
		resp, err := c.Post(s.url("/v1/messages"), "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
		if err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != int64(len(chunk)*chunks) {
			t.Fatalf("exchange %d: the answer was cut after %d of %d bytes: %v", i, n, len(chunk)*chunks, err)
		}
	}
}
