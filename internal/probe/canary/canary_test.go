package canary

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/probe"
)

// TestMain lets the test binary serve as the canary process, as the cordon binary does.
func TestMain(m *testing.M) {
	if os.Args[0] == ProcessArg0 {
		os.Exit(ProcessMain())
	}
	os.Exit(m.Run())
}

// TestPlantGivesAwayOnlyHashesAndCleansUp: each canary is real (reachable on the host, matching its
// hash), the coordinates never carry a secret, and Close removes everything.
func TestPlantGivesAwayOnlyHashesAndCleansUp(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home, dir := t.TempDir(), t.TempDir()
	set, err := Plant(Options{Home: home, Dir: dir, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	c := set.Coordinates()
	secret, err := os.ReadFile(c.SecretFile.Path)
	if err != nil || probe.Sum(secret) != c.SecretFile.SHA256 {
		t.Fatalf("secret file: %v", err)
	}
	_, val, _ := strings.Cut(set.EnvVar(), "=")
	if probe.Sum([]byte(val)) != c.Env.SHA256 {
		t.Fatal("env canary hash mismatch")
	}
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(c.Listener.Port))
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if probe.Sum([]byte(strings.TrimSpace(line))) != c.Listener.SHA256 {
		t.Fatalf("listener greeting %q does not match its hash", line)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(c.Process.PID) + "/environ")
	if err != nil || !strings.Contains(string(environ), ProcessEnvName+"=") {
		t.Fatalf("canary process environment: %q %v", environ, err)
	}
	coords := string(must(t, c))
	for _, s := range []string{string(secret), val, strings.TrimSpace(line)} {
		if strings.Contains(coords, s) {
			t.Fatalf("the coordinates carry a secret: %s", coords)
		}
	}
	set.Close()
	if _, err := os.Stat(c.SecretFile.Path); err == nil {
		t.Error("the secret file survived Close")
	}
	if _, err := net.Dial("unix", "@"+c.Abstract.Name); err == nil {
		t.Error("the abstract socket survived Close")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(c.Process.PID) + "/environ"); err == nil {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Process.PID) + "/cmdline"); strings.Contains(string(b), "cordon-canary-"+set.Nonce()) {
			t.Error("the canary process survived Close")
		}
	}
}

func must(t *testing.T, c probe.Canaries) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
