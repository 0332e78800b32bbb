package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTransparentSlowClientDenied: a plain-HTTP client to a denied name that a loaded machine
// schedules late (here: half a second between connecting and writing) still gets the readable
// 403, not a reset: the test gateway's sniff timeout leaves room for it.
func TestTransparentSlowClientDenied(t *testing.T) {
	h := newHarness(t)
	u := h.httpUpstream()
	c, err := h.dialMapped("denied.test", u.port)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	code, body, err := rawHTTP(c, fmt.Sprintf("GET / HTTP/1.1\r\nHost: denied.test:%d\r\n\r\n", u.port))
	if err != nil || code != 403 || !strings.Contains(body, "not in network.allow") {
		t.Errorf("a slow client to a denied name: %d %q %v, want 403", code, body, err)
	}
}
