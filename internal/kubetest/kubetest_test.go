//go:build linux

package kubetest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) {
	os.Exit(Main(m))
}

// runPod creates pod, waits until it has ended and returns its phase and its container's log.
func runPod(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) (corev1.PodPhase, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	created, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	w, err := cs.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: created.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watching pod %s: %v", pod.Name, err)
	}
	defer w.Stop()
	var phase corev1.PodPhase
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watching pod %s: %v", pod.Name, ev.Object)
		}
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			phase = p.Status.Phase
			break
		}
	}
	took := time.Since(began)
	if phase == "" {
		describe(t, cs, pod)
		t.Fatalf("pod %s did not end: %v", pod.Name, ctx.Err())
	}
	logs, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading pod %s's log: %v", pod.Name, err)
	}
	return phase, string(logs), took
}

// describe logs a pod's status and events, for a pod that did not do what it should.
func describe(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		t.Logf("pod %s: phase %s, conditions %+v, containers %+v", pod.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	}
	evs, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod.Name).String()})
	if err == nil {
		for _, e := range evs.Items {
			t.Logf("event: %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
}

// onePod is a pod of one container that runs cmd in image and is not restarted.
func onePod(ns, name, image string, cmd ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullNever, Command: cmd,
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: ptr.To[int64](AgentUID), RunAsGroup: ptr.To[int64](AgentGID), RunAsNonRoot: ptr.To(true),
					ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// TestClusterRunsPod runs the agent image's git and curl as uid 1000 with a read-only root (curl
// reaching a server of the test's on HostIP), under runc and then under the gvisor RuntimeClass,
// whose kernel must be gVisor's (on a machine that refuses a negative oom_score_adj, through the
// patched shim).
func TestClusterRunsPod(t *testing.T) {
	c := Start(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	agent := AgentImage(t, c)

	// A server of the test's on HostIP, which pods must reach.
	ln, err := net.Listen("tcp", net.JoinHostPort(c.HostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "reached the host") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// The same tools run under runc and then under runsc, so that the two times compare.
	tools := "id -u && git --version && curl --version && curl -sS http://" + ln.Addr().String() + "/"
	checkTools := func(runtime, logs string) {
		t.Helper()
		lines := strings.Split(logs, "\n")
		if lines[0] != fmt.Sprint(AgentUID) || !strings.Contains(logs, "git version ") || !strings.Contains(logs, "curl ") ||
			!strings.HasSuffix(logs, "reached the host") {
			t.Fatalf("log under %s does not show uid %d, git, curl and the host's server:\n%s", runtime, AgentUID, logs)
		}
	}
	phase, logs, took := runPod(t, cs, onePod(ns, "agent-tools", agent, "/bin/sh", "-c", tools))
	t.Logf("runc pod create→%s in %v", phase, took.Round(time.Millisecond))
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s, log:\n%s", phase, logs)
	}
	checkTools("runc", logs)

	logFootprint(t)

	// kubectl and the admin kubeconfig work as a user of the cluster would use them.
	out, err := exec.Command(c.Kubectl, "--kubeconfig", c.Kubeconfig, "get", "node", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "node/"+NodeName {
		t.Fatalf("kubectl get node: %v: %s", err, out)
	}

	// runsc is part of the test bed (CI builds it and the shim this machine needs), so a cluster
	// without its RuntimeClass fails here rather than passing on runc alone.
	if c.RuntimeClass != RuntimeClassName {
		t.Fatalf("no %s RuntimeClass: %v", RuntimeClassName, c.RuntimeClassErr)
	}
	pod := onePod(ns, "gvisor-tools", agent, "/bin/sh", "-c", "uname -a && "+tools)
	pod.Spec.RuntimeClassName = ptr.To(c.RuntimeClass)
	phase, logs, took = runPod(t, cs, pod)
	uname, rest, _ := strings.Cut(logs, "\n")
	t.Logf("runsc pod create→%s in %v: %s", phase, took.Round(time.Millisecond), uname)
	if phase != corev1.PodSucceeded {
		t.Fatalf("gvisor pod %s, log:\n%s", phase, logs)
	}
	// gVisor's Sentry reports a kernel of its own (4.19.0-gvisor at this version), not the host's.
	if !strings.HasPrefix(uname, "Linux ") || !strings.Contains(uname, "gvisor") {
		t.Fatalf("uname under %s does not show gVisor's kernel: %s", c.RuntimeClass, logs)
	}
	checkTools("runsc", rest)
}

// TestGarbageCollectorRemovesOwnedSecret: a Secret owned by a Pod goes when the Pod is deleted
// (the Kubernetes backend leaves a run's credentials to the garbage collector should cordon die
// before it cleans up).
func TestGarbageCollectorRemovesOwnedSecret(t *testing.T) {
	c := Start(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, onePod(ns, "owner", AgentImage(t, c), "sleep", "3600"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "owned", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
		}}},
		StringData: map[string]string{"token": "x"},
	}
	secret, err = cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", secret.Name).String(), ResourceVersion: secret.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	began := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			t.Logf("the owned Secret was collected %v after its Pod's deletion", time.Since(began).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("the Secret owned by the deleted Pod is still there: %v", ctx.Err())
}

// logFootprint logs the resident memory of the cluster's processes, by program.
func logFootprint(t *testing.T) {
	t.Helper()
	pids, err := ownProcs(stateRoot())
	if err != nil {
		t.Fatal(err)
	}
	rss := map[string]int64{}
	var total int64
	for _, pid := range pids {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				rss[filepath.Base(exe)] += kb
				total += kb
			}
		}
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(rss)) {
		parts = append(parts, fmt.Sprintf("%s %d MiB", name, rss[name]/1024))
	}
	t.Logf("resident memory: %s; total %d MiB", strings.Join(parts, ", "), total/1024)
}

// TestCordonImage runs a static binary as the cordon image's /cordon, alone in its image, as uid
// 1000 with a read-only root.
func TestCordonImage(t *testing.T) {
	c := Start(t)
	bin := filepath.Join(t.TempDir(), "hello")
	build := exec.Command("go", "build", "-o", bin, "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	ref := CordonImage(t, c, bin)
	if !strings.HasPrefix(ref, "cordon.test/cordon:") {
		t.Fatalf("cordon image named %q", ref)
	}
	ns := c.Namespace(t)
	phase, logs, _ := runPod(t, c.Client(t), onePod(ns, "cordon", ref, "/cordon"))
	if want := fmt.Sprintf("uid %d, write to / refused: true\n", AgentUID); phase != corev1.PodSucceeded || logs != want {
		t.Fatalf("pod %s, log %q, want %q", phase, logs, want)
	}
	if _, err := cordonImage("/usr/bin/git"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("a dynamically linked binary as the cordon image: %v", err)
	}
}
