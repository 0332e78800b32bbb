//go:build linux

package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// javaFetch is a Java HttpClient program: GET each URL, print the status and body or the error.
const javaFetch = `import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Fetch {
    public static void main(String[] urls) throws Exception {
        HttpClient c = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        for (String u : urls) {
            try {
                HttpResponse<String> r = c.send(HttpRequest.newBuilder(URI.create(u)).build(), HttpResponse.BodyHandlers.ofString());
                System.out.print("JAVA " + r.statusCode() + " " + r.body());
            } catch (Exception e) {
                System.out.println("JAVA ERROR " + u + " " + e);
            }
        }
    }
}
`

// TestTrustEveryRuntime: with network.tls.caFile naming an upstream's private CA, curl, python, a Go
// program and Java's HttpClient inside reach it with no CA option of their own, on a host that passes
// through (the sandbox verifies the upstream itself) and on one the gateway intercepts (the sandbox
// verifies the run's CA); a policy's own env.set of SSL_CERT_FILE (a second private CA) is merged
// into the sandbox's bundle and its NO_PROXY kept beside the gateway's. Before, only the gateway
// trusted caFile, the passthrough requests failed verification and Java knew no run CA. A
// JAVA_TOOL_OPTIONS that names another trust store, and an SSL_CERT_FILE cordon cannot read, stop the
// run with a line that names network.tls.caFile.
func TestTrustEveryRuntime(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "python3")
	requireTool(t, "java")
	goClient := buildGoClient(t)
	forEachTier(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		seen := map[string]bool{}
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Host+r.URL.Path] = true
			mu.Unlock()
			fmt.Fprintf(w, "UPSTREAM %s%s\n", r.Host, r.URL.Path)
		})
		port, caFile := serveTLS(t, h, handler, "pass.test", "icpt.test")
		corpPort, corpCA := serveTLS(t, h, handler, "corp.test")
		h.writeFile(filepath.Join(h.ws, "goclient"), string(goClient), 0o755)
		h.writeFile(filepath.Join(h.ws, "Fetch.java"), javaFetch, 0o644)
		network := fmt.Sprintf(`network:
  allow:
    - {host: pass.test, ports: [%[1]d]}
    - {host: icpt.test, ports: [%[1]d]}
    - {host: corp.test, ports: [%[2]d]}
  hosts: {pass.test: 127.0.0.1, icpt.test: 127.0.0.1, corp.test: 127.0.0.1}
  tls: {caFile: %[3]q}
  http:
    - host: icpt.test
      allow: [{methods: [GET], paths: ["/*"]}]
`, port, corpPort, caFile)
		pol := network + fmt.Sprintf("env:\n  set: {SSL_CERT_FILE: %q, NO_PROXY: corp.internal}\n", corpCA)
		py := `python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())'`
		script := fmt.Sprintf(`echo "NOPROXY=$NO_PROXY"
for host in pass.test icpt.test; do
  curl -sS -m 10 --noproxy '*' https://$host:%[1]d/curl
  %[3]s https://$host:%[1]d/python
  ./goclient https://$host:%[1]d/go tcp4
done
curl -sS -m 10 --noproxy '*' https://corp.test:%[2]d/curl
java Fetch.java https://pass.test:%[1]d/java https://icpt.test:%[1]d/java https://corp.test:%[2]d/java
true`, port, corpPort, py)
		r := h.sandboxed(pol, script)
		if r.code != 0 {
			t.Fatalf("run failed:\n%s", r)
		}
		mu.Lock()
		for _, host := range []string{"pass.test", "icpt.test"} {
			for _, client := range []string{"curl", "python", "go", "java"} {
				if !seen[fmt.Sprintf("%s:%d/%s", host, port, client)] {
					t.Errorf("%s did not reach %s:\n%s", client, host, r)
				}
			}
		}
		for _, client := range []string{"curl", "java"} {
			if !seen[fmt.Sprintf("corp.test:%d/%s", corpPort, client)] {
				t.Errorf("%s did not reach corp.test through the policy's own SSL_CERT_FILE:\n%s", client, r)
			}
		}
		mu.Unlock()
		if !strings.Contains(r.stdout, "NOPROXY=corp.internal,localhost,127.0.0.1,::1") {
			t.Errorf("the policy's NO_PROXY was not kept beside the gateway's:\n%s", r.stdout)
		}
		if !strings.Contains(r.stderr, "env.set SSL_CERT_FILE: the certificates of "+corpCA) {
			t.Errorf("no notice of the merged SSL_CERT_FILE:\n%s", r.stderr)
		}

		for _, tc := range []struct{ name, env, want string }{
			{"java trust store", `{JAVA_TOOL_OPTIONS: "-Djavax.net.ssl.trustStore=/tmp/x"}`, "env.set JAVA_TOOL_OPTIONS names a trust store"},
			{"unreadable bundle", `{REQUESTS_CA_BUNDLE: /nonexistent/ca.pem}`, "env.set REQUESTS_CA_BUNDLE: merging it with the sandbox's bundle"},
		} {
			r := h.sandboxed(network+"env:\n  set: "+tc.env+"\n", "echo RAN")
			if r.code != 125 || strings.Contains(r.stdout, "RAN") || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "network.tls.caFile") {
				t.Errorf("%s: want exit 125 with %q naming network.tls.caFile:\n%s", tc.name, tc.want, r)
			}
		}
	})
}
