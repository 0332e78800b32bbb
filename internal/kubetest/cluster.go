package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// KubeVersion is the Kubernetes release the binaries must be: the k8s.io/kubernetes that
// internal/kubetest/controlplane/go.mod pins and build.sh stamps into each binary's version file.
const KubeVersion = "v1.37.2"

// BinEnv names the directory of the Kubernetes binaries when set; BuildCommand builds them.
const (
	BinEnv       = "CORDON_KUBE_BIN"
	BuildCommand = "internal/kubetest/controlplane/build.sh"
)

// ShimEnv names gVisor's containerd shim (containerd-shim-runsc-v1 at runsc's gVisor version), the
// one variable that picks it. Unset, the shim is looked for where it is built: on a machine that
// allows a negative oom_score_adj, the stock one (gvisor.dev/gvisor/shim) beside runsc or on PATH;
// on one that refuses it, ShimBuildCommand's (PatchedShimDir).
const ShimEnv = "CORDON_RUNSC_SHIM"

// ShimBuildCommand builds gVisor's shim with the one change a machine that refuses a negative
// oom_score_adj needs: the stock shim sets its daemon's score to -999 and gives up on every pod when
// the kernel refuses, the patched one leaves it at 0 (what containerd's restrict_oom_score_adj does
// for runc). Its binary's main module is PatchedShimModule, with gvisor.dev/gvisor at runsc's
// version replaced by the patched copy; that is how the cluster tells the two apart.
const (
	ShimBuildCommand  = "internal/kubetest/controlplane/build-shim.sh"
	PatchedShimModule = "runsc-shim-restricted-oom"
)

// The names the cluster gives what it makes, so that tests can refer to them.
const (
	// NodeName is the one node's name.
	NodeName = "cordon-kubetest"
	// ContextName is the admin kubeconfig's context (and cluster and user) name.
	ContextName = "cordon-kubetest"
	// RuntimeClassName is the RuntimeClass whose handler is runsc.
	RuntimeClassName = "gvisor"
	// PauseImage is the sandbox image containerd starts each pod with (the name kubeadm gives
	// kubelet v1.37's: containerd is configured with it, and the image is built and imported here).
	PauseImage = "registry.k8s.io/pause:3.10.2"
)

// Cluster is a running one-node cluster. Its fields are read-only.
type Cluster struct {
	// Kubeconfig is an admin kubeconfig file (a token in system:masters), its context ContextName.
	Kubeconfig string
	// Kubectl is kubectl's path (the same release as the cluster).
	Kubectl string
	// APIServer is the API server's host:port (HTTPS, on loopback).
	APIServer string
	// HostIP is the address pods reach this machine at: the pod bridge's own address, which the
	// pods' default route goes through. A server a test starts for its pods listens there.
	HostIP string
	// NodeIP is the node's InternalIP (kubelet listens there, and the API server connects to it for
	// logs, exec and attach). It is HostIP: the bridge is the node's own network.
	NodeIP string
	// PodCIDR is the pods' subnet on the bridge.
	PodCIDR string
	// RuntimeClass is RuntimeClassName when pods can run under runsc, else "" with the reason in
	// RuntimeClassErr.
	RuntimeClass    string
	RuntimeClassErr error
	// Containerd is containerd's socket (for ctr -a).
	Containerd string
	// LogDir holds each component's log; it is kept after Stop for a failed run to be read.
	LogDir string
	// Started says how long the start took, from Start's call to a Ready node.
	Started time.Duration

	rest *rest.Config

	mu       sync.Mutex
	imported map[string]string // ref → image digest imported
}

// RESTConfig is a client configuration with the admin's rights (a copy the caller may change).
func (c *Cluster) RESTConfig() *rest.Config {
	return rest.CopyConfig(c.rest)
}

// Client is a clientset with the admin's rights.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatalf("kubetest: client: %v", err)
	}
	return cs
}

// Namespace creates a namespace for the test alone (deleted when the test ends, with what is in
// it) and waits until pods can be created there. It returns its name.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	cs := c.Client(t)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubetest-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// The controller manager makes the ServiceAccount and the ConfigMap; nothing says when.
	deadline := time.Now().Add(time.Minute)
	for {
		err := namespaceReady(ctx, cs, ns.Name)
		if err == nil {
			return ns.Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: namespace %s not ready for pods: %v", ns.Name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// namespaceReady says whether pods can be created in ns: its default ServiceAccount exists (the
// ServiceAccount admission refuses a pod without it) and so does the kube-root-ca.crt ConfigMap
// (kubelet will not start a pod whose token volume lacks it).
func namespaceReady(ctx context.Context, cs kubernetes.Interface, ns string) error {
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
		return err
	}
	return nil
}

// binaries are the Kubernetes programs the cluster runs (and kubectl).
var binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"}

// BinDir is where the Kubernetes binaries are looked for: CORDON_KUBE_BIN, else build.sh's default
// (kube-bin/KubeVersion beside the module cache).
func BinDir() (string, error) {
	if d := os.Getenv(BinEnv); d != "" {
		return filepath.Abs(d)
	}
	cache, err := modCache()
	if err != nil {
		return "", fmt.Errorf("kubetest: no module cache to find the Kubernetes binaries beside (set %s): %w", BinEnv, err)
	}
	return filepath.Clean(filepath.Join(cache, "..", "kube-bin", KubeVersion)), nil
}

// PatchedShimDir is where ShimBuildCommand puts the patched shim of gVisor version by default
// (runsc-shim-restricted-oom/VERSION beside the module cache).
func PatchedShimDir(version string) (string, error) {
	cache, err := modCache()
	if err != nil {
		return "", fmt.Errorf("kubetest: no module cache to find the patched gVisor shim beside (set %s): %w", ShimEnv, err)
	}
	return filepath.Clean(filepath.Join(cache, "..", PatchedShimModule, version)), nil
}

// modCache is the Go module cache's directory, which the built binaries are kept beside.
func modCache() (string, error) {
	if cache := os.Getenv("GOMODCACHE"); cache != "" {
		return cache, nil
	}
	// go env knows the go.env and `go env -w` settings too.
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if cache := strings.TrimSpace(string(out)); cache != "" {
			return cache, nil
		}
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		gopath = filepath.Join(home, "go")
	}
	return filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod"), nil
}

// checkBinaries says which binary is missing or of another release, and how to build them.
func checkBinaries(dir string) error {
	for _, b := range binaries {
		p := filepath.Join(dir, b)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("kubetest: %s is missing: build the Kubernetes binaries with `%s` (or name their directory in %s)", p, BuildCommand, BinEnv)
		}
		v, err := os.ReadFile(filepath.Join(dir, "."+b+".version"))
		if err != nil || strings.TrimSpace(string(v)) != KubeVersion {
			return fmt.Errorf("kubetest: %s is not %s (its version file says %q): rebuild with `%s`", p, KubeVersion, strings.TrimSpace(string(v)), BuildCommand)
		}
	}
	return nil
}
