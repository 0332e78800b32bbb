package linux

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// TestMain lets the test binary serve as cordon-init when the backend re-executes it.
func TestMain(m *testing.M) {
	if IsInit() {
		os.Exit(InitMain())
	}
	os.Exit(m.Run())
}

// startSpec runs spec and returns the command's output and status.
func startSpec(t *testing.T, spec *sandbox.Spec) (string, sandbox.ExitStatus, error) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	spec.Stdin, spec.Stdout, spec.Stderr = devnull, out, out
	var warnings []string
	b := &Backend{Warn: func(s string) { warnings = append(warnings, s) }}
	sb, err := b.Start(context.Background(), spec)
	if err != nil {
		return "", sandbox.ExitStatus{}, err
	}
	st, err := sb.Wait()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out.Name())
	return string(data), st, nil
}

func testSpec(t *testing.T, args ...string) *sandbox.Spec {
	return testSpecIn(t.TempDir(), args...)
}

func testSpecIn(ws string, args ...string) *sandbox.Spec {
	return &sandbox.Spec{
		Args: args, Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/agent"}, Dir: ws,
		Workspace: sandbox.Workspace{Path: ws, Source: ws},
		User:      sandbox.User{UID: 1000, GID: 1000, Name: "agent", Home: "/home/agent"},
	}
}

func TestStartRunsCommandInFreshRoot(t *testing.T) {
	spec := testSpec(t, "sh", "-c", "id -u; hostname; ls /; echo hi > file; cat /etc/passwd | grep agent; ls /home")
	out, st, err := startSpec(t, spec)
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 0 {
		t.Fatalf("exit %d: %s", st.Code, out)
	}
	for _, want := range []string{"1000\n", "cordon\n", "agent:x:1000"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(spec.Workspace.Source, "file")); err != nil || string(b) != "hi\n" {
		t.Errorf("workspace write did not land: %q %v", b, err)
	}
	for _, absent := range []string{"root\n", "var\n", "run\n", "sys\n", "boot\n"} {
		if strings.Contains(out, "\n"+absent) {
			t.Errorf("/%s is visible inside:\n%s", strings.TrimSpace(absent), out)
		}
	}
}

func TestExitCodes(t *testing.T) {
	_, st, err := startSpec(t, testSpec(t, "sh", "-c", "exit 7"))
	if err != nil || st.Code != 7 {
		t.Fatalf("exit 7: got %d, %v", st.Code, err)
	}
	_, _, err = startSpec(t, testSpec(t, "no-such-command-xyz"))
	var ee *sandbox.ExecError
	if !asExec(err, &ee) || !ee.NotFound {
		t.Fatalf("missing command: got %v", err)
	}
	_, _, err = startSpec(t, testSpec(t, "/etc/hostname"))
	if !asExec(err, &ee) || ee.NotFound {
		t.Fatalf("non-executable: got %v", err)
	}
}

func asExec(err error, target **sandbox.ExecError) bool {
	e, ok := err.(*sandbox.ExecError)
	if ok {
		*target = e
	}
	return ok
}

func nowNano() int64 { return time.Now().UnixNano() }

// TestTrustCA checks the extra CA reaches the sandbox alone, in the bundle, and in the system bundle's
// place, read-only, and that the host's own bundle is untouched.
func TestTrustCA(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\ncordon-test-ca\n-----END CERTIFICATE-----\n"
	host, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	spec := testSpec(t, "sh", "-c", `cat /etc/cordon/ca.crt; echo @@; tail -c 200 /etc/cordon/ca-bundle.crt; echo @@;
tail -c 200 /etc/ssl/certs/ca-certificates.crt; echo @@; echo x >> /etc/ssl/certs/ca-certificates.crt && echo WROTE`)
	spec.TrustCA = []byte(ca)
	out, st, err := startSpec(t, spec)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(out, "@@\n")
	if st.Code == 0 || len(parts) != 4 || parts[0] != ca || !strings.HasSuffix(parts[1], ca) {
		t.Fatalf("exit %d, output:\n%s", st.Code, out)
	}
	if len(host) > 0 && !strings.HasSuffix(parts[2], ca) {
		t.Errorf("system bundle inside lacks the CA:\n%s", parts[2])
	}
	if strings.Contains(out, "WROTE") {
		t.Error("the sandbox could write the CA bundle")
	}
	if after, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); string(after) != string(host) {
		t.Error("the host's bundle changed")
	}
}
