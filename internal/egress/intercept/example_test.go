package intercept_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress/intercept"
)

// The gateway's side: one Interceptor per run, asked for each allowed connection whether it wants
// it; wanted TLS connections (ClientHello not yet consumed) go to ServeTLS, the rest are spliced.
func Example() {
	ca, err := intercept.NewCA()
	if err != nil {
		panic(err)
	}
	i, err := intercept.New(intercept.Config{
		CA: ca, // ca.CertPEM() goes into the sandbox's trust store
		Rules: []intercept.Rule{{
			Host:   "github.com",
			Allow:  []intercept.Access{{Methods: []string{"GET", "POST"}, Paths: []string{"/acme/app.git/*", "/acme/app/*"}}},
			Source: "network.http[0]",
		}},
		Hosts: []string{"api.example.com"}, // credential injection only
		Dial: func(ctx context.Context, name string, port uint16) (net.Conn, error) {
			var d net.Dialer // the gateway passes its checked dialer here
			return d.DialContext(ctx, "tcp", net.JoinHostPort(name, "443"))
		},
		Modify: func(r *http.Request, name string) (map[string]string, error) {
			if name == "api.example.com" && strings.HasPrefix(r.Header.Get("Authorization"), "Bearer cordon-placeholder") {
				r.Header.Set("Authorization", "Bearer real-secret")
				return map[string]string{"credential": "API_KEY"}, nil
			}
			return nil, nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer i.Close()

	serve := func(ctx context.Context, client net.Conn, name string, port uint16) {
		if !i.Wants(name) {
			client.Close() // the gateway would splice it to the upstream instead
			return
		}
		if err := i.ServeTLS(ctx, client, name, port); err != nil {
			slog.Debug("intercepted connection ended", "name", name, "err", err)
		}
	}
	_ = serve
}
