package kubetest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// The pods' network: a bridge of its own (not containerd's cni0 or any other), a subnet no other
// part of cordon uses, and a service range that nothing routes (no kube-proxy runs: the API server
// only needs it to allocate the kubernetes Service's address).
const (
	bridgeName  = "cordonkt0"
	podSubnet   = "10.213.0.0/24"
	podGateway  = "10.213.0.1" // the bridge's address: HostIP and NodeIP
	serviceCIDR = "10.213.1.0/24"
	serviceIP   = "10.213.1.1" // the kubernetes Service, in the API server's certificate
	cniNetwork  = "cordon-kubetest"
)

// layout is where everything of one cluster lives, under one state directory, so that a later Start
// finds what a killed run left (processes whose arguments name it, mounts under it).
type layout struct {
	root string

	logs, pki, bin         string
	etcd                   string // a tmpfs: etcd's fsyncs cost nothing
	containerdRoot         string // containerd's root (content, snapshots)
	containerdState        string // containerd's state (tasks' bundles, fifos)
	containerdSock         string
	containerdConfig       string
	runcRoot, runscRoot    string // the runtimes' state directories
	runscConfig            string
	cniConf, cniIPAM       string
	kubeletRoot            string
	kubeletConfig          string
	podLogs, volumePlugins string
	tokens, saved          string // the token auth file; the kernel settings saved before kubelet ran
	started                string // written as the cluster starts: its time tells this cluster's files
	kubeconfigs            string
	adminKubeconfig        string
}

func newLayout(root string) *layout {
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	return &layout{
		root: root, logs: j("logs"), pki: j("pki"), bin: j("bin"), etcd: j("etcd"),
		containerdRoot: j("containerd", "root"), containerdState: j("containerd", "state"),
		containerdSock: j("containerd", "containerd.sock"), containerdConfig: j("containerd", "config.toml"),
		runcRoot: j("runc"), runscRoot: j("runsc"), runscConfig: j("containerd", "runsc.toml"),
		cniConf: j("cni", "net.d"), cniIPAM: j("cni", "ipam"),
		kubeletRoot: j("kubelet"), kubeletConfig: j("kubelet-config.json"),
		podLogs: j("pod-logs"), volumePlugins: j("volume-plugins"),
		tokens: j("pki", "tokens.csv"), saved: j("sysctl.json"), started: j("started"), kubeconfigs: j("kubeconfig"),
		adminKubeconfig: j("kubeconfig", "admin.kubeconfig"),
	}
}

// taskDir is where containerd keeps the bundles of the k8s.io namespace's tasks (one directory per
// container, named by its id, with the OCI config.json).
func (l *layout) taskDir() string {
	return filepath.Join(l.containerdState, "io.containerd.runtime.v2.task", "k8s.io")
}

// writeKubeconfig writes a kubeconfig for server that authenticates with tok and trusts caPEM.
func writeKubeconfig(path, server string, caPEM []byte, user, tok string) error {
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": ContextName,
		"clusters": []any{map[string]any{"name": ContextName, "cluster": map[string]any{
			"server": "https://" + server, "certificate-authority-data": caPEM}}},
		"users":    []any{map[string]any{"name": user, "user": map[string]any{"token": tok}}},
		"contexts": []any{map[string]any{"name": ContextName, "context": map[string]any{"cluster": ContextName, "user": user}}},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("kubetest: kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return nil
}

// containerdConfig is containerd's configuration: its own root, state and socket (nothing under
// /var/lib/containerd or /run/containerd but the shims' sockets, whose directory containerd 1.6
// does not let one choose), the CRI plugin with the pause image, no negative oom_score_adj (this
// kind of VM refuses one), runc as the default runtime and runsc as the "runsc" handler, and the
// CNI configuration of this cluster only.
func (l *layout) containerdConfigText(runsc bool) string {
	s := fmt.Sprintf(`version = 2
root = %q
state = %q
oom_score = 0

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
        SystemdCgroup = false
`, l.containerdRoot, l.containerdState, l.containerdSock, filepath.Join(l.root, "opt"), PauseImage,
		l.cniConf, runcPath, l.runcRoot)
	if runsc {
		s += fmt.Sprintf(`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = %q
`, l.runscConfig)
	}
	return s
}

// runcPath is Debian's runc.
const runcPath = "/usr/sbin/runc"

// runscConfigText is gVisor's shim configuration: which runsc, its state directory, its logs, and
// net-raw, without which runsc strips CAP_NET_RAW from every container, so that a cordon pod's setup
// step could not open the raw socket its xtables rules travel on (netns.InstallPodXT: gVisor's
// netstack has no nf_tables). Every other container of such a pod drops all capabilities.
func (l *layout) runscConfigText(runsc string) string {
	return fmt.Sprintf(`binary_name = %q
root = %q
log_path = %q
log_level = "info"

[runsc_config]
  debug-log = %q
  net-raw = "true"
`, runsc, l.runscRoot, filepath.Join(l.logs, "runsc", "shim-%ID%.log"), filepath.Join(l.logs, "runsc", "%ID%")+"/")
}

// cniConfig is the pods' network: a bridge with the gateway on it (pods reach the machine there),
// host-local addresses kept under the state directory, and no masquerading (pods reach nothing
// beyond the machine).
func (l *layout) cniConfigText() ([]byte, error) {
	cfg := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetwork,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": bridgeName, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": podSubnet, "gateway": podGateway}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": l.cniIPAM,
			},
		}},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("kubetest: CNI config: %w", err)
	}
	return b, nil
}

// kubeletConfigText is kubelet's configuration for a VM with cgroup v1 and no systemd: cgroupfs, no
// per-QoS cgroups or node allocatable enforcement, no swap check; its ports on NodeIP only; the API
// server authenticated by its client certificate and authorized by SubjectAccessReview; no image
// garbage collection or eviction (the images are imported, a pull cannot bring them back, and the
// machine's disk is shared); its pod logs and volume plugins under the state directory.
func (l *layout) kubeletConfigText(nodeIP string, port int, caFile string) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"failCgroupV1":                false,
		"cgroupDriver":                "cgroupfs",
		"cgroupsPerQOS":               false,
		"enforceNodeAllocatable":      []string{},
		"failSwapOn":                  false,
		"address":                     nodeIP,
		"port":                        port,
		"readOnlyPort":                0,
		"healthzPort":                 0,
		"containerRuntimeEndpoint":    "unix://" + l.containerdSock,
		"podLogsDir":                  l.podLogs,
		"volumePluginDir":             l.volumePlugins,
		"resolvConf":                  "/etc/resolv.conf",
		"clusterDomain":               "cluster.local",
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard":                map[string]string{"memory.available": "50Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
		"serializeImagePulls":         false,
		"rotateCertificates":          false,
		"serverTLSBootstrap":          false,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": caFile},
		},
		"authorization":             map[string]any{"mode": "Webhook"},
		"nodeStatusUpdateFrequency": "4s",
		"syncFrequency":             "10s",
		"fileCheckFrequency":        "10s",
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("kubetest: kubelet config: %w", err)
	}
	return b, nil
}

// hostPort joins an address and a port.
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
