//go:build linux

package linux

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/javatrust"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// TestMain lets the test binary serve as cordon-init when the backend re-executes it.
func TestMain(m *testing.M) {
	if IsInit() {
		os.Exit(InitMain())
	}
	if arg := os.Getenv("CORDON_TEST_LANDLOCK_CHILD"); arg != "" {
		landlockChild(arg)
	}
	if os.Getenv("CORDON_TEST_THREADS_CHILD") == "1" {
		threadsChild()
		os.Exit(0)
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
	sb, err := start(&sandbox.LaunchSpec{Stdout: out, Stderr: out}, spec)
	if err != nil {
		return "", sandbox.ExitStatus{}, err
	}
	st, err := sb.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out.Name())
	return string(data), st, nil
}

// testUser is who the tests' commands run as.
var testUser = sandbox.User{UID: 1000, GID: 1000, Name: "agent", Home: "/home/agent"}

// start launches a box for ls (as testUser, streams not given are /dev/null) and starts spec in it.
func start(ls *sandbox.LaunchSpec, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	if ls.User == (sandbox.User{}) {
		ls.User = testUser
	}
	return sandbox.Start(context.Background(), &Backend{}, ls, spec)
}

func testSpec(t *testing.T, args ...string) *sandbox.Spec {
	return testSpecIn(t.TempDir(), args...)
}

func testSpecIn(ws string, args ...string) *sandbox.Spec {
	return &sandbox.Spec{
		Args: args, Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/agent"}, Dir: ws,
		Workspace: sandbox.Workspace{Path: ws, Source: ws},
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

// TestEtcReadOnly attacks the host files bound into /etc: /etc is sealed with one recursive
// mount_setattr, so every bind under it must come out read-only, nosuid and nodev. The same write
// into /tmp succeeds, so a failing write is the mount's doing.
func TestEtcReadOnly(t *testing.T) {
	if _, err := os.Stat("/etc/shells"); err != nil {
		t.Skip("host has no /etc/shells")
	}
	script := `
for f in /etc/shells /etc/ld.so.cache /etc/hosts; do
  if (echo x >> "$f") 2>/dev/null; then echo "WROTE $f"; fi
done
if (echo x >> /tmp/control) 2>/dev/null; then echo "CONTROL ok"; fi
while read -r id parent dev root mnt opts rest; do
  case "$mnt" in
  /etc|/etc/*) echo "MOUNT $mnt $opts" ;;
  esac
done < /proc/self/mountinfo
`
	out, st, err := startSpec(t, testSpec(t, "sh", "-c", script))
	if err != nil || st.Code != 0 {
		t.Fatalf("exit %d, %v: %s", st.Code, err, out)
	}
	if strings.Contains(out, "WROTE") {
		t.Errorf("a file in /etc was writable:\n%s", out)
	}
	if !strings.Contains(out, "CONTROL ok") {
		t.Fatalf("the control write to /tmp failed, so the test proves nothing:\n%s", out)
	}
	mounts := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "MOUNT" {
			continue
		}
		mounts++
		opts := "," + f[2] + ","
		for _, want := range []string{",ro,", ",nosuid,", ",nodev,"} {
			if !strings.Contains(opts, want) {
				t.Errorf("%s is mounted %s, lacking %s", f[1], f[2], strings.Trim(want, ","))
			}
		}
	}
	if mounts < 2 {
		t.Fatalf("found %d mounts under /etc, want the tmpfs and host binds:\n%s", mounts, out)
	}
}

// TestWaitLeavesNothingRunning: Wait returns with the command's status as soon as init reports it,
// before the kernel has finished tearing init down, so it must not return while any other process
// of the sandbox still exists. A background process that outlives the command is found on the host
// while the command runs (the control) and is gone, not even a zombie, when Wait returns.
func TestWaitLeavesNothingRunning(t *testing.T) {
	ws := t.TempDir()
	marker := fmt.Sprintf("%d.%03d", 5000+os.Getpid()%1000, time.Now().Nanosecond()%1000)
	// The script is a file, so that only the sleep itself carries the marker in its command line. It
	// exits once the test has seen the sleep (the file "seen"), however slowly a loaded host shows it.
	seen := filepath.Join(ws, "seen")
	script := "sleep " + marker + " & i=0; while [ ! -e " + seen + " ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; exit 3\n"
	if err := os.WriteFile(filepath.Join(ws, "run.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := testSpecIn(ws, "sh", filepath.Join(ws, "run.sh"))
	sb, err := start(&sandbox.LaunchSpec{}, spec)
	if err != nil {
		t.Fatal(err)
	}
	var pid string
	for deadline := time.Now().Add(30 * time.Second); pid == ""; time.Sleep(5 * time.Millisecond) {
		pid = findSleep(t, marker)
		if pid == "" && time.Now().After(deadline) {
			t.Fatalf("the background sleep %s never showed on the host, so this test cannot check it is gone", marker)
		}
	}
	if err := os.WriteFile(seen, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := sb.Wait(context.Background())
	if err != nil || st.Code != 3 {
		t.Fatalf("Wait = %+v, %v; want code 3", st, err)
	}
	if b, err := os.ReadFile(filepath.Join("/proc", pid, "stat")); err == nil {
		t.Fatalf("after Wait, the sandbox's background process %s is still there: %s", pid, b)
	}
}

// TestNoEnvironmentPassesThrough attacks the environment: a secret in the caller's must reach
// neither init (which is the re-executed cordon binary, so a leak there would sit in a process of the
// sandbox's pid namespace) nor the command, which gets the spec's variables and nothing else. Init's
// environment is read from the host while the command runs; the command prints its own.
func TestNoEnvironmentPassesThrough(t *testing.T) {
	const canary = "CORDON_TEST_SECRET"
	value := fmt.Sprintf("s3cr3t-%d", time.Now().UnixNano())
	t.Setenv(canary, value)
	if os.Getenv(canary) != value {
		t.Fatal("the canary is not in the test's own environment: the check below would prove nothing")
	}
	ws := t.TempDir()
	seen := filepath.Join(ws, "seen")
	spec := testSpecIn(ws, "sh", "-c", "tr '\\0' '\\n' < /proc/self/environ; i=0; while [ ! -e "+seen+" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done")
	out, err := os.CreateTemp(ws, "out")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := start(&sandbox.LaunchSpec{Stdout: out}, spec)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", sb.Pid()))
	if werr := os.WriteFile(seen, nil, 0o644); werr != nil {
		t.Fatal(werr)
	}
	if _, werr := sb.Wait(context.Background()); werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatalf("reading init's environment from the host: %v", err)
	}
	if got := strings.Split(strings.TrimRight(string(env), "\x00"), "\x00"); len(got) != 1 || !strings.HasPrefix(got[0], "GOMAXPROCS=") {
		// Names only: the values are the host's, and would land in the test's log.
		t.Errorf("init's environment has %q (the canary there: %v); want GOMAXPROCS alone", envNames(got), slices.Contains(envNames(got), canary))
	}
	cmdEnv, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(cmdEnv))
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(spec.Env)); !slices.Equal(got, want) {
		t.Errorf("the command's environment has %q; want the spec's %q", envNames(got), want)
	}
}

// envNames returns the variable names of env's NAME=value entries.
func envNames(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i], _, _ = strings.Cut(kv, "=")
	}
	return out
}

// findSleep returns the host pid of the process whose command line is "sleep arg", or "".
func findSleep(t *testing.T, arg string) string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(b) == "sleep\x00"+arg+"\x00" {
			return e.Name()
		}
	}
	return ""
}

// TestSignalsReachCommand: init forwards the signals it catches to the command, and one it does not
// catch (SIGURG, the runtime's own) neither reaches the command nor ends the sandbox.
func TestSignalsReachCommand(t *testing.T) {
	ws := t.TempDir()
	script := `trap 'echo got-URG' URG; trap 'echo got-USR1' USR1; trap 'echo got-HUP' HUP; trap 'echo got-TERM; exit 9' TERM
echo ready > ready
while :; do sleep 0.02; done
`
	if err := os.WriteFile(filepath.Join(ws, "run.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpecIn(ws, "sh", filepath.Join(ws, "run.sh"))
	sb, err := start(&sandbox.LaunchSpec{Stdout: out, Stderr: out}, spec)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			sb.Kill()
			t.Fatal("the command never got ready")
		}
	}
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if b, _ := os.ReadFile(out.Name()); strings.Contains(string(b), want) {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(out.Name())
				sb.Kill()
				t.Fatalf("%q never came: %q", want, b)
			}
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGURG, syscall.SIGUSR1, syscall.SIGHUP} {
		if err := sb.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if sig != syscall.SIGURG {
			waitFor("got-" + strings.TrimPrefix(unix.SignalName(sig), "SIG"))
		}
	}
	if err := sb.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := sb.Wait(context.Background())
	if err != nil || st.Code != 9 {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("Wait = %+v, %v; want 9 from the TERM trap; output %q", st, err, b)
	}
	if b, _ := os.ReadFile(out.Name()); strings.Contains(string(b), "got-URG") {
		t.Errorf("SIGURG, which init does not catch, reached the command: %q", b)
	}
}

// TestEgressSetAtLaunch: with Egress given at Launch, init creates the gateway's sockets before its
// config arrives and hands them over (each role, per address family), once; without it there are none.
func TestEgressSetAtLaunch(t *testing.T) {
	ports := &sandbox.EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 53}
	ws := t.TempDir()
	sb, err := start(&sandbox.LaunchSpec{Egress: ports}, testSpecIn(ws, "sh", "-c", "touch ran"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sb.EgressListeners()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.EgressListeners(); err == nil {
		t.Error("the sockets were handed over twice")
	}
	if st, err := sb.Wait(context.Background()); err != nil || st.Code != 0 {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if len(l.Transparent) == 0 || len(l.Proxy) != len(l.Transparent) || len(l.DNSTCP) != len(l.Transparent) || len(l.DNSUDP) != len(l.Transparent) {
		t.Errorf("got %d transparent, %d proxy, %d DNS TCP and %d DNS UDP sockets, want the same number of each",
			len(l.Transparent), len(l.Proxy), len(l.DNSTCP), len(l.DNSUDP))
	}
	for _, ln := range append(append(append([]net.Listener(nil), l.Transparent...), l.Proxy...), l.DNSTCP...) {
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().IsLoopback() {
			t.Errorf("a gateway socket listens on %v, not on loopback", ln.Addr())
		}
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err != nil {
		t.Fatalf("the command did not run: %v", err)
	}

	sb, err = start(&sandbox.LaunchSpec{}, testSpec(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := sb.EgressListeners(); err != nil || len(l.Transparent)+len(l.DNSUDP) != 0 {
		t.Errorf("without egress: EgressListeners = %+v, %v; want none", l, err)
	}
	sb.Wait(context.Background())
}

// TestTrustCA checks the extra CA reaches the sandbox alone, in the bundle, and in the system bundle's
// place, read-only, and that the host's own bundle is untouched.
func TestTrustCA(t *testing.T) {
	pki := testpki.NewCA(t, "cordon test CA")
	ca := string(pki.PEM)
	host, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	spec := testSpec(t, "sh", "-c", `cat /etc/cordon/ca.crt; echo @@; tail -c 1000 /etc/cordon/ca-bundle.crt; echo @@;
tail -c 1000 /etc/ssl/certs/ca-certificates.crt; echo @@; test -s /etc/cordon/java-cacerts.jks && echo JAVA-STORE;
echo x >> /etc/ssl/certs/ca-certificates.crt && echo WROTE`)
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
	if !strings.Contains(out, "JAVA-STORE") {
		t.Error("no Java trust store inside")
	}
	if after, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); string(after) != string(host) {
		t.Error("the host's bundle changed")
	}
	// The bundle, which init copies from the host's, is the host's and the CA byte for byte; the
	// Java store, larger than what travels inside the config, arrives whole through its descriptor.
	want := string(host)
	if want != "" && !strings.HasSuffix(want, "\n") {
		want += "\n"
	}
	want += ca
	spec = testSpec(t, "sh", "-c", "cat /etc/cordon/ca-bundle.crt; echo @@; base64 -w0 /etc/cordon/java-cacerts.jks")
	spec.TrustCA = []byte(ca)
	out, _, err = startSpec(t, spec)
	if err != nil {
		t.Fatal(err)
	}
	bundle, store, _ := strings.Cut(out, "\n@@\n")
	if bundle+"\n" != want {
		t.Errorf("the sandbox's bundle is %d bytes, want the host's and the CA, %d", len(bundle)+1, len(want))
	}
	b, err := base64.StdEncoding.DecodeString(store)
	if err != nil {
		t.Fatalf("the Java store: %v (%.100q)", err, store)
	}
	if len(b) <= inlineEtcMax {
		t.Logf("the Java store is %d bytes, within the config's inline limit: the descriptor path is not tried here", len(b))
	}
	certs, err := javatrust.Decode(b)
	if err != nil {
		t.Fatalf("the Java store inside: %v", err)
	}
	if !slices.ContainsFunc(certs, func(der []byte) bool { return bytes.Equal(der, pki.Cert.Raw) }) {
		t.Errorf("the Java store inside (%d certificates) lacks the CA", len(certs))
	}
	if hostStore, err := os.ReadFile(javatrust.HostStores[0]); err == nil {
		if hc, err := javatrust.Decode(hostStore); err == nil && len(certs) != len(hc)+1 {
			t.Errorf("the Java store inside has %d certificates, want the host's %d and the CA", len(certs), len(hc))
		}
	}
}
