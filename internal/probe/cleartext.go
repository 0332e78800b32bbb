//go:build linux

package probe

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// cleartextPath is the path the probe asks for, so an upstream's log shows what sent it.
const cleartextPath = "/cordon-probe-cleartext"

// credCleartext sends each credential's placeholder, in the places its value would go, to each
// allowed endpoint of its hosts over plain HTTP: straight (the transparent path), as an absolute URL
// to the explicit proxy, and through a CONNECT tunnel. A sandbox that swaps in real values must
// refuse each request itself (a "cordon: blocked" answer): one answered by anything else went
// upstream, where the real value would have travelled in cleartext.
func credCleartext(ctx context.Context, env *Env) Verdict {
	if len(env.Canaries.Injected) == 0 {
		return skip("the policy binds no credential to a host it allows by name")
	}
	proxy, proxyAuth := explicitProxy()
	var tried []string
	for _, c := range env.Canaries.Injected {
		ph := os.Getenv(c.Name)
		if ph == "" {
			tried = append(tried, "$"+c.Name+" not set")
			continue
		}
		for _, ep := range c.Hosts {
			addr := net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port))
			ways := []struct{ name, via string }{{"straight", ""}}
			if proxy != "" {
				ways = append(ways, struct{ name, via string }{"via the proxy", proxy}, struct{ name, via string }{"in a CONNECT tunnel", proxy})
			}
			for _, w := range ways {
				status, body, err := cleartextAttempt(ctx, c, ph, addr, w.via, proxyAuth, w.name == "in a CONNECT tunnel")
				switch {
				case err != nil:
					tried = append(tried, fmt.Sprintf("%s %s: not sent (%s)", addr, w.name, shortErr(err)))
				case strings.HasPrefix(body, "cordon: blocked") && status != http.StatusBadGateway:
					tried = append(tried, fmt.Sprintf("%s %s: refused (%d)", addr, w.name, status))
				default:
					return fail("a plain-HTTP request carrying $%s's placeholder to %s %s was answered %d by the upstream, not refused: the real value would have gone in cleartext", c.Name, addr, w.name, status)
				}
			}
		}
	}
	return pass("%s", strings.Join(tried, "; "))
}

// cleartextAttempt sends one plain-HTTP request carrying ph where c's value goes to addr: straight
// when via is "", else through the proxy at via (as an absolute URL, or after CONNECT when tunnel).
// It returns the answer's status and the start of its body.
func cleartextAttempt(ctx context.Context, c Injected, ph, addr, via, proxyAuth string, tunnel bool) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
	defer cancel()
	dial := addr
	if via != "" {
		dial = via
	}
	d := net.Dialer{Timeout: attemptTimeout}
	conn, err := d.DialContext(ctx, "tcp", dial)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(2 * attemptTimeout))
	}
	br := bufio.NewReader(conn)
	if tunnel {
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", addr, addr, proxyHeader(proxyAuth))
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, "", err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, "", fmt.Errorf("CONNECT answered %d", resp.StatusCode)
		}
	}
	target := cleartextPath
	if via != "" && !tunnel {
		target = "http://" + addr + cleartextPath
	}
	method, body := http.MethodGet, ""
	if c.Body {
		method, body = http.MethodPost, "cordon-probe="+ph
	}
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, addr)
	if via != "" && !tunnel {
		head.WriteString(proxyHeader(proxyAuth))
	}
	if c.Header != "" {
		fmt.Fprintf(&head, "%s: %s\r\n", c.Header, ph)
	}
	switch c.Scheme {
	case "bearer":
		fmt.Fprintf(&head, "Authorization: Bearer %s\r\n", ph)
	case "basic":
		fmt.Fprintf(&head, "Authorization: Basic %s\r\n", base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ph)))
	}
	fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, head.String()); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, string(b), nil
}

func proxyHeader(auth string) string {
	if auth == "" {
		return ""
	}
	return "Proxy-Authorization: " + auth + "\r\n"
}
