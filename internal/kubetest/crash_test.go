//go:build linux

package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// crashHelperEnv makes TestCrashHelper, run in a child of TestStartAfterCrash, start a cluster
// with a running pod and then wait to be killed.
const crashHelperEnv = "KUBETEST_CRASH_HELPER"

// crashReady is the line the helper prints once its pod runs.
const crashReady = "KUBETEST-CRASH-HELPER-READY"

func TestCrashHelper(t *testing.T) {
	if os.Getenv(crashHelperEnv) == "" {
		t.Skip("run by TestStartAfterCrash")
	}
	c := Start(t)
	cs := c.Client(t)
	pod := onePod("default", "crashed", AgentImage(t, c), "sleep", "3600")
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor("the pod running", 2*time.Minute, nil, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s", p.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fmt.Println(crashReady)
	select {} // killed here
}

// sysctls reads kubeletSysctls.
func sysctls(t *testing.T) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			t.Fatal(err)
		}
		vals[k] = strings.TrimSpace(string(b))
	}
	return vals
}

// quietSysctls is sysctls read while no test process's cluster runs on the machine: under the
// machine's cluster lock, which another package's cluster (go test runs packages side by side) holds
// while its kubelet has the settings changed.
func quietSysctls(t *testing.T) map[string]string {
	t.Helper()
	lk, err := lock(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = unix.Flock(int(lk.Fd()), unix.LOCK_UN)
		lk.Close()
	}()
	return sysctls(t)
}

// TestStartAfterCrash kills a test process whose cluster runs a pod, and checks that the next Start
// works and that Stop then leaves nothing of either cluster on the machine: no process, mount,
// network namespace, bridge, cgroup or fixed-path file, and the kernel settings as they were.
func TestStartAfterCrash(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("kubetest: a cluster needs root")
	}
	if err := Stop(); err != nil { // a cluster an earlier test of this process started
		t.Fatal(err)
	}
	before := quietSysctls(t)
	var existed []string // fixed paths that were there before any cluster of this test
	for _, p := range append(slices.Clone(fixedFiles), fixedDirs...) {
		if _, err := os.Stat(p); err == nil {
			existed = append(existed, p)
		}
	}

	child := exec.Command(os.Args[0], "-test.run", "^TestCrashHelper$", "-test.v", "-test.timeout", "5m")
	child.Env = append(os.Environ(), crashHelperEnv+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = child.Stdout
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	var seen strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(&seen, sc.Text())
			if sc.Text() == crashReady {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("the helper ended before its pod ran: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = child.Wait()
			t.Fatalf("%v; its output:\n%s", err, seen.String())
		}
	case <-time.After(4 * time.Minute):
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("the helper's pod did not run; its output:\n%s", seen.String())
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	l := newLayout(stateRoot())
	left, err := find(l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the killed run left: %v", left)
	// What the killed run must have left for this test to mean anything: its pod's containers, its
	// network namespace, mounts and the bridge.
	if len(left.Tasks) == 0 || len(left.Netns) == 0 || len(left.Mounts) == 0 || !left.Bridge {
		t.Fatalf("the killed run left less than a running pod leaves: %v", left)
	}
	// Its control plane died with it (PR_SET_PDEATHSIG); only the shims and containers stay.
	for _, pid := range left.Procs {
		// A process whose exe no longer reads is on its way out (the death signal landed, it is not
		// reaped yet): it is judged once it is gone or has shown what it runs.
		var exe string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var err error
			exe, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err == nil || time.Now().After(deadline) {
				break
			}
			// Gone, or dead and waiting to be reaped (state Z or X in /proc/PID/stat, after the ")").
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if i := bytes.LastIndexByte(stat, ')'); err != nil || i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
				exe = "gone"
				break
			}
		}
		if exe == "gone" {
			continue
		}
		if b := filepath.Base(exe); !slices.Contains([]string{"containerd-shim-runc-v2", "containerd-shim-runsc-v1", "runsc"}, b) {
			t.Errorf("process %d (%s) outlived the killed test process", pid, exe)
		}
	}

	c := Start(t)
	cs := c.Client(t)
	phase, logs, _ := runPod(t, cs, onePod("default", "after-crash", AgentImage(t, c), "echo", "ok"))
	if phase != corev1.PodSucceeded || strings.TrimSpace(logs) != "ok" {
		t.Fatalf("a pod after the crash: %s, %q", phase, logs)
	}
	for _, ns := range left.Netns {
		if _, err := os.Stat(ns); err == nil {
			t.Errorf("the killed run's network namespace %s is still there", ns)
		}
	}

	if err := Stop(); err != nil {
		t.Fatal(err)
	}
	after, err := find(l)
	if err != nil {
		t.Fatal(err)
	}
	if !after.empty() {
		t.Errorf("Stop left: %v", after)
	}
	for _, p := range append(slices.Clone(fixedFiles), fixedDirs...) {
		if _, err := os.Stat(p); err == nil && !slices.Contains(existed, p) {
			t.Errorf("Stop left %s", p)
		}
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io"); len(cg) > 0 {
		t.Errorf("Stop left the cgroups %v", cg)
	}
	ents, _ := os.ReadDir(l.root)
	for _, e := range ents {
		if e.Name() != "logs" {
			t.Errorf("Stop left %s in the state directory", e.Name())
		}
	}
	if got := quietSysctls(t); !maps.Equal(got, before) {
		t.Errorf("kernel settings after Stop %v, before the first start %v", got, before)
	}
}
