//go:build linux

package kubee2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cordon-sandbox/cordon/internal/benchstat"
)

// BenchmarkKubeRunAgainstPod runs, round by round, a bare pod of the agent's image running `true`
// (create, Succeeded, delete: what any pod costs on this cluster) and `cordon run --backend
// kubernetes -- true` (the Secret, the pod with its setup, gateway, clone and keeper, the attach, the
// fetch, the deletion), and reports the median of the per-round ratios:
//
//	go test -run '^$' -bench KubeRunAgainstPod -benchtime 8x ./internal/kube/kubee2e/
func BenchmarkKubeRunAgainstPod(b *testing.B) {
	e := setup(b)
	ns := "default"
	cs := e.cluster.Client(b)
	local := e.localClone(b)
	pol := e.policy(b, "")
	var bare, cordon, ratios []float64
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		name := fmt.Sprintf("bare-%d", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: e.image, ImagePullPolicy: corev1.PullNever, Command: []string{"true"},
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(1000))}}},
		}}
		ctx := context.Background()
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if p.Status.Phase == corev1.PodSucceeded {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		d1 := time.Since(start).Seconds()

		start = time.Now()
		cmd := e.runCmd(local, pol, ns, nil, "true")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("cordon: %v\n%s", err, out)
		}
		d2 := time.Since(start).Seconds()
		bare, cordon, ratios = append(bare, d1), append(cordon, d2), append(ratios, d2/d1)
	}
	b.ReportMetric(benchstat.Median(bare), "s/bare-pod")
	b.ReportMetric(benchstat.Median(cordon), "s/cordon-run")
	b.ReportMetric(benchstat.Median(ratios), "ratio")
}
