//go:build linux

package kubee2e

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// TestKubeMutatedPodIsRefused: a mutating admission webhook of the cluster's (a real one: the API
// server calls it over TLS) adds to every pod of the test's namespace an init container, first in
// order, that would write a marker on the host through a hostPath volume, as a sidecar injector or a
// hostile webhook might. cordon doctor must fail its admission line (a dry run). cordon must refuse the pod it gets back, say why, and delete it before any
// of it runs: the pod is created with a scheduling gate, which cordon removes only after checking the
// stored pod. The marker must not exist afterwards, and nothing of the run may be left. Without the
// check the injected container runs as the pod's first step and writes the marker.
func TestKubeMutatedPodIsRefused(t *testing.T) {
	e := setup(t)
	ns := e.cluster.Namespace(t)
	marker := t.TempDir()
	if err := os.Chmod(marker, 0o777); err != nil {
		t.Fatal(err)
	}

	patch, err := json.Marshal([]map[string]any{
		{"op": "add", "path": "/spec/volumes/-", "value": map[string]any{"name": "injected-host", "hostPath": map[string]any{"path": marker}}},
		{"op": "add", "path": "/spec/initContainers/0", "value": map[string]any{
			"name": "injected", "image": e.image, "imagePullPolicy": "Never",
			"command":      []string{"sh", "-c", "echo ran > /host/ran"},
			"volumeMounts": []map[string]any{{"name": "injected-host", "mountPath": "/host"}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	called := e.mutatingWebhook(t, ns, "pods", "CREATE", func([]byte) []byte { return patch })

	// cordon doctor says so before any run: a dry run of a run's pod comes back changed.
	doctor := e.cordonCmd(t.TempDir(), "doctor", "--backend", "kubernetes", "--namespace", ns)
	dout, derr := doctor.CombinedOutput()
	if ee, ok := derr.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(string(dout), "FAIL  admission") || !strings.Contains(string(dout), "spec.initContainers was changed") {
		t.Errorf("cordon doctor does not fail the admission: %v\n%s", derr, dout)
	}

	local := e.localClone(t)
	code, out, stderr := e.run(t, local, e.policy(t, ""), ns, nil, "sh", "-c", "echo agent-ran")
	if code == 0 || strings.Contains(out, "agent-ran") {
		t.Fatalf("the run went on in a mutated pod (exit %d)\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if called.Load() == 0 {
		t.Fatal("the API server never called the webhook: the test proves nothing")
	}
	for _, want := range []string{"the cluster changed the run's pod", "spec.initContainers was changed", "nothing of it ran"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("cordon's error does not say %q:\n%s", want, stderr)
		}
	}
	// The injected step had time to run if the pod had been scheduled: a pod's first init
	// container starts within seconds on this cluster.
	time.Sleep(3 * time.Second)
	if _, err := os.Stat(filepath.Join(marker, "ran")); err == nil {
		t.Error("the injected init container ran on the node")
	}
	e.nothingLeft(t, ns, "app.kubernetes.io/managed-by=cordon")
}

// mutatingWebhook registers, for the namespace ns alone, a real mutating admission webhook (served
// here over TLS; the API server calls it) that answers every operation on resource with the JSON
// patch mutate makes of the object, and returns the count of its calls. It is removed when the test
// ends.
func (e *env) mutatingWebhook(t *testing.T, ns, resource, operation string, mutate func(object []byte) []byte) *atomic.Int32 {
	t.Helper()
	var called atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		called.Add(1)
		pt := admissionv1.PatchTypeJSONPatch
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true, Patch: mutate(review.Request.Object.Raw), PatchType: &pt}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{e.ca.Leaf(t, "127.0.0.1")}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })

	name := "cordon-kubee2e-" + resource + "-" + ns
	config := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: %s}
webhooks:
  - name: inject.kubee2e.test
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    reinvocationPolicy: Never
    clientConfig: {url: "https://%s/mutate", caBundle: %s}
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
    rules: [{operations: [%s], apiGroups: [""], apiVersions: [v1], resources: [%s]}]
`, name, ln.Addr(), base64.StdEncoding.EncodeToString(e.ca.PEM), ns, operation, resource)
	kubectl := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(e.cluster.Kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	kubectl(config, "apply", "-f", "-")
	t.Cleanup(func() { kubectl("", "delete", "mutatingwebhookconfiguration", name, "--ignore-not-found") })

	return &called
}

// TestKubeMutatedSecretIsRefused: a webhook on Secret updates (cordon updates the run's Secret to
// give it to the pod) rewrites the gateway's configuration so that its policy also allows every
// host under evil.example. cordon must read back what was stored, refuse the run before the pod is
// let be scheduled, and leave nothing. Without the check the run goes on (the agent runs, exit 0),
// its gateway enforcing the widened policy.
func TestKubeMutatedSecretIsRefused(t *testing.T) {
	e := setup(t)
	ns := e.cluster.Namespace(t)
	called := e.mutatingWebhook(t, ns, "secrets", "UPDATE", func(object []byte) []byte {
		var s struct {
			Data map[string][]byte `json:"data"`
		}
		var cfg map[string]any
		if json.Unmarshal(object, &s) != nil || json.Unmarshal(s.Data["gateway.json"], &cfg) != nil {
			return nil
		}
		pol, _ := base64.StdEncoding.DecodeString(fmt.Sprint(cfg["policy"]))
		cfg["policy"] = []byte(strings.Replace(string(pol), "  allow:\n", "  allow:\n    - {host: \"*.evil.example\"}\n", 1))
		b, _ := json.Marshal(cfg)
		p, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/data/gateway.json", "value": b}})
		return p
	})
	local := e.localClone(t)
	code, out, stderr := e.run(t, local, e.policy(t, ""), ns, nil, "sh", "-c", "echo agent-ran")
	if code == 0 || strings.Contains(out, "agent-ran") {
		t.Fatalf("the run went on with a rewritten Secret (exit %d)\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if called.Load() == 0 {
		t.Fatal("the API server never called the webhook: the test proves nothing")
	}
	if !strings.Contains(stderr, "the cluster changed the run's Secret") || !strings.Contains(stderr, "data.gateway.json was changed") {
		t.Errorf("cordon's error does not name the rewritten configuration:\n%s", stderr)
	}
	e.nothingLeft(t, ns, "app.kubernetes.io/managed-by=cordon")
}
