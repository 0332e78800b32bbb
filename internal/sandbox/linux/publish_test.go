//go:build linux

package linux

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// TestDialPublished: a port the launch published is dialled inside by init and the connection handed
// out (the control); a server on a port it did not publish, listening just as well, is refused, and
// a sandbox launched without ports has no channel at all.
func TestDialPublished(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed (.ci/run installs it)")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	server := `import socket, threading
def serve(port):
    s = socket.create_server(("127.0.0.1", port))
    return s
a, b = serve(8000), serve(8001)
print("READY", flush=True)
def loop(s, word):
    while True:
        c, _ = s.accept()
        c.sendall(word)
        c.close()
threading.Thread(target=loop, args=(b, b"unpublished"), daemon=True).start()
loop(a, b"published")`
	sb, err := start(&sandbox.LaunchSpec{Publish: []uint16{8000}, Stdout: w}, testSpec(t, "python3", "-c", server))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sb.Kill(); sb.Wait(context.Background()) }()
	if l, err := bufio.NewReader(r).ReadString('\n'); err != nil || l != "READY\n" {
		t.Fatalf("the server inside: %q %v", l, err)
	}
	pub := sb.(sandbox.Publisher)
	c, err := pub.DialPublished(8000)
	if err != nil {
		t.Fatalf("the published port: %v", err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "published" {
		t.Errorf("the published port answered %q", got)
	}
	if c, err := pub.DialPublished(8001); err == nil || !strings.Contains(err.Error(), "not published") {
		if c != nil {
			c.Close()
		}
		t.Errorf("a port the launch did not publish: %v, want a refusal", err)
	}

	plain, err := start(&sandbox.LaunchSpec{}, testSpec(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	plain.Wait(context.Background())
	if _, err := plain.(sandbox.Publisher).DialPublished(8000); err == nil {
		t.Error("a sandbox without published ports dialled one")
	}
}
