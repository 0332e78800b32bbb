//go:build linux

package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/sandbox/gvisor"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// shared is the one cluster of this test process. It is process-wide state on purpose: a cluster
// takes seconds to start and a gigabyte to run, the processes it runs are the machine's, and only
// one can run at a time (its bridge, its state directory), so every test of the process shares it.
var shared struct {
	mu      sync.Mutex
	cluster *Cluster
	run     *running
	err     error // a start that failed is not tried again by the same process
}

// running is what Stop needs: the processes this process started and the lock it holds.
type running struct {
	l     *layout
	sp    *spawner
	procs []*proc
	lock  *os.File
}

// stateRoot is the cluster's state directory, under the temporary directory. lockPath is the
// machine's one cluster lock (the bridge, its subnet and the fixed paths are the machine's, whatever
// TMPDIR a process has); it holds the state directory of the cluster that last took it, so that a run
// killed before it stopped is found by the next even under another TMPDIR.
func stateRoot() string { return filepath.Join(os.TempDir(), "cordon-kubetest") }

const lockPath = "/run/cordon-kubetest.lock"

// Start returns this test process's cluster, starting it on the first call. It skips the test when
// not root, and fails it when the Kubernetes binaries are missing (saying how to build them) or the
// cluster does not come up (with the end of the component's log that says why). The test package's
// TestMain must call Stop (Main does) or the cluster outlives the tests, until the next Start.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("kubetest: a cluster needs root (kubelet, containerd, the pods' network namespaces)")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster != nil {
		return shared.cluster
	}
	if shared.err != nil {
		t.Fatalf("kubetest: the cluster did not start earlier in this process: %v", shared.err)
	}
	c, run, err := start(t.Logf)
	if err != nil {
		shared.err = err
		t.Fatal(err)
	}
	shared.cluster, shared.run = c, run
	return c
}

// Stop stops this process's cluster, if it started one, and removes everything it left on the
// machine (its logs stay in Cluster.LogDir). A later Start starts a new one.
func Stop() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	run := shared.run
	shared.cluster, shared.run, shared.err = nil, nil, nil
	if run == nil {
		return nil
	}
	return run.stop()
}

// Main runs the tests and stops the cluster after them: a test package's TestMain is
// `os.Exit(kubetest.Main(m))`. A Stop that fails fails the run.
func Main(m *testing.M) int {
	code := m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func (r *running) stop() error {
	err := reap(r.l, r.procs, true)
	r.sp.stop()
	if r.lock != nil {
		_ = unix.Flock(int(r.lock.Fd()), unix.LOCK_UN)
		r.lock.Close()
	}
	if err != nil {
		return fmt.Errorf("kubetest: stopping the cluster: %w", err)
	}
	return nil
}

// lock takes the machine's cluster lock, waiting for another process's cluster to stop.
func lock(logf func(string, ...any)) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return f, nil
	}
	logf("kubetest: waiting for another test process's cluster to stop (%s)", lockPath)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("kubetest: locking %s: %w", lockPath, err)
		}
	}
}

// swapLockedRoot writes root into the held lock file and returns the state directory it named.
func swapLockedRoot(lk *os.File, root string) (string, error) {
	prev, err := io.ReadAll(io.NewSectionReader(lk, 0, 4096))
	if err != nil {
		return "", fmt.Errorf("kubetest: reading %s: %w", lockPath, err)
	}
	if err := lk.Truncate(0); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	if _, err := lk.WriteAt([]byte(root), 0); err != nil {
		return "", fmt.Errorf("kubetest: writing %s: %w", lockPath, err)
	}
	p := strings.TrimSpace(string(prev))
	if !filepath.IsAbs(p) {
		return "", nil
	}
	return filepath.Clean(p), nil
}

// start brings the cluster up, or removes whatever of it had started and says why it did not.
func start(logf func(string, ...any)) (_ *Cluster, _ *running, err error) {
	began := time.Now()
	var marks []string // how long each step took, for the log line that says the cluster is up
	last := began
	mark := func(step string) {
		marks = append(marks, fmt.Sprintf("%s %v", step, time.Since(last).Round(10*time.Millisecond)))
		last = time.Now()
	}
	bin, err := BinDir()
	if err != nil {
		return nil, nil, err
	}
	if err := checkBinaries(bin); err != nil {
		return nil, nil, err
	}
	lk, err := lock(logf)
	if err != nil {
		return nil, nil, err
	}
	l := newLayout(stateRoot())
	run := &running{l: l, lock: lk, sp: newSpawner()}
	prev, err := swapLockedRoot(lk, l.root)
	defer func() {
		if err != nil {
			if rerr := run.stop(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	roots := []string{l.root}
	if prev != "" && prev != l.root {
		roots = append([]string{prev}, roots...) // the last cluster ran under another TMPDIR
	}
	for _, root := range roots {
		old := newLayout(root)
		if x, ferr := find(old); ferr == nil && !x.empty() {
			logf("kubetest: removing what an earlier run left under %s: %v", root, x)
		}
		// Another directory's logs stay for whoever ran it; this one's start afresh.
		if err := reap(old, nil, root != l.root); err != nil {
			return nil, nil, fmt.Errorf("kubetest: removing an earlier run's leftovers: %w", err)
		}
	}
	if err := os.MkdirAll(l.root, 0o700); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	// The directory is under the shared temporary directory: one that another user made first could
	// hold links or swap the keys, tokens and configs written below (the cluster's admin credentials).
	if err := ownDir(l.root); err != nil {
		return nil, nil, err
	}
	for _, d := range []string{l.logs, l.pki, l.bin, l.etcd, l.containerdRoot, l.containerdState,
		l.runcRoot, l.runscRoot, l.cniConf, l.cniIPAM, l.kubeletRoot, l.podLogs, l.volumePlugins,
		l.kubeconfigs, filepath.Join(l.logs, "runsc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, nil, fmt.Errorf("kubetest: %w", err)
		}
	}
	if err := saveSysctls(l.saved); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(l.started, nil, 0o644); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	mark("leftovers")
	c := &Cluster{
		Kubectl: filepath.Join(bin, "kubectl"), Kubeconfig: l.adminKubeconfig,
		HostIP: podGateway, NodeIP: podGateway, PodCIDR: podSubnet,
		Containerd: l.containerdSock, LogDir: l.logs, imported: map[string]string{},
	}
	if err := makeBridge(); err != nil {
		return nil, nil, err
	}

	// Identities: a CA for the API server's certificate and the client certificate it shows
	// kubelet, a token for each component and for the admin (the token auth file), and the
	// service accounts' signing key.
	pk, err := newPKI(l.pki)
	if err != nil {
		return nil, nil, err
	}
	apiCert, apiKey, err := pk.issue("apiserver", "kube-apiserver", nil, true,
		"127.0.0.1", "localhost", podGateway, serviceIP, "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return nil, nil, err
	}
	kcCert, kcKey, err := pk.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false)
	if err != nil {
		return nil, nil, err
	}
	saKey, saPub, err := pk.writeKey("service-account")
	if err != nil {
		return nil, nil, err
	}
	type identity struct{ file, user, groups, tok string }
	ids := []*identity{
		{file: "admin", user: "cordon-kubetest-admin", groups: "system:masters"},
		{file: "controller-manager", user: "system:kube-controller-manager"},
		{file: "scheduler", user: "system:kube-scheduler"},
		{file: "kubelet", user: "system:node:" + NodeName, groups: "system:nodes"},
	}
	var csv strings.Builder
	for i, id := range ids {
		if id.tok, err = token(); err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(&csv, "%s,%s,uid-%d,%q\n", id.tok, id.user, i+1, id.groups)
	}
	if err := os.WriteFile(l.tokens, []byte(csv.String()), 0o600); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}

	ports, err := freePorts(4)
	if err != nil {
		return nil, nil, err
	}
	etcdClient, etcdPeer, apiPort, kubeletPort := ports[0], ports[1], ports[2], ports[3]
	c.APIServer = hostPort("127.0.0.1", apiPort)
	kubeconfig := func(id *identity) (string, error) {
		p := filepath.Join(l.kubeconfigs, id.file+".kubeconfig")
		return p, writeKubeconfig(p, c.APIServer, pk.CAPEM, id.user, id.tok)
	}
	paths := map[string]string{}
	for _, id := range ids {
		if paths[id.file], err = kubeconfig(id); err != nil {
			return nil, nil, err
		}
	}
	c.rest = &rest.Config{Host: "https://" + c.APIServer, BearerToken: ids[0].tok,
		TLSClientConfig: rest.TLSClientConfig{CAData: pk.CAPEM}, QPS: 100, Burst: 200}

	// etcd, on a tmpfs of its own.
	if err := unix.Mount("tmpfs", l.etcd, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1g,mode=0700"); err != nil {
		return nil, nil, fmt.Errorf("kubetest: mounting etcd's tmpfs: %w", err)
	}
	etcdURL := "http://" + hostPort("127.0.0.1", etcdClient)
	peerURL := "http://" + hostPort("127.0.0.1", etcdPeer)
	etcd, err := startProc(run.sp, l.logs, "etcd", "etcd", []string{
		"--name", "cordon-kubetest", "--data-dir", filepath.Join(l.etcd, "data"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "cordon-kubetest=" + peerURL, "--logger", "zap", "--log-level", "warn",
	})
	if err != nil {
		return nil, nil, err
	}
	run.procs = append(run.procs, etcd)
	if err := waitFor("etcd", 30*time.Second, []*proc{etcd}, func() error {
		return httpOK(http.DefaultClient, etcdURL+"/health", "")
	}); err != nil {
		return nil, nil, err
	}
	mark("etcd")

	apiserver, err := startProc(run.sp, l.logs, "kube-apiserver", filepath.Join(bin, "kube-apiserver"), []string{
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(apiPort), "--advertise-address", podGateway,
		"--cert-dir", filepath.Join(l.pki, "apiserver-generated"),
		"--tls-cert-file", apiCert, "--tls-private-key-file", apiKey, "--client-ca-file", pk.CAFile,
		"--token-auth-file", l.tokens,
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", serviceCIDR,
		"--endpoint-reconciler-type", "none",
		"--kubelet-preferred-address-types", "InternalIP",
		"--kubelet-client-certificate", kcCert, "--kubelet-client-key", kcKey,
		"--profiling=false", "--v", "1",
	})
	if err != nil {
		return nil, nil, err
	}
	run.procs = append(run.procs, apiserver)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pk.CAPEM)
	apiHTTP := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitFor("kube-apiserver", 90*time.Second, []*proc{etcd, apiserver}, func() error {
		return httpOK(apiHTTP, "https://"+c.APIServer+"/readyz", ids[0].tok)
	}); err != nil {
		return nil, nil, err
	}
	mark("kube-apiserver")

	kcm, err := startProc(run.sp, l.logs, "kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), []string{
		"--kubeconfig", paths["controller-manager"], "--secure-port", "0", "--leader-elect=false",
		"--use-service-account-credentials", "--service-account-private-key-file", saKey,
		"--root-ca-file", pk.CAFile, "--cluster-name", "cordon-kubetest",
		"--flex-volume-plugin-dir", l.volumePlugins, "--node-monitor-period", "1s",
		"--controllers", strings.Join(controllers, ","), "--v", "1",
	})
	if err != nil {
		return nil, nil, err
	}
	run.procs = append(run.procs, kcm)
	sched, err := startProc(run.sp, l.logs, "kube-scheduler", filepath.Join(bin, "kube-scheduler"), []string{
		"--kubeconfig", paths["scheduler"], "--secure-port", "0", "--leader-elect=false", "--v", "1",
	})
	if err != nil {
		return nil, nil, err
	}
	run.procs = append(run.procs, sched)

	// containerd, with runsc when gVisor's shim is there, of runsc's version and fit for this machine.
	shim, err := gvisorRuntime(l)
	runsc := err == nil
	if err != nil {
		c.RuntimeClassErr = err
		logf("kubetest: no %s RuntimeClass: %v", RuntimeClassName, err)
	} else {
		logf("kubetest: %s RuntimeClass with gVisor's shim %s", RuntimeClassName, shim)
	}
	if err := os.WriteFile(l.containerdConfig, []byte(l.containerdConfigText(runsc)), 0o644); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	cni, err := l.cniConfigText()
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(l.cniConf, "10-"+cniNetwork+".conflist"), cni, 0o644); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	// Its PATH (the last one in its environment wins) starts with the shim adapter's directory.
	containerd, err := startProc(run.sp, l.logs, "containerd", "containerd", []string{"--config", l.containerdConfig},
		"PATH="+l.bin+":/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin")
	if err != nil {
		return nil, nil, err
	}
	run.procs = append(run.procs, containerd)
	if err := waitFor("containerd", 30*time.Second, []*proc{containerd}, func() error {
		out, err := exec.Command("ctr", "-a", l.containerdSock, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	pause, err := pauseImage()
	if err != nil {
		return nil, nil, err
	}
	if err := c.importImage(PauseImage, pause); err != nil {
		return nil, nil, err
	}
	mark("containerd")

	// kubelet. Its PATH leaves out /usr/sbin: with no iptables on it, kubelet leaves the machine's
	// firewall alone (it would add a KUBE-FIREWALL chain to INPUT and OUTPUT, for kube-proxy).
	kcfg, err := l.kubeletConfigText(podGateway, kubeletPort, pk.CAFile)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(l.kubeletConfig, kcfg, 0o644); err != nil {
		return nil, nil, fmt.Errorf("kubetest: %w", err)
	}
	kubelet, err := startProc(run.sp, l.logs, "kubelet", filepath.Join(bin, "kubelet"), []string{
		"--config", l.kubeletConfig, "--kubeconfig", paths["kubelet"], "--root-dir", l.kubeletRoot,
		"--cert-dir", filepath.Join(l.kubeletRoot, "pki"),
		"--node-ip", podGateway, "--hostname-override", NodeName, "--v", "1",
	})
	if err != nil {
		return nil, nil, err
	}
	run.procs = append(run.procs, kubelet)

	cs, err := kubernetes.NewForConfig(c.rest)
	if err != nil {
		return nil, nil, fmt.Errorf("kubetest: client: %w", err)
	}
	ctx := context.Background()
	if runsc {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: RuntimeClassName}, Handler: "runsc"}
		if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("kubetest: creating the %s RuntimeClass: %w", RuntimeClassName, err)
		}
		c.RuntimeClass = RuntimeClassName
	}
	if err := waitFor("node "+NodeName+" Ready and schedulable", 120*time.Second, run.procs, func() error {
		return nodeReady(ctx, cs)
	}); err != nil {
		return nil, nil, fmt.Errorf("%w\nkubelet's log ends:\n%s", err, tail(kubelet.log, 30))
	}
	mark("node ready")
	if err := waitFor("the default ServiceAccount and kube-root-ca.crt", 60*time.Second, run.procs, func() error {
		return namespaceReady(ctx, cs, "default")
	}); err != nil {
		return nil, nil, fmt.Errorf("%w\nkube-controller-manager's log ends:\n%s", err, tail(kcm.log, 30))
	}
	c.Started = time.Since(began)
	mark("namespace ready")
	logf("kubetest: cluster up in %v (%s; API server %s, node IP %s, RuntimeClass %q)", c.Started.Round(time.Millisecond),
		strings.Join(marks, ", "), c.APIServer, c.NodeIP, c.RuntimeClass)
	return c, run, nil
}

// controllers are the controller manager's controllers the cluster runs: what pods, their owners and
// their namespaces need (the garbage collector among them: a run's Secret is owned by its Pod), not
// the ones for volumes, quotas, autoscaling or Services (no kube-proxy runs), which would only make
// the start slower (the controller manager starts them one after the other).
var controllers = []string{
	"garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
	"serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller", "node-lifecycle-controller", "taint-eviction-controller",
	"pod-garbage-collector-controller", "ttl-after-finished-controller", "job-controller",
	"replicaset-controller", "deployment-controller", "service-cidr-controller",
}

// makeBridge creates the pods' bridge with its address before any pod exists, so that a test's
// server can listen on HostIP at once (the CNI plugin adopts a bridge that has its gateway).
func makeBridge() error {
	for _, args := range [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", podGateway + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("kubetest: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// freePorts finds n ports free on every address (the API server's and etcd's on loopback,
// kubelet's on the bridge), by listening and closing: a small window in which another process could
// take one, which a start then reports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("kubetest: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitFor polls cond until it holds, failing as soon as one of watch has exited (with its log).
// Nothing notifies a start's readiness, so it is polled, every 50 ms.
func waitFor(what string, timeout time.Duration, watch []*proc, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		last := cond()
		if last == nil {
			return nil
		}
		for _, p := range watch {
			if err := p.exited(); err != nil {
				return fmt.Errorf("kubetest: waiting for %s: %w", what, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: %s not within %v: %v", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// httpOK says whether GET url answers 200.
func httpOK(hc *http.Client, url, bearer string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// nodeReady says whether the node is Ready and has no taint that keeps pods off it.
func nodeReady(ctx context.Context, cs kubernetes.Interface) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s not Ready: %s", NodeName, cond.Message)
			}
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s has no Ready condition yet", NodeName)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
			return fmt.Errorf("node %s is tainted %s", NodeName, taint.ToString())
		}
	}
	return nil
}

// gvisorRuntime sets containerd up for the runsc handler: runsc (found as cordon's gVisor tier finds
// it), gVisor's containerd shim of the same gVisor version (the stock one, or on a machine that
// refuses a negative oom_score_adj the one ShimBuildCommand patches: findShim, checkShim), and,
// because containerd 1.6 reads a shim's start output as a bare socket address while this shim
// (built on containerd 2's shim library) prints its bootstrap parameters as JSON, a small adapter
// named like the shim that prints the address from them. It returns the shim with what it is, or
// says why there is none.
func gvisorRuntime(l *layout) (string, error) {
	home, _ := os.UserHomeDir()
	rs, err := gvisor.Find("", os.Getenv("PATH"), home, nil)
	if err != nil {
		return "", err
	}
	oomErr := negativeOOMScore()
	shim, err := findShim(rs.Path, rs.Version, oomErr != nil)
	if err != nil {
		return "", err
	}
	bi, err := buildinfo.ReadFile(shim)
	if err != nil {
		return "", fmt.Errorf("gVisor's containerd shim %s: %v: %s", shim, err, shimHowto(rs.Version, oomErr))
	}
	patched, err := checkShim(shim, bi, rs.Version, oomErr)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(l.runscConfig, []byte(l.runscConfigText(rs.Path)), 0o644); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.bin, shimName), []byte(shimAdapter(shim)), 0o755); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	if patched {
		return shim + " (gVisor " + rs.Version + ", patched: oom_score_adj 0, since this machine refuses -999)", nil
	}
	return shim + " (gVisor " + rs.Version + ", stock)", nil
}

// findShim is the shim to check: ShimEnv's; else, where negative scores are refused, the patched
// one's default place; else the stock one beside runsc, or on PATH.
func findShim(runsc, version string, refused bool) (string, error) {
	if p := os.Getenv(ShimEnv); p != "" {
		return p, nil
	}
	if refused {
		dir, err := PatchedShimDir(version)
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, shimName), nil
	}
	shim := filepath.Join(filepath.Dir(runsc), shimName)
	if _, err := os.Stat(shim); err != nil {
		if p, lerr := exec.LookPath(shimName); lerr == nil {
			return p, nil
		}
	}
	return shim, nil
}

// checkShim says whether the shim at path, whose build information is bi, is the patched one, or
// why it cannot run runsc (of gVisor version) here: it is not gVisor's shim, it is of another gVisor
// version, it is the stock one on a machine that refuses a negative oom_score_adj (oomErr says why:
// every pod would fail), or the patched one on a machine that allows it (the stock shim runs there
// unchanged, and the cluster tests it rather than a change of cordon's).
func checkShim(path string, bi *debug.BuildInfo, version string, oomErr error) (patched bool, err error) {
	have, patched := shimVersion(bi)
	howto := shimHowto(version, oomErr)
	switch {
	case have == "":
		return false, fmt.Errorf("%s is not gVisor's containerd shim (its main module is %s %s): %s", path, bi.Main.Path, bi.Main.Version, howto)
	case have != version:
		return false, fmt.Errorf("gVisor's containerd shim %s is of gVisor %s, runsc of %s: %s", path, have, version, howto)
	case oomErr != nil && !patched:
		return false, fmt.Errorf("gVisor's containerd shim %s sets its daemon's oom_score_adj to -999 and gives up when the kernel refuses, and this machine refuses a negative oom_score_adj (%w): %s", path, oomErr, howto)
	case oomErr == nil && patched:
		return false, fmt.Errorf("gVisor's containerd shim %s is patched to leave oom_score_adj at 0, and this machine allows a negative one, so the stock shim runs here unchanged: %s", path, howto)
	}
	return patched, nil
}

// shimVersion is the gVisor version of a shim's build information, and whether it is
// ShimBuildCommand's patched build (gvisor.dev/gvisor replaced, under PatchedShimModule); "" when it
// is neither that nor `go install gvisor.dev/gvisor/shim@VERSION`'s.
func shimVersion(bi *debug.BuildInfo) (version string, patched bool) {
	switch bi.Main.Path {
	case "gvisor.dev/gvisor":
		if bi.Path == "gvisor.dev/gvisor/shim" {
			return bi.Main.Version, false
		}
	case PatchedShimModule:
		for _, d := range bi.Deps {
			if d.Path == "gvisor.dev/gvisor" && d.Replace != nil {
				return d.Version, true
			}
		}
	}
	return "", false
}

// shimHowto says how to get the shim this machine needs.
func shimHowto(version string, oomErr error) string {
	if oomErr != nil {
		return fmt.Sprintf("build the patched one with `%s %s` (or name it in %s)", ShimBuildCommand, version, ShimEnv)
	}
	return fmt.Sprintf("build it with `GOBIN=DIR go install gvisor.dev/gvisor/shim@%s && mv DIR/shim DIR/%s` beside runsc (or name it in %s)", version, shimName, ShimEnv)
}

// negativeOOMScore says why a process here cannot lower its oom_score_adj below 0, if it cannot
// (lowering it takes CAP_SYS_RESOURCE, which some VMs keep out of every process's bounding set). It
// asks the kernel in a child, so that this process's own score is left alone.
func negativeOOMScore() error {
	out, err := exec.Command("/bin/sh", "-c", "echo -999 >/proc/self/oom_score_adj").CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if b, rerr := os.ReadFile("/proc/self/status"); rerr == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
				var bnd uint64
				if _, serr := fmt.Sscanf(strings.TrimSpace(v), "%x", &bnd); serr == nil && bnd&(1<<unix.CAP_SYS_RESOURCE) == 0 {
					msg += " (CAP_SYS_RESOURCE is not in the bounding set)"
				}
			}
		}
	}
	return fmt.Errorf("writing -999 to oom_score_adj: %v: %s", err, msg)
}

// shimName is the binary containerd runs for runtime_type io.containerd.runsc.v1.
const shimName = "containerd-shim-runsc-v1"

// shimAdapter is the shell script containerd runs as gVisor's shim. Every action but start goes to
// the shim unchanged; start's JSON ({"version":2,"address":"unix://…","protocol":"ttrpc"}) is cut
// down to the address containerd 1.6 expects. Anything else is passed on as it is.
func shimAdapter(shim string) string {
	return fmt.Sprintf(`#!/bin/sh
# containerd 1.6 reads a shim's "start" output as its socket's address; gVisor's shim prints
# containerd 2's bootstrap parameters (JSON) instead. Written by internal/kubetest.
shim=%q
for last; do :; done
if [ "$last" != start ]; then
  exec "$shim" "$@"
fi
out=$("$shim" "$@") || { st=$?; printf '%%s' "$out"; exit $st; }
case $out in
'{'*'"address":"'*)
  addr=${out#*'"address":"'}
  printf '%%s\n' "${addr%%%%\"*}" ;;
*)
  printf '%%s\n' "$out" ;;
esac
`, shim)
}

// ownDir refuses dir unless it is a directory (not a link) of this process's uid that nobody else
// may write or list.
func ownDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("kubetest: %s is not a directory", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("kubetest: %s belongs to another user; remove it", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("kubetest: %s is open to other users (mode %v); remove it", dir, fi.Mode().Perm())
	}
	return nil
}
