//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublish: cordon run --publish 127.0.0.1:HOSTPORT:8000 lets the host reach a python http.server
// the command runs on the sandbox's loopback, and the connection is an inbound event of the audit
// log. The control: before the run (and for a port not published) nothing on the host answers, and
// the sandbox's loopback is otherwise unreachable from the host.
func TestPublish(t *testing.T) {
	requireTool(t, "python3")
	forEachIdentity(t, func(t *testing.T, h *harness) {
		free, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hostPort := free.Addr().(*net.TCPAddr).Port
		free.Close()
		url := fmt.Sprintf("http://127.0.0.1:%d/index.txt", hostPort)
		if _, err := http.Get(url); err == nil {
			t.Fatal("control: something answers on the host port before the run")
		}
		h.writeFile(filepath.Join(h.ws, "index.txt"), "served "+h.canary+"\n", 0o644)
		server := `import functools, http.server
s = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), functools.partial(http.server.SimpleHTTPRequestHandler, directory="."))
print("READY", flush=True)
s.serve_forever()`
		script := fmt.Sprintf("python3 -c '%s' 2>/dev/null &\nread line\nkill $!\necho DONE", server)
		cmd := h.command(nil, cordonBin, "run", "--keep", "--policy", h.policy("network:\n  allow: []\n"), "--publish", fmt.Sprintf("127.0.0.1:%d:8000", hostPort), "--", "sh", "-c", script)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer stdin.Close()
		out := bufio.NewReader(stdout)
		if l, err := out.ReadString('\n'); err != nil || strings.TrimSpace(l) != "READY" {
			t.Fatalf("the server inside did not start: %q %v\n%s", l, err, stderr.String())
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET through --publish: %v\n%s", err, stderr.String())
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "served "+h.canary+"\n" {
			t.Errorf("GET through --publish: %d %q", resp.StatusCode, body)
		}
		fmt.Fprintln(stdin, "end")
		rest, _ := io.ReadAll(out)
		if err := cmd.Wait(); err != nil || !strings.Contains(string(rest), "DONE") {
			t.Fatalf("the run: %v %q\n%s", err, rest, stderr.String())
		}
		if _, err := http.Get(url); err == nil {
			t.Error("the host port still answers after the run")
		}
		log := h.cordon(nil, "", "log", "last")
		if !strings.Contains(log.stdout, "inbound") || !strings.Contains(log.stdout, "127.0.0.1") {
			t.Errorf("the audit log does not record the inbound connection:\n%s", log.stdout)
		}
	})
}
