//go:build linux

package probe

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestCredCleartext: the probe fails when a plain-HTTP request with the placeholder is answered by an
// upstream (which saw the placeholder where the value would go), and passes when something refuses it
// as cordon's gateway does.
func TestCredCleartext(t *testing.T) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		t.Setenv(k, "")
	}
	const ph = "placeholder-0123456789"
	t.Setenv("PROBE_TEST_KEY", ph)
	for _, tc := range []struct {
		name   string
		in     Injected
		refuse bool
		want   Status
	}{
		{"answered, header", Injected{Name: "PROBE_TEST_KEY", Header: "X-Api-Key"}, false, Fail},
		{"answered, bearer", Injected{Name: "PROBE_TEST_KEY", Scheme: "bearer"}, false, Fail},
		{"answered, basic", Injected{Name: "PROBE_TEST_KEY", Scheme: "basic"}, false, Fail},
		{"answered, body", Injected{Name: "PROBE_TEST_KEY", Body: true}, false, Fail},
		{"refused", Injected{Name: "PROBE_TEST_KEY", Header: "X-Api-Key"}, true, Pass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var carried []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := make([]byte, 256)
				n, _ := r.Body.Read(body)
				mu.Lock()
				carried = append(carried, r.Header.Get("X-Api-Key")+r.Header.Get("Authorization")+string(body[:n]))
				mu.Unlock()
				if tc.refuse {
					w.WriteHeader(http.StatusForbidden)
					fmt.Fprintf(w, "cordon: blocked %s http://%s%s: credential is sent only over TLS\n", r.Method, r.Host, r.URL.Path)
					return
				}
				fmt.Fprintln(w, "ok")
			}))
			defer srv.Close()
			in := tc.in
			in.Hosts = []Endpoint{{Host: "127.0.0.1", Port: srv.Listener.Addr().(*net.TCPAddr).Port}}
			v := credCleartext(context.Background(), &Env{Canaries: Canaries{Injected: []Injected{in}}})
			if v.Status != tc.want {
				t.Fatalf("%s: %s", v.Status, v.Evidence)
			}
			mu.Lock()
			defer mu.Unlock()
			basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + ph))
			if len(carried) != 1 || !strings.Contains(carried[0], ph) && !strings.Contains(carried[0], basic) {
				t.Fatalf("the request did not carry the placeholder where the value goes: %q", carried)
			}
		})
	}
	if v := credCleartext(context.Background(), &Env{}); v.Status != Skip {
		t.Errorf("without credentials: %s", v.Status)
	}
}
