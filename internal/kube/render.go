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

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	// Config is the gateway's configuration; nil renders the Secret without data (cordon kube render).
	Config *kubepod.GatewayConfig
}

// Objects are one run's Kubernetes objects.
type Objects struct {
	Secret        *corev1.Secret
	Pod           *corev1.Pod
	NetworkPolicy *networkingv1.NetworkPolicy
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
	meta := func(n string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: n, Namespace: in.Namespace, Labels: labels}
	}

	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta(SecretName(in.RunID)),
		Type:       corev1.SecretTypeOpaque,
	}
	if in.Config != nil {
		data, err := json.Marshal(in.Config)
		if err != nil {
			return nil, fmt.Errorf("kube: gateway config: %w", err)
		}
		secret.Data = map[string][]byte{kubepod.ConfigFile: data}
	} else {
		secret.StringData = map[string]string{kubepod.ConfigFile: "<the gateway's configuration: the policy and the run's credentials, written by cordon run>"}
	}

	env := envVars(in.Env)
	agentSec := restricted(uid)
	bin := []string{kubepod.Binary}
	cordon := []string{kubepod.BinaryInImage}
	args := func(base []string, sub []string, rest ...string) []string {
		out := append(append([]string{}, base...), sub...)
		return append(out, rest...)
	}
	mnt := func(vol, path string, ro bool) corev1.VolumeMount {
		return corev1.VolumeMount{Name: vol, MountPath: path, ReadOnly: ro}
	}
	agentMounts := []corev1.VolumeMount{
		mnt(volBin, kubepod.BinDir, true),
		mnt(volTrust, kubepod.TrustDir, true),
		mnt(volWorkspace, kubepod.WorkspaceDir, false),
		mnt(volTmp, "/tmp", false),
		mnt(volHome, homeDir, false),
	}
	always := corev1.ContainerRestartPolicyAlways
	tp, pp, dp := podPorts()

	gatewaySec := restricted(kubepod.GatewayUID)
	setupSec := &corev1.SecurityContext{
		RunAsUser:                ptr(int64(0)),
		RunAsNonRoot:             ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	small := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
	}

	init := []corev1.Container{
		{
			Name: ContainerSetup, Image: in.CordonImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         args(cordon, kubepod.SetupArgs, "--gateway-uid", strconv.Itoa(kubepod.GatewayUID), "--copy-to", kubepod.Binary),
			SecurityContext: setupSec,
			VolumeMounts:    []corev1.VolumeMount{mnt(volBin, kubepod.BinDir, false)},
			Resources:       small,
		},
		{
			Name: ContainerGateway, Image: in.CordonImage, ImagePullPolicy: corev1.PullIfNotPresent,
			RestartPolicy:   &always,
			Command:         args(cordon, kubepod.GatewayArgs, "--config", kubepod.SecretDir+"/"+kubepod.ConfigFile),
			SecurityContext: gatewaySec,
			VolumeMounts: []corev1.VolumeMount{
				mnt(volSecret, kubepod.SecretDir, true),
				mnt(volTrust, kubepod.TrustDir, false),
				mnt(volAudit, kubepod.AuditDir, false),
			},
			StartupProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: args(cordon, kubepod.ReadyArgs)}},
				PeriodSeconds: 1, FailureThreshold: 60, TimeoutSeconds: 5,
			},
			Ports: []corev1.ContainerPort{
				{Name: "transparent", ContainerPort: tp, Protocol: corev1.ProtocolTCP},
				{Name: "proxy", ContainerPort: pp, Protocol: corev1.ProtocolTCP},
				{Name: "dns", ContainerPort: dp, Protocol: corev1.ProtocolUDP},
			},
			Resources: small,
		},
		{
			Name: ContainerClone, Image: in.Image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:                  args(bin, kubepod.CloneArgs, "--repo", in.Repo, "--ref", ref, "--dir", kubepod.Checkout),
			WorkingDir:               kubepod.WorkspaceDir,
			Env:                      env,
			SecurityContext:          agentSec,
			VolumeMounts:             agentMounts,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
	}

	agentArgs := args(bin, kubepod.AgentArgs, "--attach", "--dir", kubepod.Checkout, "--")
	agentArgs = append(agentArgs, in.Args...)
	agent := corev1.Container{
		Name: ContainerAgent, Image: in.Image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         agentArgs,
		WorkingDir:      kubepod.Checkout,
		Env:             env,
		SecurityContext: agentSec,
		Stdin:           true, StdinOnce: true, TTY: in.TTY,
		VolumeMounts: append(append([]corev1.VolumeMount{}, agentMounts...),
			corev1.VolumeMount{Name: volWorkspace, MountPath: kubepod.Checkout + "/.git/hooks", SubPath: "src/.git/hooks", ReadOnly: true},
			corev1.VolumeMount{Name: volWorkspace, MountPath: kubepod.Checkout + "/.git/config", SubPath: "src/.git/config", ReadOnly: true},
			mnt(volOut, kubepod.OutDir, false),
		),
		Resources: limitsOf(in.Limits),
	}
	keeper := corev1.Container{
		Name: ContainerKeeper, Image: in.CordonImage, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         args(cordon, kubepod.KeeperArgs),
		SecurityContext: restricted(kubepod.KeeperUID),
		VolumeMounts:    []corev1.VolumeMount{mnt(volOut, kubepod.OutDir, true), mnt(volAudit, kubepod.AuditDir, true)},
		Resources:       small,
	}

	memory := corev1.StorageMediumMemory
	workspace := &corev1.EmptyDirVolumeSource{}
	if in.Limits.Disk > 0 {
		workspace.SizeLimit = resource.NewQuantity(int64(in.Limits.Disk), resource.BinarySI)
	}
	vol := func(n string, src corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: src}
	}
	empty := func() corev1.VolumeSource { return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}} }
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta(name),
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			Hostname:                      hostname(in.Hostname),
			TerminationGracePeriodSeconds: ptr(int64(10)),
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				FSGroup:        ptr(uid),
			},
			InitContainers: init,
			Containers:     []corev1.Container{agent, keeper},
			Volumes: []corev1.Volume{
				vol(volBin, empty()),
				vol(volTrust, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: memory}}),
				vol(volAudit, empty()),
				vol(volOut, empty()),
				vol(volWorkspace, corev1.VolumeSource{EmptyDir: workspace}),
				vol(volTmp, empty()),
				vol(volHome, empty()),
				vol(volSecret, corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: secret.Name, DefaultMode: ptr(int32(0o444)),
				}}),
			},
		},
	}
	if in.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr(in.RuntimeClass)
	}
	if in.Limits.Timeout > 0 {
		// The pod's own deadline backs the run's timeout when cordon is gone; cordon ends the run
		// at the timeout itself.
		s := int64(in.Limits.Timeout.Seconds()) + 60
		pod.Spec.ActiveDeadlineSeconds = &s
	}
	return &Objects{Secret: secret, Pod: pod, NetworkPolicy: networkPolicy(meta(name+"-egress"), labels, in.PinnedAddrs)}, nil
}

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
func restricted(uid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr(uid),
		RunAsGroup:               ptr(uid),
		RunAsNonRoot:             ptr(true),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Privileged:               ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		ProcMount:                nil,
	}
}

// limitsOf maps the policy's limits to the agent container's resources (requests equal to limits, so
// the scheduler reserves what the policy allows). pids and openFiles have no per-container field:
// the node's settings hold them (the closing note of the kubernetes backend says so).
func limitsOf(l policy.Limits) corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	if l.Memory > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(l.Memory), resource.BinarySI)
	}
	if l.CPU > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPU*1000), resource.DecimalSI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Limits: rl, Requests: rl.DeepCopy()}
}

// envVars turns KEY=VALUE into the container's env, in order.
func envVars(env []string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	return out
}

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
func networkPolicy(meta metav1.ObjectMeta, labels map[string]string, pinned []string) *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	to := []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{
			"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10", "::1/128"}}},
	}
	for _, a := range pinned {
		cidr := a + "/32"
		if strings.Contains(a, ":") {
			cidr = a + "/128"
		}
		to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta,
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelRun: labels[LabelRun]}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: to},
				{
					To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
			},
		},
	}
}

// SandboxTemplate renders the pod as agent-sandbox's SandboxTemplate (extensions.agents.x-k8s.io),
// for clusters that run that project: its warm pools and claims then make cordon's pods.
func SandboxTemplate(o *Objects) (*unstructured.Unstructured, error) {
	spec, err := toMap(o.Pod.Spec)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
		"kind":       "SandboxTemplate",
		"metadata":   map[string]any{"name": o.Pod.Name, "namespace": o.Pod.Namespace, "labels": toAny(o.Pod.Labels)},
		"spec": map[string]any{
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": toAny(o.Pod.Labels)},
				"spec":     spec,
			},
		},
	}}
	if o.Pod.Namespace == "" {
		unstructured.RemoveNestedField(u.Object, "metadata", "namespace")
	}
	return u, nil
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
