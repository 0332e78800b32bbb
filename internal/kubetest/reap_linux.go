//go:build linux

package kubetest

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/mountinfo"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ownExes are the programs of a cluster: a process is the cluster's when its executable is one of
// these and its arguments name the cluster's state directory (each of them is given a path under
// it: a config, a data directory, containerd's socket, runsc's root). Nothing else is ever killed.
var ownExes = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "containerd",
	"containerd-shim-runc-v2", "containerd-shim-runsc-v1", "runsc", "runc",
}

// leftovers is what a cluster has left on the machine, found from its state directory alone (so a
// killed run's are found as well as a stopped one's).
type leftovers struct {
	Procs   []int    // the cluster's own processes (kubelet first)
	Tasks   []string // containerd task ids (pods' containers and sandboxes)
	Cgroups []string // the tasks' cgroup directories, in every hierarchy
	Netns   []string // the pods' network namespaces' files
	Mounts  []string // mount points under the state directory, deepest first
	Bridge  bool     // the CNI bridge exists
}

func (x *leftovers) empty() bool {
	return len(x.Procs) == 0 && len(x.Tasks) == 0 && len(x.Cgroups) == 0 && len(x.Netns) == 0 &&
		len(x.Mounts) == 0 && !x.Bridge
}

func (x *leftovers) String() string {
	return fmt.Sprintf("processes %v, tasks %v, cgroups %v, netns %v, mounts %v, bridge %v",
		x.Procs, x.Tasks, x.Cgroups, x.Netns, x.Mounts, x.Bridge)
}

// find lists what the cluster under l has left.
func find(l *layout) (*leftovers, error) {
	x := &leftovers{}
	var err error
	if x.Procs, err = ownProcs(l.root); err != nil {
		return nil, err
	}
	tasks, err := os.ReadDir(l.taskDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	netns := map[string]bool{}
	for _, e := range tasks {
		x.Tasks = append(x.Tasks, e.Name())
		spec, err := readSpec(filepath.Join(l.taskDir(), e.Name(), "config.json"))
		if err != nil {
			continue // a task being set up or torn down has no config yet or any more
		}
		if spec.Linux.CgroupsPath != "" {
			x.Cgroups = append(x.Cgroups, cgroupDirs(spec.Linux.CgroupsPath)...)
		}
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == "network" && strings.HasPrefix(ns.Path, netnsDir+"/") {
				netns[ns.Path] = true
			}
		}
	}
	// A sandbox whose task is gone may still have its namespace: any of containerd's whose
	// interface is on this cluster's subnet is this cluster's.
	if ents, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "cni-") && onPodSubnet(e.Name()) {
				netns[filepath.Join(netnsDir, e.Name())] = true
			}
		}
	}
	for p := range netns {
		x.Netns = append(x.Netns, p)
	}
	slices.Sort(x.Netns)
	if x.Mounts, err = mountinfo.Under(l.root); err != nil {
		return nil, err
	}
	_, err = os.Stat(filepath.Join("/sys/class/net", bridgeName))
	x.Bridge = err == nil
	return x, nil
}

// netnsDir is where containerd 1.6's CRI plugin pins the pods' network namespaces (fixed in it).
const netnsDir = "/var/run/netns"

// reap removes everything the cluster under l left, and restores the kernel settings kubelet
// changed. keepLogs keeps the log directory (Stop keeps it for a failed test to be read; Start
// starts afresh). children are the processes this process started, to be waited for.
func reap(l *layout, children []*proc, keepLogs bool) error {
	var errs []error
	x, err := find(l)
	if err != nil {
		return err
	}
	// kubelet and containerd first, so that nothing restarts what is being killed; then the
	// containers (their processes are nobody's children once their shims are gone), then the rest.
	kill := func(pids []int) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	first, rest := splitProcs(x.Procs, "kubelet", "containerd")
	kill(first)
	errs = append(errs, waitGone(first, children))
	for range 50 {
		pids := cgroupProcs(x.Cgroups)
		if len(pids) == 0 {
			break
		}
		kill(pids)
		errs = append(errs, waitGone(pids, nil))
	}
	kill(rest)
	errs = append(errs, waitGone(rest, children))
	// Any process started since the scan (a shim that kubelet's last request was starting).
	if late, err := ownProcs(l.root); err == nil && len(late) > 0 {
		kill(late)
		errs = append(errs, waitGone(late, children))
	}
	for _, c := range children {
		<-c.done
	}
	for _, dir := range x.Cgroups {
		_ = os.Remove(dir) // a cgroup directory goes with rmdir, once empty
	}
	for _, id := range x.Tasks {
		_ = os.Remove(shimSocket(l.containerdSock, id))
	}
	for _, ns := range x.Netns {
		if err := unix.Unmount(ns, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("kubetest: unmounting %s: %w", ns, err))
		}
		if err := os.Remove(ns); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("kubetest: %w", err))
		}
	}
	errs = append(errs, unmountAll(l.root))
	if x.Bridge {
		if out, err := exec.Command("ip", "link", "delete", bridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("kubetest: deleting the bridge %s: %v: %s", bridgeName, err, out))
		}
	}
	errs = append(errs, removeCNICache(x.Tasks, startedAt(l)), removeContainerLogLinks(l.podLogs), restoreSysctls(l.saved))
	errs = append(errs, removeHostPaths(), removeState(l, keepLogs))
	return errors.Join(errs...)
}

// ownProcs are the processes of ownExes whose arguments name root.
func ownProcs(root string) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue // gone, or a kernel thread
		}
		if !slices.Contains(ownExes, filepath.Base(strings.TrimSuffix(exe, " (deleted)"))) {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if namesDir(string(cmdline), root) && !dead(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// namesDir says whether a NUL-separated command line names dir or a path under it.
func namesDir(cmdline, dir string) bool {
	for _, a := range strings.Split(cmdline, "\x00") {
		if i := strings.Index(a, dir); i >= 0 {
			rest := a[i+len(dir):]
			if rest == "" || rest[0] == '/' {
				return true
			}
		}
	}
	return false
}

// splitProcs puts the processes whose executable is one of names first.
func splitProcs(pids []int, names ...string) (first, rest []int) {
	for _, pid := range pids {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if slices.Contains(names, filepath.Base(strings.TrimSuffix(exe, " (deleted)"))) {
			first = append(first, pid)
		} else {
			rest = append(rest, pid)
		}
	}
	return first, rest
}

// dead says whether pid is gone or a zombie (killed, not yet reaped by its parent).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	return s[i+2] == 'Z' || s[i+2] == 'X'
}

// waitGone waits until every pid has died (a child of this process is waited for by its proc).
// A SIGKILLed process dies at once, but not synchronously with kill(2): there is nothing to wait
// on for a process that is not a child, so its /proc entry is watched, for at most ten seconds.
func waitGone(pids []int, children []*proc) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for _, c := range children {
			if c.cmd.Process != nil && c.cmd.Process.Pid == pid {
				select {
				case <-c.done:
				case <-time.After(time.Until(deadline)):
				}
			}
		}
		for !dead(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("kubetest: process %d survived SIGKILL", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// ociSpec is the part of an OCI runtime config that says where a container's processes and network
// namespace are.
type ociSpec struct {
	Linux struct {
		CgroupsPath string `json:"cgroupsPath"`
		Namespaces  []struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"namespaces"`
	} `json:"linux"`
}

func readSpec(path string) (*ociSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s ociSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("kubetest: %s: %w", path, err)
	}
	return &s, nil
}

// cgroupDirs is a cgroupfs cgroups path's directory in each hierarchy that has it.
func cgroupDirs(cgroupsPath string) []string {
	if !filepath.IsAbs(cgroupsPath) || strings.Contains(cgroupsPath, "..") {
		return nil
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	var dirs []string
	for _, h := range hier {
		d := filepath.Join(h, cgroupsPath)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// cgroupProcs are the live processes in dirs.
func cgroupProcs(dirs []string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] && !dead(pid) {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// shimSocket is where a containerd 1.6 shim of task id listens (a name derived from containerd's
// socket, under /run/containerd/s, which containerd does not let one move); a killed shim leaves it.
func shimSocket(containerdSock, id string) string {
	d := sha256.Sum256([]byte(filepath.Join(containerdSock, "k8s.io", id)))
	return fmt.Sprintf("/run/containerd/s/%x", d)
}

// onPodSubnet says whether the named network namespace has an address on the pods' subnet.
func onPodSubnet(name string) bool {
	out, err := exec.Command("ip", "-n", name, "-o", "-4", "addr", "show").Output()
	if err != nil {
		return false
	}
	prefix := strings.TrimSuffix(podSubnet, "0/24")
	return strings.Contains(string(out), " inet "+prefix)
}

// unmountAll unmounts everything at or under dir (kubelet's volumes and its root directory's own
// bind mount, containerd's root file systems and sandboxes' shm, etcd's tmpfs).
func unmountAll(dir string) error {
	for range 20 {
		mounts, err := mountinfo.Under(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("kubetest: unmounting %s: %w", m, err)
			}
		}
	}
	mounts, _ := mountinfo.Under(dir)
	return fmt.Errorf("kubetest: still mounted under %s: %v", dir, mounts)
}

// startedAt is when the cluster under l started (its started file's time), zero if unknown.
func startedAt(l *layout) time.Time {
	fi, err := os.Stat(l.started)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// cniCache is libcni's cache directory (fixed in containerd 1.6).
const cniCache = "/var/lib/cni/results"

// removeCNICache removes the CNI results cached for this cluster's network and for the loopback
// of its sandboxes: those of the tasks left, and those containerd 1.6 leaves behind for a sandbox
// torn down while it was being set up (a pod deleted at once), which name a network namespace that
// is gone and were written since this cluster started (started is the time; zero for none).
func removeCNICache(tasks []string, started time.Time) error {
	files, _ := filepath.Glob(filepath.Join(cniCache, cniNetwork+"-*"))
	for _, id := range tasks {
		files = append(files, filepath.Join(cniCache, "cni-loopback-"+id+"-lo"))
	}
	if !started.IsZero() {
		loops, _ := filepath.Glob(filepath.Join(cniCache, "cni-loopback-*-lo"))
		for _, f := range loops {
			if fi, err := os.Stat(f); err == nil && !fi.ModTime().Before(started) && staleLoopback(f) {
				files = append(files, f)
			}
		}
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("kubetest: %w", err))
		}
	}
	return errors.Join(errs...)
}

// staleLoopback says whether a cached loopback result's network namespace is gone.
func staleLoopback(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var cached struct {
		Result struct {
			Interfaces []struct {
				Sandbox string `json:"sandbox"`
			} `json:"interfaces"`
		} `json:"result"`
	}
	if json.Unmarshal(b, &cached) != nil || len(cached.Result.Interfaces) == 0 {
		return false
	}
	for _, i := range cached.Result.Interfaces {
		if !strings.HasPrefix(i.Sandbox, netnsDir+"/") {
			return false
		}
		if _, err := os.Stat(i.Sandbox); err == nil {
			return false
		}
	}
	return true
}

// containerLogLinks is where kubelet links each container's log from (fixed in kubelet).
const containerLogLinks = "/var/log/containers"

// removeContainerLogLinks removes kubelet's links to this cluster's pod logs.
func removeContainerLogLinks(podLogs string) error {
	ents, err := os.ReadDir(containerLogLinks)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(containerLogLinks, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, podLogs+"/") {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("kubetest: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// fixedFiles are what the cluster's programs make at paths they do not let one choose: kubelet's
// device plugin socket. fixedDirs are the directories they make there (and the containers' parent
// cgroup), removed when empty, deepest first: a directory something else has put a file in stays.
var (
	fixedFiles = []string{"/var/lib/kubelet/device-plugins/kubelet.sock"}
	fixedDirs  = []string{
		"/var/lib/kubelet/device-plugins", "/var/lib/kubelet",
		containerLogLinks,
		cniCache, "/var/lib/cni",
		"/run/containerd/s", "/run/containerd",
	}
)

// removeHostPaths removes fixedFiles, and fixedDirs and the k8s.io cgroup (in each hierarchy) when
// they are empty.
func removeHostPaths() error {
	var errs []error
	for _, f := range fixedFiles {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("kubetest: %w", err))
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	for _, d := range append(slices.Clone(fixedDirs), cgroups...) {
		_ = os.Remove(d) // refused while not empty, which is what is wanted
	}
	return errors.Join(errs...)
}

// removeState removes the state directory (but its logs, when keepLogs).
func removeState(l *layout, keepLogs bool) error {
	ents, err := os.ReadDir(l.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(l.root, e.Name())
		if keepLogs && p == l.logs || p == l.saved {
			continue // the saved kernel settings go once restored (restoreSysctls)
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("kubetest: removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// kubeletSysctls are the kernel settings kubelet sets to its liking when it starts (it has no
// switch for leaving them alone, only one for refusing to start): vm.overcommit_memory,
// vm.panic_on_oom, kernel.panic, kernel.panic_on_oops and the root keyring's limits. The machine
// is shared, so they are saved before kubelet runs and put back by Stop.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// saveSysctls records kubeletSysctls' values in path, unless a killed run's record is there (its
// values are the ones from before any kubelet; reap restores and removes it first anyway).
func saveSysctls(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	vals := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return fmt.Errorf("kubetest: reading %s: %w", k, err)
		}
		vals[k] = strings.TrimSpace(string(b))
	}
	b, err := json.Marshal(vals)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return os.WriteFile(path, b, 0o600)
}

// restoreSysctls writes back the values saveSysctls recorded, and removes the record.
func restoreSysctls(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	var vals map[string]string
	if err := json.Unmarshal(b, &vals); err != nil {
		return fmt.Errorf("kubetest: %s: %w", path, err)
	}
	var errs []error
	for _, k := range kubeletSysctls {
		v, ok := vals[k]
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("kubetest: restoring %s=%s: %w", k, v, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(path))
	}
	return errors.Join(errs...)
}
