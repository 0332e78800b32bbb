//go:build linux

package kubee2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/creack/pty"

	"github.com/cordon-sandbox/cordon/internal/creds/githubapp/fakegithub"
	"github.com/cordon-sandbox/cordon/internal/kubetest"
	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// env is what every test shares: the cluster, cordon's binary, the images and the upstreams.
type env struct {
	cluster            *kubetest.Cluster
	cordon             string // the binary, as the user runs it
	cordonImage, image string
	ca                 *testpki.CA
	gitRoot            string // the bare repositories the git upstream serves
	gitPort            int    // the git upstream (HTTPS, git http-backend) on every host address
	seen               *seenHeaders
	private            *tokenCheck // who may fetch /private/ (a GitHub App's tokens)
	state              string      // cordon's state directory
	kubeconfig         string
}

// tokenCheck is the private repository's door: a token it accepts, set by a test.
type tokenCheck struct {
	mu    sync.Mutex
	valid func(token string) bool
}

func (c *tokenCheck) set(f func(string) bool) { c.mu.Lock(); c.valid = f; c.mu.Unlock() }
func (c *tokenCheck) ok(r *http.Request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid == nil {
		return false
	}
	if _, pass, ok := r.BasicAuth(); ok {
		return c.valid(pass)
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && c.valid(tok)
}

// seenHeaders records the Authorization headers the upstream received.
type seenHeaders struct {
	mu  sync.Mutex
	got []string
}

func (s *seenHeaders) add(h string) { s.mu.Lock(); s.got = append(s.got, h); s.mu.Unlock() }
func (s *seenHeaders) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

var (
	once   sync.Once
	shared *env
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// setup starts what the tests share, once.
func setup(t testing.TB) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the test cluster's kubelet and containerd need root")
	}
	once.Do(func() { shared = build(t) })
	if shared == nil {
		t.Fatal("the shared test bed failed to start (see the first test's log)")
	}
	return shared
}

func build(t testing.TB) *env {
	e := &env{seen: &seenHeaders{}, private: &tokenCheck{}}
	e.cluster = kubetest.Start(t)
	e.kubeconfig = e.cluster.Kubeconfig
	dir, err := os.MkdirTemp("", "cordon-kubee2e-")
	if err != nil {
		t.Fatal(err)
	}
	e.cordon = filepath.Join(dir, "cordon")
	b := exec.Command("go", "build", "-o", e.cordon, "github.com/cordon-sandbox/cordon/cmd/cordon")
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("building cordon: %v\n%s", err, out)
	}
	e.cordonImage = kubetest.CordonImage(t, e.cluster, e.cordon)
	e.image = kubetest.AgentImage(t, e.cluster)
	e.state = filepath.Join(dir, "state")

	e.ca = testpki.NewCA(t, "kubee2e")
	e.gitRoot = filepath.Join(dir, "git")
	seed := exec.Command("sh", "-ec", `mkdir -p acme && git init -q --bare -b main acme/app.git
git init -q -b main seed && cd seed && echo hello > README && printf 'a\nb\nc\n' > list.txt && git add . && git commit -qm seed && git push -q ../acme/app.git main`)
	if err := os.MkdirAll(e.gitRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	seed.Dir, seed.Env = e.gitRoot, append(os.Environ(), gitEnv...)
	if out, err := seed.CombinedOutput(); err != nil {
		t.Fatalf("seeding the repository: %v\n%s", err, out)
	}
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + e.gitRoot, "GIT_HTTP_EXPORT_ALL=1"}}
	mux := http.NewServeMux()
	mux.Handle("/acme/", backend)
	mux.HandleFunc("/private/", func(w http.ResponseWriter, r *http.Request) {
		if !e.private.ok(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
			http.Error(w, "a token is needed", http.StatusUnauthorized)
			return
		}
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/private")
		backend.ServeHTTP(w, r)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		e.seen.add(r.Header.Get("Authorization"))
		fmt.Fprintf(w, "echo: %s\n", r.Header.Get("Authorization"))
	})
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	e.gitPort = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(t, "git.test", "denied.test")}}}
	go srv.ServeTLS(ln, "", "")
	return e
}

var gitEnv = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"}

// policy writes a policy file (outside any workspace) allowing git.test at the upstream's port.
func (e *env) policy(t testing.TB, extra string) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, e.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "policy.yaml")
	body := fmt.Sprintf(`version: 1
network:
  allow:
    - {host: git.test, ports: [%d]}
  hosts: {git.test: %s, denied.test: %s}
  tls: {caFile: %s}
%s`, e.gitPort, e.cluster.HostIP, e.cluster.HostIP, ca, extra)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) repo() string { return fmt.Sprintf("https://git.test:%d/acme/app.git", e.gitPort) }

// cordonCmd is cordon's binary with the test's state and kubeconfig, in dir.
func (e *env) cordonCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(e.cordon, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+e.state, "KUBECONFIG="+e.kubeconfig)
	return cmd
}

// runCmd is `cordon run --backend kubernetes` of agent in dir, with the test's images and
// repository (extra flags after them, so they may override).
func (e *env) runCmd(dir, pol, ns string, extra []string, agent ...string) *exec.Cmd {
	args := append([]string{"run", "--backend", "kubernetes", "--policy", pol, "--namespace", ns,
		"--image", e.image, "--cordon-image", e.cordonImage, "--repo", e.repo(), "--ref", "main"}, extra...)
	return e.cordonCmd(dir, append(append(args, "--"), agent...)...)
}

// run runs an agent command on the cluster and returns cordon's exit code, stdout and stderr.
func (e *env) run(t *testing.T, dir, pol, ns string, extra []string, agent ...string) (int, string, string) {
	t.Helper()
	cmd := e.runCmd(dir, pol, ns, extra, agent...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// runID is the run id the end of a run names ("cordon diff ID").
func runID(t *testing.T, stderr string) string {
	t.Helper()
	for _, f := range strings.Fields(stderr) {
		if len(f) == 24 && strings.Count(f, "-") == 2 && f[8] == '-' {
			return f
		}
	}
	t.Fatalf("no run id in:\n%s", stderr)
	return ""
}

// localClone is the user's checkout of the repository at main.
func (e *env) localClone(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	c := exec.Command("git", "clone", "-q", filepath.Join(e.gitRoot, "acme/app.git"), dir)
	c.Env = append(os.Environ(), gitEnv...)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	return dir
}

// TestKubeRunClonesEditsAndApplies: the pod clones the repository through the gateway, the agent
// edits it, and the run's changes come back into a local run that cordon diff shows and cordon
// apply carries into the user's checkout.
func TestKubeRunClonesEditsAndApplies(t *testing.T) {
	e := setup(t)
	local := e.localClone(t)
	pol := e.policy(t, "")
	ns := e.cluster.Namespace(t)
	code, out, stderr := e.run(t, local, pol, ns, nil, "sh", "-c",
		`set -e; echo world >> README; rm list.txt; printf 'new\n' > new.txt; head -c 64 /dev/urandom > blob.bin; echo agent-says-hi`)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "agent-says-hi") {
		t.Errorf("the agent's output did not reach cordon's stdout:\n%s", out)
	}
	id := runID(t, stderr)
	diff, err := e.cordonCmd(local, "diff", id).CombinedOutput()
	if err != nil || !strings.Contains(string(diff), "+world") || !strings.Contains(string(diff), "new.txt") {
		t.Fatalf("cordon diff: %v\n%s", err, diff)
	}
	if out, err := e.cordonCmd(local, "runs").CombinedOutput(); err != nil || !strings.Contains(string(out), id) {
		t.Fatalf("cordon runs does not list %s: %v\n%s", id, err, out)
	}
	if out, err := e.cordonCmd(local, "export", "--branch", "kube-agent", id).CombinedOutput(); err != nil {
		t.Fatalf("cordon export: %v\n%s", err, out)
	}
	show := exec.Command("git", "-C", local, "show", "kube-agent:README")
	if b, err := show.Output(); err != nil || string(b) != "hello\nworld\n" {
		t.Fatalf("the exported branch's README: %q %v", b, err)
	}
	if out, err := e.cordonCmd(local, "apply", id).CombinedOutput(); err != nil {
		t.Fatalf("cordon apply: %v\n%s", err, out)
	}
	readme, _ := os.ReadFile(filepath.Join(local, "README"))
	if string(readme) != "hello\nworld\n" {
		t.Errorf("README after apply: %q", readme)
	}
	if _, err := os.Stat(filepath.Join(local, "list.txt")); !os.IsNotExist(err) {
		t.Errorf("list.txt was not deleted: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "blob.bin")); len(b) != 64 {
		t.Errorf("blob.bin has %d bytes", len(b))
	}
	e.noLeftovers(t, ns, id)
}

// TestKubeDeniedAndUnreachable: a host the policy does not allow is refused and the refusal is in
// the local audit log; the API server, the kubelet, the metadata address and another pod are
// refused when dialled directly; UDP and DNS to an outside resolver do not leave.
func TestKubeDeniedAndUnreachable(t *testing.T) {
	e := setup(t)
	local := e.localClone(t)
	pol := e.policy(t, "")
	ns := e.cluster.Namespace(t)
	other := e.otherPodIP(t, ns)
	// The controls: each address the agent must not reach answers when asked from outside the pod,
	// so a refusal inside is the boundary's and not a dead address.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, u := range []string{"http://" + other + ":8080/", "https://" + e.cluster.APIServer + "/version"} {
		// A running container's server may not listen yet: the control waits for it to answer.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			resp, err := hc.Get(u)
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("control: %s does not answer from the host: %v", u, err)
			}
		}
	}
	apiHost, apiPort, _ := net.SplitHostPort(e.cluster.APIServer)
	script := fmt.Sprintf(`
try() { if body=$(curl -sSf -m 5 -k "$1" 2>/dev/null) && [ -n "$body" ]; then echo "REACHED $1: $body"; else echo "refused $1"; fi; }
try https://denied.test:%d/echo
try https://%s:%s/version
try https://%s:10250/pods
try http://169.254.169.254/latest/meta-data/
try http://%s:8080/
if nslookup -timeout=2 example.invalid 8.8.8.8 >/dev/null 2>&1; then echo "REACHED dns"; else echo "refused dns"; fi
echo done`, e.gitPort, apiHost, apiPort, e.cluster.NodeIP, other)
	code, out, stderr := e.run(t, local, pol, ns, []string{"--keep"}, "sh", "-c", script)
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if strings.Contains(out, "REACHED") {
		t.Errorf("the agent reached what it must not:\n%s", out)
	}
	if !strings.Contains(stderr, "denied.test") {
		t.Errorf("no refusal line for denied.test on cordon's stderr:\n%s", stderr)
	}
	id := runID(t, stderr)
	log, err := e.cordonCmd(local, "log", id).CombinedOutput()
	if err != nil {
		t.Fatalf("cordon log: %v\n%s", err, log)
	}
	// Each of these is in the log only if the pod's rules sent it to the gateway: without them the
	// connection or query goes out directly (or nowhere), and the gateway never sees it.
	for _, want := range []string{"denied.test", "169.254.169.254", other, e.cluster.NodeIP + ":10250", "example.invalid"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("cordon log has no refusal of %s:\n%s", want, log)
		}
	}
	e.noLeftovers(t, ns, id)
}

// The agent's requests that must succeed retry (curl --retry): on this 2-CPU machine, with the
// other packages' tests running beside, one request in a few dozen runs got no answer within 10 s
// (the gateway had put the credential in; the upstream's answer did not come back). The cause was
// not found (see the closing note of issue 19); what these tests assert holds for every attempt.

// TestKubeCredentialStaysInGateway: the upstream receives the real credential; the agent's
// environment, its files and everything it can read under /run/cordon hold only the placeholder.
func TestKubeCredentialStaysInGateway(t *testing.T) {
	e := setup(t)
	local := e.localClone(t)
	// The value is in two parts in the agent's script, joined only in its shell: whole, it would
	// be in the agent's own argv and the pod's spec, and the search below would hold it itself.
	const realA, realB = "real-token-", "5a0c1f8e9d"
	const real = realA + realB
	// LITERAL checks that the environment comes from the run's Secret, passed as it is: a value
	// written in the pod's spec would have its $(HOME) expanded by the kubelet.
	pol := e.policy(t, `credentials:
  - name: API_TOKEN
    from: {env: KUBEE2E_TOKEN}
    inject: {host: git.test, scheme: bearer}
env:
  set: {LITERAL: '$(HOME)/kept'}
`)
	t.Setenv("KUBEE2E_TOKEN", real)
	script := fmt.Sprintf(`set -e
curl -sS -m 20 --retry 2 --retry-all-errors -H "Authorization: Bearer $API_TOKEN" https://git.test:%d/echo
env
ls /run/cordon
test ! -e /run/cordon/secret && echo no-secret-mount
cat /proc/self/environ | tr '\0' '\n' | grep -c API_TOKEN
echo "literal=$LITERAL."
a=%s; b=%s
grep -rl "$a$b" /run/cordon /workspace /tmp /home /proc/1/cmdline /proc/1/environ 2>/dev/null && echo FOUND-REAL || echo clean`, e.gitPort, realA, realB)
	ns := e.cluster.Namespace(t)
	code, out, stderr := e.run(t, local, pol, ns, nil, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if strings.Contains(out, real) || strings.Contains(out, "FOUND-REAL") {
		t.Errorf("the real credential is visible inside the pod:\n%s", out)
	}
	if !strings.Contains(out, "literal=$(HOME)/kept.") {
		t.Errorf("LITERAL did not reach the agent as it is:\n%s", out)
	}
	if !strings.Contains(out, "no-secret-mount") || !strings.Contains(out, "clean") {
		t.Errorf("unexpected output:\n%s", out)
	}
	got := e.seen.all()
	if len(got) == 0 || got[len(got)-1] != "Bearer "+real {
		t.Errorf("the upstream saw %q, want the real token", got)
	}
	// Nor is it in what cordon keeps of the run here: its record, audit log and patch.
	if err := filepath.WalkDir(e.state, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), real) {
			t.Errorf("the real credential is in cordon's state: %s", p)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestKubeKilledCordonStopsThePod: a run lives past its lease (5s) while cordon renews it; then
// cordon is killed with SIGKILL. Within the lease the pod's gateway stops the run (inpod's
// TestPodLeaseLapses attacks what that stop holds): the agent, which would have slept for ten
// minutes, ends. cordon gc then fetches the change the agent made into the local run (cordon diff
// shows it, cordon log the lapse) and deletes the pod and the Secret. With no renewal the run would
// end at its lease, before the kill; with the gateway's watch gone, the agent would run on.
func TestKubeKilledCordonStopsThePod(t *testing.T) {
	e := setup(t)
	local := e.localClone(t)
	pol := e.policy(t, "sandbox:\n  kubernetes:\n    lease: 5s\n")
	ns := e.cluster.Namespace(t)
	cmd := e.runCmd(local, pol, ns, nil, "sh", "-c", "echo kept > kept.txt; exec sleep 600")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cs := e.cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	agentState := func(pod string) (running, ended bool) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, true // the run ended and cordon deleted its pod
		}
		if err != nil {
			t.Fatalf("the run's pod: %v", err)
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name == "agent" {
				return st.State.Running != nil, st.State.Terminated != nil
			}
		}
		return false, false
	}
	var pod string
	for pod == "" {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=cordon"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if running, _ := agentState(p.Name); running {
				pod = p.Name
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no running pod; cordon said:\n%s", errb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Twice the lease, renewed: the agent runs on.
	time.Sleep(10 * time.Second)
	if running, _ := agentState(pod); !running {
		t.Fatalf("the agent ended while cordon renewed its lease; cordon said:\n%s", errb.String())
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	killed := time.Now()
	for {
		if _, ended := agentState(pod); ended {
			break
		}
		if time.Since(killed) > 60*time.Second {
			t.Fatal("the agent still runs a minute after cordon was killed (lease 5s)")
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("the agent ended %s after cordon was killed (lease 5s)", time.Since(killed).Round(100*time.Millisecond))

	out, err := e.cordonCmd(local, "gc", "--all").CombinedOutput()
	if err != nil {
		t.Fatalf("cordon gc: %v\n%s", err, out)
	}
	id := strings.TrimPrefix(pod, "cordon-")
	e.noLeftovers(t, ns, id)
	if !strings.Contains(string(out), "recovered") || !strings.Contains(string(out), "no heartbeat from cordon") {
		t.Errorf("cordon gc did not say it recovered the run stopped by its lease:\n%s", out)
	}
	runID := runID(t, string(out))
	diff, err := e.cordonCmd(local, "diff", runID).CombinedOutput()
	if err != nil {
		t.Fatalf("cordon diff %s: %v\n%s", runID, err, diff)
	}
	if !strings.Contains(string(diff), "+kept") {
		t.Errorf("the recovered run lacks the agent's change:\n%s", diff)
	}
	show, err := e.cordonCmd(local, "log", runID).CombinedOutput()
	if err != nil || !strings.Contains(string(show), "lease") {
		t.Errorf("cordon log %s does not show the lapsed lease: %v\n%s", runID, err, show)
	}
}

// TestKubeTimeoutKeepsChanges: a run that reaches limits.timeout ends with 124, and the change
// its agent made before is in the local run: cordon lets the lease lapse, the wrapper stops the
// command and makes the patch, and only then are the results fetched (fetched at once, they were
// the agent's to write, or nothing).
func TestKubeTimeoutKeepsChanges(t *testing.T) {
	e := setup(t)
	local := e.localClone(t)
	pol := e.policy(t, "limits:\n  timeout: 3s\nsandbox:\n  kubernetes:\n    lease: 5s\n")
	ns := e.cluster.Namespace(t)
	code, _, stderr := e.run(t, local, pol, ns, nil, "sh", "-c", "echo kept > kept.txt; exec sleep 600")
	if code != 124 {
		t.Fatalf("exit %d, want 124 (the timeout):\n%s", code, stderr)
	}
	id := runID(t, stderr)
	diff, err := e.cordonCmd(local, "diff", id).CombinedOutput()
	if err != nil || !strings.Contains(string(diff), "+kept") {
		t.Errorf("cordon diff %s: %v\n%s\ncordon said:\n%s", id, err, diff, stderr)
	}
	e.noLeftovers(t, ns, id)
}

// noLeftovers waits until the run's pod and Secret are gone.
func (e *env) noLeftovers(t *testing.T, ns, id string) {
	t.Helper()
	e.nothingLeft(t, ns, "cordon.dev/run="+strings.ToLower(id))
}

// nothingLeft waits until no pod or Secret in ns matches the label selector.
func (e *env) nothingLeft(t *testing.T, ns, selector string) {
	t.Helper()
	cs := e.cluster.Client(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		pods, err1 := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		secrets, err2 := cs.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err1 == nil && err2 == nil && len(pods.Items) == 0 && len(secrets.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects %s left in the cluster: pods %v secrets %v (%v %v)", selector, len(pods.Items), len(secrets.Items), err1, err2)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// otherPodIP starts a plain pod serving HTTP on port (another tenant's) and returns its IP.
func (e *env) otherPodIP(t *testing.T, ns string) string {
	t.Helper()
	cs := e.cluster.Client(t)
	never := corev1.PullNever
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "other-tenant"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "httpd", Image: e.image, ImagePullPolicy: never,
			Command:         []string{"sh", "-c", "mkdir -p /tmp/www && echo other > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"},
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(1000))},
		}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return p.Status.PodIP
		}
		if ctx.Err() != nil {
			t.Fatalf("the other pod did not start: %+v", p.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// TestKubeRenderAcceptedByAPIServer: what cordon kube render prints (the Secret template, the
// NetworkPolicy, the pod) is accepted by the real API server as it is (a server-side dry run
// validates every field).
func TestKubeRenderAcceptedByAPIServer(t *testing.T) {
	e := setup(t)
	ns := e.cluster.Namespace(t)
	pol := e.policy(t, "limits: {memory: 1GiB, cpu: 1, timeout: 10m, disk: 2GiB}\n")
	render := e.cordonCmd(t.TempDir(), "kube", "render", "--policy", pol, "--namespace", ns,
		"--image", e.image, "--cordon-image", e.cordonImage, "--repo", e.repo(), "--", "true")
	yaml, err := render.Output()
	if err != nil {
		t.Fatalf("cordon kube render: %v", err)
	}
	apply := exec.Command(e.cluster.Kubectl, "--kubeconfig", e.kubeconfig, "create", "--dry-run=server", "-o", "name", "-f", "-")
	apply.Stdin = bytes.NewReader(yaml)
	out, err := apply.CombinedOutput()
	if err != nil {
		t.Fatalf("the API server refused the rendered objects: %v\n%s\n---\n%s", err, out, yaml)
	}
	for _, want := range []string{"secret/", "networkpolicy.networking.k8s.io/", "pod/"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl created no %s:\n%s", want, out)
		}
	}
}

// TestKubeGVisorRuntimeClass: with --runtime-class the agent's pod runs on gVisor's kernel (the
// cluster's runsc RuntimeClass), and the boundary is the same: the clone through the gateway, a
// refusal, the changes back.
func TestKubeGVisorRuntimeClass(t *testing.T) {
	e := setup(t)
	if e.cluster.RuntimeClass == "" {
		t.Fatalf("the test cluster has no gVisor RuntimeClass: %v", e.cluster.RuntimeClassErr)
	}
	local := e.localClone(t)
	pol := e.policy(t, "")
	ns := e.cluster.Namespace(t)
	script := fmt.Sprintf(`uname -a
if curl -sS -m 5 -o /dev/null https://denied.test:%d/echo 2>/dev/null; then echo REACHED; else echo refused; fi
echo gvisor-was-here > gvisor.txt`, e.gitPort)
	code, out, stderr := e.run(t, local, pol, ns, []string{"--runtime-class", e.cluster.RuntimeClass}, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "gvisor") {
		t.Errorf("the agent's kernel is not gVisor's:\n%s", out)
	}
	if strings.Contains(out, "REACHED") || !strings.Contains(out, "refused") {
		t.Errorf("denied.test was not refused under gVisor:\n%s", out)
	}
	id := runID(t, stderr)
	if out, err := e.cordonCmd(local, "apply", id).CombinedOutput(); err != nil {
		t.Fatalf("cordon apply: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "gvisor.txt")); string(b) != "gvisor-was-here\n" {
		t.Errorf("gvisor.txt after apply: %q", b)
	}
	e.noLeftovers(t, ns, id)
}

// TestKubeTerminal: with a terminal on cordon's stdin the agent gets one in its container, of the
// local terminal's size, and its output (without the attach hello's echo) reaches the terminal.
func TestKubeTerminal(t *testing.T) {
	e := setup(t)
	local := e.localClone(t)
	pol := e.policy(t, "")
	ns := e.cluster.Namespace(t)
	cmd := e.runCmd(local, pol, ns, nil, "sh", "-c", "test -t 0 && echo has-a-tty; stty size")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, ptmx); close(copied) }()
	werr := cmd.Wait()
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	got := out.String()
	if werr != nil || !strings.Contains(got, "has-a-tty") || !strings.Contains(got, "33 101") {
		t.Fatalf("cordon: %v\nterminal:\n%q", werr, got)
	}
	if strings.Contains(got, "cordon-attach") {
		t.Errorf("the attach hello reached the terminal:\n%q", got)
	}
}

// TestKubeGitHubAppToken: a GitHub App token is minted by cordon, on this machine, before the pod
// starts, scoped to the repository the policy names, put into requests by the pod's gateway, and
// revoked when the run ends; the agent only ever holds its placeholder.
func TestKubeGitHubAppToken(t *testing.T) {
	e := setup(t)
	app := fakegithub.NewApp(t, fakegithub.Options{})
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(keyFile, app.PrivateKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	local := e.localClone(t)
	pol := e.policy(t, fmt.Sprintf(`credentials:
  - name: GH_TOKEN
    from:
      githubApp: {appId: %d, privateKeyFile: %q, installationId: %d, apiURL: %q,
                  repositories: [acme/app], permissions: {contents: read}}
    inject: {host: git.test, scheme: bearer}
`, app.ID, keyFile, app.InstallationID, app.URL()))
	ns := e.cluster.Namespace(t)
	// The repository is private: the clone step presents the credential's placeholder, the
	// gateway the minted token.
	e.private.set(app.Valid)
	defer e.private.set(nil)
	privateRepo := fmt.Sprintf("https://git.test:%d/private/acme/app.git", e.gitPort)
	script := fmt.Sprintf(`cat README; curl -sS -m 20 --retry 2 --retry-all-errors -H "Authorization: Bearer $GH_TOKEN" https://git.test:%d/echo 2>&1; echo "agent-has=$GH_TOKEN"`, e.gitPort)
	code, out, stderr := e.run(t, local, pol, ns, []string{"--repo", privateRepo}, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	toks := app.Tokens()
	if len(toks) != 1 {
		t.Fatalf("the fake issued %d tokens, want 1", len(toks))
	}
	tok := toks[0]
	if len(tok.Repositories) != 1 || tok.Repositories[0] != "acme/app" || tok.Permissions["contents"] != "read" {
		t.Errorf("token scope: repositories %v, permissions %v", tok.Repositories, tok.Permissions)
	}
	if !tok.Revoked {
		t.Error("the token was not revoked when the run ended")
	}
	if strings.Contains(out, tok.Value) || !strings.Contains(out, "agent-has=") {
		t.Errorf("the real token reached the pod:\n%s", out)
	}
	if !strings.Contains(out, "hello") {
		t.Errorf("the private repository was not cloned:\n%s", out)
	}
	got := e.seen.all()
	if len(got) == 0 || got[len(got)-1] != "Bearer "+tok.Value {
		t.Errorf("the upstream saw %q, want the minted token\nstdout:\n%s\nstderr:\n%s", got, out, stderr)
	}
}

// TestKubeRenderSandboxTemplate: on a cluster that serves agent-sandbox's SandboxTemplate (a CRD of
// that group and kind, installed here with an open schema), cordon kube render adds the template of
// its pod by itself, and the API server takes it.
func TestKubeRenderSandboxTemplate(t *testing.T) {
	e := setup(t)
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(e.cluster.Kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sandboxtemplates.extensions.agents.x-k8s.io}
spec:
  group: extensions.agents.x-k8s.io
  scope: Namespaced
  names: {plural: sandboxtemplates, singular: sandboxtemplate, kind: SandboxTemplate}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
	kubectl(crd, "apply", "-f", "-")
	t.Cleanup(func() { kubectl("", "delete", "crd", "sandboxtemplates.extensions.agents.x-k8s.io", "--wait=false") })
	kubectl("", "wait", "--for=condition=Established", "--timeout=30s", "crd/sandboxtemplates.extensions.agents.x-k8s.io")
	// Established comes a moment before the group's discovery document is served.
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := exec.Command(e.cluster.Kubectl, "--kubeconfig", e.kubeconfig, "get", "--raw", "/apis/extensions.agents.x-k8s.io/v1alpha1").Run()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRD's group is not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ns := e.cluster.Namespace(t)
	render := e.cordonCmd(t.TempDir(), "kube", "render", "--policy", e.policy(t, ""), "--namespace", ns,
		"--image", e.image, "--cordon-image", e.cordonImage, "--repo", e.repo(), "--", "true")
	yaml, err := render.Output()
	if err != nil {
		t.Fatalf("cordon kube render: %v", err)
	}
	if !strings.Contains(string(yaml), "kind: SandboxTemplate") {
		t.Fatalf("no SandboxTemplate in the rendering although the cluster serves it:\n%s", yaml)
	}
	out := kubectl(string(yaml), "create", "--dry-run=server", "-o", "name", "-f", "-")
	if !strings.Contains(out, "sandboxtemplate.extensions.agents.x-k8s.io/") {
		t.Errorf("kubectl created no SandboxTemplate:\n%s", out)
	}
}

// TestKubeDoctor: cordon doctor --backend kubernetes names the API server and its version, the
// cluster's RuntimeClasses with gVisor's marked, and that a dry run of a run's pod is stored as
// rendered; a kubeconfig that names no reachable cluster is a
// FAIL line and exit status 1.
func TestKubeDoctor(t *testing.T) {
	e := setup(t)
	out, err := e.cordonCmd(t.TempDir(), "doctor", "--backend", "kubernetes").CombinedOutput()
	if err != nil {
		t.Fatalf("cordon doctor: %v\n%s", err, out)
	}
	for _, want := range []string{"ok    api server", "Kubernetes v1.", "runtime classes", "ok    admission"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("doctor does not say %q:\n%s", want, out)
		}
	}
	if e.cluster.RuntimeClass != "" && !strings.Contains(string(out), "--runtime-class "+e.cluster.RuntimeClass+" is gVisor's") {
		t.Errorf("doctor does not name gVisor's RuntimeClass:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: x, cluster: {server: \"https://127.0.0.1:1\"}}]\ncontexts: [{name: x, context: {cluster: x, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := e.cordonCmd(t.TempDir(), "doctor", "--backend", "kubernetes", "--kubeconfig", bad)
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "FAIL  api server") {
		t.Errorf("doctor with an unreachable cluster: %v\n%s", err, out)
	}
}
