// Package kube runs one cordon run as a Kubernetes pod: it renders the pod, its Secret and a
// NetworkPolicy from the run's policy (Render), and drives a run through the API server (Client,
// Run): create, attach, wait, collect the changes and the audit log, delete. What runs inside the
// pod is cordon's own binary (package inpod); the names both sides agree on are in kubepod.
//
// The pod is built so that the boundary holds without trusting the cluster beyond the kubelet: the
// agent's container has no capabilities, a read-only root, RuntimeDefault seccomp, no
// service-account token and no service links; its network namespace sends every connection and DNS
// query of every uid but the gateway's to the gateway sidecar, the only container that mounts the
// run's Secret. The NetworkPolicy is defence in depth for clusters that enforce one.
package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// Labels on every object of a run: gc finds leftovers by them.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelRun       = "cordon.dev/run"
	managedBy      = "cordon"
)

// Container names in the run's pod.
const (
	ContainerSetup   = "setup"
	ContainerGateway = "gateway"
	ContainerClone   = "clone"
	ContainerAgent   = "agent"
	ContainerKeeper  = "keeper"
)

// Input is what one run's objects are made from.
type Input struct {
	// RunID is the local run's id; the objects are named after it.
	RunID     string
	Namespace string
	// Image is the agent's (it needs git); CordonImage has cordon's binary at kubepod.BinaryInImage.
	Image, CordonImage string
	RuntimeClass       string
	// Repo and Ref are what the clone step checks out (through the gateway).
	Repo, Ref string
	// Args is the agent's command; Env its whole environment (KEY=VALUE), built from nothing.
	Args []string
	Env  []string
	// AgentUID is who the agent (and the clone step) run as; 0 means kubepod.AgentUID.
	AgentUID int64
	// TTY gives the agent a terminal.
	TTY bool
	// Hostname is the pod's host name.
	Hostname string
	Limits   policy.Limits
	// PinnedAddrs are the addresses the policy pins names to (network.hosts): the NetworkPolicy
	// lets the pod reach them even in private ranges.
	PinnedAddrs []string
	// CloneAuth, when set, has the clone step send a credential's placeholder to the repository.
	CloneAuth *CloneAuth
	// Config is the gateway's configuration; nil renders the Secret without data (cordon kube render).
	Config *kubepod.GatewayConfig
}

// CloneAuth names the credential the clone step presents to the repository: the variable with its
// placeholder and how it is sent (the credential's inject scheme or header).
type CloneAuth struct{ Env, Scheme, Header string }

// Objects are one run's Kubernetes objects.
type Objects struct {
	Secret        *Secret
	Pod           *Pod
	NetworkPolicy *NetworkPolicy
}

// PodName is the name of a run's pod (and, with a suffix, of its Secret and NetworkPolicy).
func PodName(runID string) string { return "cordon-" + strings.ToLower(runID) }

// SecretName is the name of a run's Secret.
func SecretName(runID string) string { return PodName(runID) + "-gateway" }

// gateway's ports inside the pod, all above 1024 so that the gateway needs no capability: the
// redirect sends DNS to DNS whatever port it was for.
func podPorts() (transparent, proxy, dns int32) {
	p := kubepod.Ports()
	return int32(p.Transparent), int32(p.Proxy), int32(p.DNS)
}

// Render builds the run's objects. It refuses what the pod could not hold: no image, a root or
// gateway uid for the agent, no command.
func Render(in *Input) (*Objects, error) {
	switch {
	case in.RunID == "":
		return nil, errors.New("kube: no run id")
	case in.Image == "":
		return nil, errors.New("kube: no agent image (--image or sandbox.kubernetes.image)")
	case in.CordonImage == "":
		return nil, errors.New("kube: no cordon image (--cordon-image or sandbox.kubernetes.cordonImage): an image with cordon's static binary at /cordon")
	case in.Repo == "":
		return nil, errors.New("kube: no repository (--repo)")
	case len(in.Args) == 0:
		return nil, errors.New("kube: no command")
	}
	uid := in.AgentUID
	if uid == 0 {
		uid = kubepod.AgentUID
	}
	if uid < 0 || uid == kubepod.GatewayUID || uid == kubepod.KeeperUID {
		return nil, fmt.Errorf("kube: the agent cannot run as uid %d (0, %d and %d are taken)", uid, kubepod.GatewayUID, kubepod.KeeperUID)
	}
	ref := in.Ref
	if ref == "" {
		ref = "HEAD"
	}
	name := PodName(in.RunID)
	labels := map[string]string{LabelManagedBy: managedBy, LabelRun: strings.ToLower(in.RunID)}
	meta := func(n string) ObjectMeta {
		return ObjectMeta{Name: n, Namespace: in.Namespace, Labels: labels}
	}

	secret := &Secret{
		TypeMeta:   TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta(SecretName(in.RunID)),
		Type:       "Opaque",
	}
	env, values := envVars(in.Env, secret.Name)
	if in.Config != nil {
		data, err := json.Marshal(in.Config)
		if err != nil {
			return nil, fmt.Errorf("kube: gateway config: %w", err)
		}
		secret.Data = map[string][]byte{kubepod.ConfigFile: data}
		for k, v := range values {
			secret.Data[k] = []byte(v)
		}
	} else {
		secret.StringData = map[string]string{kubepod.ConfigFile: "<the gateway's configuration: the policy and the run's credentials, written by cordon run>"}
		for k, v := range values {
			secret.StringData[k] = v
		}
	}

	agentSec := restricted(uid)
	bin := []string{kubepod.Binary}
	cordon := []string{kubepod.BinaryInImage}
	args := func(base []string, sub []string, rest ...string) []string {
		out := append(append([]string{}, base...), sub...)
		return append(out, rest...)
	}
	mnt := func(vol, path string, ro bool) VolumeMount {
		return VolumeMount{Name: vol, MountPath: path, ReadOnly: ro}
	}
	agentMounts := []VolumeMount{
		mnt(volBin, kubepod.BinDir, true),
		mnt(volTrust, kubepod.TrustDir, true),
		mnt(volWorkspace, kubepod.WorkspaceDir, false),
		mnt(volTmp, "/tmp", false),
		mnt(volHome, homeDir, false),
	}
	always := "Always"
	tp, pp, dp := podPorts()

	gatewaySec := restricted(kubepod.GatewayUID)
	setupSec := &SecurityContext{
		RunAsUser:                ptr(int64(0)),
		RunAsNonRoot:             ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		// NET_RAW for gVisor: its netstack has no nf_tables, and the xtables the setup step
		// installs instead travel on a raw socket (netns.InstallPodXT). The step runs cordon's own
		// code and exits before any other container starts.
		Capabilities:   &Capabilities{Drop: []string{"ALL"}, Add: []string{"NET_ADMIN", "NET_RAW"}},
		SeccompProfile: &SeccompProfile{Type: "RuntimeDefault"},
	}
	small := &Resources{Requests: map[string]string{"cpu": "10m", "memory": "32Mi"}}

	init := []Container{
		{
			Name: ContainerSetup, Image: in.CordonImage, ImagePullPolicy: "IfNotPresent",
			TerminationMessagePolicy: fallbackToLogs,
			Command:                  args(cordon, kubepod.SetupArgs, "--gateway-uid", strconv.Itoa(kubepod.GatewayUID), "--copy-to", kubepod.Binary),
			SecurityContext:          setupSec,
			VolumeMounts:             []VolumeMount{mnt(volBin, kubepod.BinDir, false)},
			Resources:                small,
		},
		{
			Name: ContainerGateway, Image: in.CordonImage, ImagePullPolicy: "IfNotPresent",
			TerminationMessagePolicy: fallbackToLogs,
			RestartPolicy:            &always,
			Command:                  args(cordon, kubepod.GatewayArgs, "--config", kubepod.SecretDir+"/"+kubepod.ConfigFile),
			SecurityContext:          gatewaySec,
			VolumeMounts: []VolumeMount{
				mnt(volSecret, kubepod.SecretDir, true),
				mnt(volTrust, kubepod.TrustDir, false),
				mnt(volAudit, kubepod.AuditDir, false),
			},
			Ports: []ContainerPort{
				{Name: "transparent", ContainerPort: tp, Protocol: "TCP"},
				{Name: "proxy", ContainerPort: pp, Protocol: "TCP"},
				{Name: "dns", ContainerPort: dp, Protocol: "UDP"},
			},
			Resources: small,
		},
		{
			Name: ContainerClone, Image: in.Image, ImagePullPolicy: "IfNotPresent",
			Command:                  cloneArgs(args(bin, kubepod.CloneArgs, "--wait-ready", kubepod.TrustDir, "--repo", in.Repo, "--ref", ref, "--dir", kubepod.Checkout), in.CloneAuth),
			WorkingDir:               kubepod.WorkspaceDir,
			Env:                      env,
			SecurityContext:          agentSec,
			VolumeMounts:             agentMounts,
			TerminationMessagePolicy: fallbackToLogs,
		},
	}

	agentArgs := args(bin, kubepod.AgentArgs, "--attach", "--dir", kubepod.Checkout, "--")
	agentArgs = append(agentArgs, in.Args...)
	agent := Container{
		Name: ContainerAgent, Image: in.Image, ImagePullPolicy: "IfNotPresent",
		Command:         agentArgs,
		WorkingDir:      kubepod.Checkout,
		Env:             env,
		SecurityContext: agentSec,
		Stdin:           true, StdinOnce: true, TTY: in.TTY,
		VolumeMounts: append(append([]VolumeMount{}, agentMounts...),
			VolumeMount{Name: volWorkspace, MountPath: kubepod.Checkout + "/.git/hooks", SubPath: "src/.git/hooks", ReadOnly: true},
			VolumeMount{Name: volWorkspace, MountPath: kubepod.Checkout + "/.git/config", SubPath: "src/.git/config", ReadOnly: true},
			mnt(volOut, kubepod.OutDir, false),
		),
		Resources: limitsOf(in.Limits),
	}
	keeper := Container{
		Name: ContainerKeeper, Image: in.CordonImage, ImagePullPolicy: "IfNotPresent",
		Command:         args(cordon, kubepod.KeeperArgs),
		SecurityContext: restricted(kubepod.KeeperUID),
		VolumeMounts:    []VolumeMount{mnt(volOut, kubepod.OutDir, true), mnt(volAudit, kubepod.AuditDir, true)},
		Resources:       small,
	}

	memory := "Memory"
	// limits.disk bounds every volume the agent can write (the workspace, /tmp, the home, the
	// results), each on its own: the kubelet evicts a pod whose emptyDir outgrows its limit.
	agentDir := func(n string) Volume {
		v := &EmptyDirVolumeSource{}
		if in.Limits.Disk > 0 {
			v.SizeLimit = strconv.FormatInt(int64(in.Limits.Disk), 10)
		}
		return Volume{Name: n, EmptyDir: v}
	}
	empty := func(n string) Volume { return Volume{Name: n, EmptyDir: &EmptyDirVolumeSource{}} }
	pod := &Pod{
		TypeMeta:   TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta(name),
		Spec: PodSpec{
			RestartPolicy:                 "Never",
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			Hostname:                      hostname(in.Hostname),
			TerminationGracePeriodSeconds: ptr(int64(10)),
			SecurityContext: &PodSecurityContext{
				SeccompProfile: &SeccompProfile{Type: "RuntimeDefault"},
				FSGroup:        ptr(uid),
			},
			InitContainers: init,
			Containers:     []Container{agent, keeper},
			Volumes: []Volume{
				empty(volBin),
				{Name: volTrust, EmptyDir: &EmptyDirVolumeSource{Medium: memory}},
				empty(volAudit),
				agentDir(volOut),
				agentDir(volWorkspace),
				agentDir(volTmp),
				agentDir(volHome),
				// The gateway's configuration only: the agent's environment, in the same Secret, is
				// no business of the gateway's.
				{Name: volSecret, Secret: &SecretVolumeSource{SecretName: secret.Name, DefaultMode: ptr(int32(0o444)),
					Items: []KeyToPath{{Key: kubepod.ConfigFile, Path: kubepod.ConfigFile}}}},
			},
		},
	}
	if in.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr(in.RuntimeClass)
	}
	if in.Limits.Timeout > 0 {
		// A backstop only: cordon ends the run at its timeout by letting the lease lapse (the
		// wrapper then makes the patch), and a cordon that is gone lets it lapse too. The deadline,
		// which ends every container (the keeper and the results it holds too), comes an hour
		// after both, so that a cordon gc in that hour still recovers the changes.
		s := int64(in.Limits.Timeout.Seconds()) + 3600
		if in.Config != nil {
			s += int64(in.Config.LeaseSeconds)
		}
		pod.Spec.ActiveDeadlineSeconds = &s
	}
	return &Objects{Secret: secret, Pod: pod, NetworkPolicy: networkPolicy(meta(name+"-egress"), labels, in.PinnedAddrs)}, nil
}

// fallbackToLogs makes a step that fails without writing its termination message report the tail
// of its log instead (cordon prints its errors there), so the run's error says what failed.
const fallbackToLogs = "FallbackToLogsOnError"

const (
	volBin       = "cordon-bin"
	volTrust     = "cordon-trust"
	volAudit     = "cordon-audit"
	volOut       = "cordon-out"
	volWorkspace = "workspace"
	volTmp       = "tmp"
	volHome      = "home"
	volSecret    = "cordon-secret"
	homeDir      = "/home/agent"
)

// restricted is the security context of every container but setup: one uid, no capabilities, no
// privilege escalation (no_new_privs: no setuid binary makes it another uid), a read-only root and
// RuntimeDefault seccomp.
func restricted(uid int64) *SecurityContext {
	return &SecurityContext{
		RunAsUser:                ptr(uid),
		RunAsGroup:               ptr(uid),
		RunAsNonRoot:             ptr(true),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Privileged:               ptr(false),
		Capabilities:             &Capabilities{Drop: []string{"ALL"}},
		SeccompProfile:           &SeccompProfile{Type: "RuntimeDefault"},
	}
}

// limitsOf maps the policy's limits to the agent container's resources (requests equal to limits, so
// the scheduler reserves what the policy allows). pids and openFiles have no per-container field:
// the node's settings hold them (the closing note of the kubernetes backend says so).
func limitsOf(l policy.Limits) *Resources {
	rl := map[string]string{}
	if l.Memory > 0 {
		rl["memory"] = strconv.FormatInt(int64(l.Memory), 10)
	}
	if l.CPU > 0 {
		rl["cpu"] = strconv.FormatInt(int64(l.CPU*1000), 10) + "m"
	}
	if len(rl) == 0 {
		return nil
	}
	req := map[string]string{}
	for k, v := range rl {
		req[k] = v
	}
	return &Resources{Limits: rl, Requests: req}
}

// envVars turns KEY=VALUE into the container's env, in order.
// envVars is the agent's environment (KEY=VALUE) as the containers' variables, each taken from a
// key of the Secret named secret, and those keys' values. The values stay out of the pod's spec:
// whoever may read pods in the namespace may not read its Secrets, and a value set inline would be
// expanded by the kubelet ($(NAME) replaced by another variable's value), where a Secret's is passed
// as it is. The keys are envKeyPrefix and the variable's index, since a variable's name may hold
// characters a Secret's key may not; they cannot meet kubepod.ConfigFile.
func envVars(env []string, secret string) ([]EnvVar, map[string]string) {
	out := make([]EnvVar, 0, len(env))
	values := make(map[string]string, len(env))
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		key := envKeyPrefix + strconv.Itoa(i)
		values[key] = v
		out = append(out, EnvVar{Name: k, ValueFrom: &EnvVarSource{SecretKeyRef: &SecretKeySelector{Name: secret, Key: key}}})
	}
	return out, values
}

// envKeyPrefix starts the keys of the run's Secret that hold the agent's environment.
const envKeyPrefix = "env."

func hostname(h string) string {
	if h == "" {
		return "cordon"
	}
	return strings.ToLower(h)
}

// networkPolicy allows the pod's egress only to public addresses (and the addresses the policy pins)
// and to the cluster's DNS, and no ingress: the gateway decides by name, this only keeps a cluster
// that enforces NetworkPolicy from being the one way around it (a pod-level policy cannot tell the
// gateway's container from the agent's; the redirect inside the pod does that).
func networkPolicy(meta ObjectMeta, labels map[string]string, pinned []string) *NetworkPolicy {
	to := []NetworkPolicyPeer{
		{IPBlock: &IPBlock{CIDR: "0.0.0.0/0", Except: []string{
			"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}}},
		{IPBlock: &IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10", "::1/128"}}},
	}
	for _, a := range pinned {
		cidr := a + "/32"
		if strings.Contains(a, ":") {
			cidr = a + "/128"
		}
		to = append(to, NetworkPolicyPeer{IPBlock: &IPBlock{CIDR: cidr}})
	}
	return &NetworkPolicy{
		TypeMeta:   TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta,
		Spec: NetworkPolicySpec{
			PodSelector: LabelSelector{MatchLabels: map[string]string{LabelRun: labels[LabelRun]}},
			PolicyTypes: []string{"Ingress", "Egress"},
			Egress: []NetworkPolicyEgressRule{
				{To: to},
				{
					To: []NetworkPolicyPeer{{NamespaceSelector: &LabelSelector{
						MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
					Ports: []NetworkPolicyPort{{Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 53}},
				},
			},
		},
	}
}

// SandboxTemplate renders the pod as agent-sandbox's SandboxTemplate (extensions.agents.x-k8s.io),
// for clusters that run that project: its warm pools and claims then make cordon's pods.
func SandboxTemplate(o *Objects) (map[string]any, error) {
	spec, err := toMap(o.Pod.Spec)
	if err != nil {
		return nil, err
	}
	meta := map[string]any{"name": o.Pod.Name, "labels": toAny(o.Pod.Labels)}
	if o.Pod.Namespace != "" {
		meta["namespace"] = o.Pod.Namespace
	}
	return map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
		"kind":       "SandboxTemplate",
		"metadata":   meta,
		"spec": map[string]any{
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": toAny(o.Pod.Labels)},
				"spec":     spec,
			},
		},
	}, nil
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func cloneArgs(base []string, a *CloneAuth) []string {
	if a == nil {
		return base
	}
	base = append(base, "--auth-env", a.Env)
	if a.Scheme != "" {
		base = append(base, "--auth-scheme", a.Scheme)
	}
	if a.Header != "" {
		base = append(base, "--auth-header", a.Header)
	}
	return base
}
