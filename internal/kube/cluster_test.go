//go:build linux

package kube

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/kubetest"
	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// clusterClient is a Client of the test cluster in a namespace of its own.
func clusterClient(t *testing.T) (*Client, *kubetest.Cluster) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the test cluster's kubelet and containerd need root")
	}
	cl := kubetest.Start(t)
	c, err := NewClient(ClientOptions{Kubeconfig: cl.Kubeconfig, Namespace: cl.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// TestClientAgainstAPIServer: the client's REST calls, watch, attach and exec against a real API
// server and kubelet: a pod that reads a line from its stdin and answers on stdout and stderr, an
// exec's output and exit code, and the objects deleted.
func TestClientAgainstAPIServer(t *testing.T) {
	c, cl := clusterClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if v, err := c.Version(ctx); err != nil || !strings.HasPrefix(v, "v1.") {
		t.Fatalf("version %q: %v", v, err)
	}
	image := kubetest.AgentImage(t, cl)
	pod := &Pod{
		TypeMeta:   TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: ObjectMeta{Name: "attach-test", Labels: map[string]string{LabelManagedBy: managedBy, LabelRun: "attach-test"}},
		Spec: PodSpec{
			RestartPolicy: "Never",
			Containers: []Container{
				{Name: "main", Image: image, ImagePullPolicy: "Never", Stdin: true, StdinOnce: true,
					Command: []string{"sh", "-c", `read line; echo "out:$line"; echo "err:$line" >&2; read rest || echo "eof"; sleep 30`}},
			},
		},
	}
	if _, _, err := c.createPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	err := c.watchPod(ctx, pod.Name, func(p *Pod) (bool, error) {
		s := containerStatus(p.Status.ContainerStatuses, "main")
		return s != nil && s.State.Running != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncbuf.Buffer
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	done := make(chan error, 1)
	go func() {
		done <- c.attach(actx, pod.Name, "main", streamOptions{Stdin: strings.NewReader("hello\n"), Stdout: &stdout, Stderr: &stderr})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stdout.String(), "eof") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(stdout.String(), "out:hello") || !strings.Contains(stdout.String(), "eof") {
		t.Errorf("attach: stdout %q (the line, then the end of stdin)", stdout.String())
	}
	if !strings.Contains(stderr.String(), "err:hello") {
		t.Errorf("attach: stderr %q", stderr.String())
	}
	var out bytes.Buffer
	err = c.exec(ctx, pod.Name, "main", []string{"sh", "-c", "echo exec-out; exit 3"}, streamOptions{Stdout: &out})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || out.String() != "exec-out\n" {
		t.Errorf("exec: %v, output %q (want exit 3 and exec-out)", err, out.String())
	}
	if err := c.DeleteRun(ctx, "attach-test"); err != nil {
		t.Fatal(err)
	}
	acancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("attach: %v", err)
	}
}

// TestRecoverGatedPod: a pod that a killed cordon left behind its scheduling gate (created, never
// checked and let run) is recovered as one that never ran, at once, not waited for as if its agent
// were running.
func TestRecoverGatedPod(t *testing.T) {
	c, cl := clusterClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runID := "20261201-000000-gated000"
	if _, _, err := c.createPod(ctx, withGate(gatedTestPod(t, cl, runID))); err != nil {
		t.Fatal(err)
	}
	defer c.DeleteRun(context.Background(), runID)
	start := time.Now()
	_, err := c.Recover(ctx, runID, 20*time.Second, io.Discard, io.Discard)
	if !errors.Is(err, ErrNeverRan) || time.Since(start) > 5*time.Second {
		t.Errorf("Recover of a gated pod: %v after %s, want ErrNeverRan at once", err, time.Since(start))
	}
}

// TestUngateKeepsOthersGates: against the real API server, ungate removes cordon's scheduling gate
// and leaves another's (a queue's) in place, so the pod stays held by it.
func TestUngateKeepsOthersGates(t *testing.T) {
	c, cl := clusterClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runID := "20261201-000000-ungate00"
	pod := gatedTestPod(t, cl, runID)
	pod.Spec.SchedulingGates = []SchedulingGate{{Name: "example.com/queue"}}
	gated := withGate(pod)
	if _, _, err := c.createPod(ctx, gated); err != nil {
		t.Fatal(err)
	}
	defer c.DeleteRun(context.Background(), runID)
	if err := c.ungate(ctx, pod.Name, func(stored []byte) error { return admitted(gated, stored) }); err != nil {
		t.Fatal(err)
	}
	p, err := c.getPod(ctx, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.SchedulingGates) != 1 || p.Spec.SchedulingGates[0].Name != "example.com/queue" {
		t.Errorf("gates after ungate: %v, want the queue's alone", p.Spec.SchedulingGates)
	}
}

// gatedTestPod is a one-container pod of run runID that does nothing, with what Render sets that the
// API server would otherwise default (a service-account token's volume above all), so that the
// admission check passes it as stored.
func gatedTestPod(t *testing.T, cl *kubetest.Cluster, runID string) *Pod {
	return &Pod{
		TypeMeta:   TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: ObjectMeta{Name: PodName(runID), Labels: map[string]string{LabelManagedBy: managedBy, LabelRun: runID}},
		Spec: PodSpec{RestartPolicy: "Never", AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(10)), SecurityContext: &PodSecurityContext{FSGroup: ptr(int64(1000))},
			Containers: []Container{{Name: ContainerAgent, Image: kubetest.AgentImage(t, cl), ImagePullPolicy: "Never", Command: []string{"true"}}}},
	}
}
