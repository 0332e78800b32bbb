package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchPodBacksOff: an API server (a local one speaking the REST API's JSON) whose pod watches
// end as soon as they start, as behind a proxy that cuts streams, is not asked again in a tight loop:
// over 1.5 s the client makes a handful of watches, each after a longer wait, where without the
// backoff it made thousands.
func TestWatchPodBacksOff(t *testing.T) {
	var gets, watches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("watch") == "true":
			watches.Add(1) // an empty stream: the watch ends at once
		case r.URL.Path == "/api/v1/namespaces/ns/pods/p":
			gets.Add(1)
			fmt.Fprint(w, `{"metadata":{"name":"p","resourceVersion":"7"},"spec":{"containers":[]},"status":{}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	kc := writeFile(t, t.TempDir(), "kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ns}}]
`, srv.URL))
	c, err := NewClient(ClientOptions{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = c.watchPod(ctx, "p", func(*Pod) (bool, error) { return false, nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("watchPod ended with %v, want the deadline", err)
	}
	if n := watches.Load(); n < 2 || n > 6 {
		t.Errorf("%d watches in 1.5 s (%d reads of the pod), want 2 to 6", n, gets.Load())
	}
}

// TestAPIErrorIsBounded: an answer that is not the API's Status (a proxy's page, a hostile server)
// becomes an error of bounded, printable text.
func TestAPIErrorIsBounded(t *testing.T) {
	body := "\x1b]0;owned\x07" + strings.Repeat("x", 1<<20)
	msg := apiError(502, []byte(body)).Error()
	if len(msg) > 4*maxErrorText || strings.ContainsAny(msg, "\x1b\x07") {
		t.Errorf("error of %d bytes, escapes kept: %v", len(msg), strings.ContainsAny(msg, "\x1b\x07"))
	}
	st := fmt.Sprintf(`{"kind":"Status","message":%q,"reason":"BadRequest"}`, "\x1b[2J"+strings.Repeat("y", 1<<16))
	if msg := apiError(400, []byte(st)).Error(); len(msg) > 4*maxErrorText || strings.Contains(msg, "\x1b") {
		t.Errorf("Status error of %d bytes, escapes kept: %v", len(msg), strings.Contains(msg, "\x1b"))
	}
}
