package kube

// The objects cordon creates and reads, as the Kubernetes API's JSON has them: only the fields cordon
// sets or reads, with the API's own names. They are cordon's and not k8s.io/api's because that
// module, and k8s.io/apimachinery under it, cost every cordon process (each local sandbox's too)
// about 5 MiB of memory at package initialisation (measured: bench/RESULTS.md, "Kubernetes
// backend"). render_test.go decodes every rendered object into k8s.io/api's types with unknown
// fields refused, so a name spelled wrong here fails a test, not a cluster.

// TypeMeta names an object's kind.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ObjectMeta is the metadata cordon sets and reads.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
}

// OwnerReference ties the run's Secret to its pod, for the cluster's garbage collector.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// Secret is the run's gateway configuration.
type Secret struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"`
	StringData map[string]string `json:"stringData,omitempty"`
}

// Pod is the run.
type Pod struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
	Spec       PodSpec   `json:"spec"`
	Status     PodStatus `json:"status"`
}

// PodSpec holds the fields of a pod's spec that the run's pod sets.
type PodSpec struct {
	RestartPolicy                 string              `json:"restartPolicy,omitempty"`
	AutomountServiceAccountToken  *bool               `json:"automountServiceAccountToken,omitempty"`
	EnableServiceLinks            *bool               `json:"enableServiceLinks,omitempty"`
	HostNetwork                   bool                `json:"hostNetwork,omitempty"`
	HostPID                       bool                `json:"hostPID,omitempty"`
	HostIPC                       bool                `json:"hostIPC,omitempty"`
	Hostname                      string              `json:"hostname,omitempty"`
	TerminationGracePeriodSeconds *int64              `json:"terminationGracePeriodSeconds,omitempty"`
	ActiveDeadlineSeconds         *int64              `json:"activeDeadlineSeconds,omitempty"`
	RuntimeClassName              *string             `json:"runtimeClassName,omitempty"`
	SecurityContext               *PodSecurityContext `json:"securityContext,omitempty"`
	InitContainers                []Container         `json:"initContainers,omitempty"`
	Containers                    []Container         `json:"containers"`
	Volumes                       []Volume            `json:"volumes,omitempty"`
	SchedulingGates               []SchedulingGate    `json:"schedulingGates,omitempty"`
}

// SchedulingGate holds a pod back from scheduling until it is removed (GateAdmitted).
type SchedulingGate struct {
	Name string `json:"name"`
}

// PodSecurityContext is the pod-wide security context.
type PodSecurityContext struct {
	SeccompProfile *SeccompProfile `json:"seccompProfile,omitempty"`
	FSGroup        *int64          `json:"fsGroup,omitempty"`
}

// SeccompProfile names a seccomp profile.
type SeccompProfile struct {
	Type string `json:"type"`
}

// Container is one container of the run's pod.
type Container struct {
	Name                     string           `json:"name"`
	Image                    string           `json:"image"`
	ImagePullPolicy          string           `json:"imagePullPolicy,omitempty"`
	Command                  []string         `json:"command,omitempty"`
	WorkingDir               string           `json:"workingDir,omitempty"`
	Env                      []EnvVar         `json:"env,omitempty"`
	Ports                    []ContainerPort  `json:"ports,omitempty"`
	Resources                *Resources       `json:"resources,omitempty"`
	VolumeMounts             []VolumeMount    `json:"volumeMounts,omitempty"`
	RestartPolicy            *string          `json:"restartPolicy,omitempty"`
	SecurityContext          *SecurityContext `json:"securityContext,omitempty"`
	Stdin                    bool             `json:"stdin,omitempty"`
	StdinOnce                bool             `json:"stdinOnce,omitempty"`
	TTY                      bool             `json:"tty,omitempty"`
	TerminationMessagePolicy string           `json:"terminationMessagePolicy,omitempty"`
}

// EnvVar is one variable of a container's environment. The run's pod sets every value from a key
// of its Secret (ValueFrom), never inline: see Render.
type EnvVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value,omitempty"`
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource is where a variable's value comes from.
type EnvVarSource struct {
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// SecretKeySelector is one key of a Secret. Optional is left unset (false): a missing key keeps the
// container from starting rather than starting it without the variable.
type SecretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ContainerPort documents a port the gateway listens on (on the pod's loopback only).
type ContainerPort struct {
	Name          string `json:"name,omitempty"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
}

// Resources are a container's requests and limits, as quantities ("2Gi", "1500m").
type Resources struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

// VolumeMount mounts a volume (or a path of it) into a container.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath,omitempty"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// SecurityContext is a container's.
type SecurityContext struct {
	RunAsUser                *int64          `json:"runAsUser,omitempty"`
	RunAsGroup               *int64          `json:"runAsGroup,omitempty"`
	RunAsNonRoot             *bool           `json:"runAsNonRoot,omitempty"`
	ReadOnlyRootFilesystem   *bool           `json:"readOnlyRootFilesystem,omitempty"`
	AllowPrivilegeEscalation *bool           `json:"allowPrivilegeEscalation,omitempty"`
	Privileged               *bool           `json:"privileged,omitempty"`
	Capabilities             *Capabilities   `json:"capabilities,omitempty"`
	SeccompProfile           *SeccompProfile `json:"seccompProfile,omitempty"`
}

// Capabilities added to and dropped from a container.
type Capabilities struct {
	Add  []string `json:"add,omitempty"`
	Drop []string `json:"drop,omitempty"`
}

// Volume is one of the pod's volumes: an emptyDir or the run's Secret.
type Volume struct {
	Name     string                `json:"name"`
	EmptyDir *EmptyDirVolumeSource `json:"emptyDir,omitempty"`
	Secret   *SecretVolumeSource   `json:"secret,omitempty"`
}

// EmptyDirVolumeSource is a scratch volume of the pod's.
type EmptyDirVolumeSource struct {
	Medium    string `json:"medium,omitempty"`
	SizeLimit string `json:"sizeLimit,omitempty"`
}

// SecretVolumeSource mounts a Secret.
type SecretVolumeSource struct {
	SecretName  string `json:"secretName"`
	DefaultMode *int32 `json:"defaultMode,omitempty"`
	// Items, when set, are the only keys the volume shows.
	Items []KeyToPath `json:"items,omitempty"`
}

// KeyToPath puts one key of a Secret at a path in its volume.
type KeyToPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

// PodStatus is what cordon reads of a pod's status.
type PodStatus struct {
	Phase                 string            `json:"phase,omitempty"`
	Reason                string            `json:"reason,omitempty"`
	Message               string            `json:"message,omitempty"`
	PodIP                 string            `json:"podIP,omitempty"`
	Conditions            []PodCondition    `json:"conditions,omitempty"`
	InitContainerStatuses []ContainerStatus `json:"initContainerStatuses,omitempty"`
	ContainerStatuses     []ContainerStatus `json:"containerStatuses,omitempty"`
}

// PodCondition is one of a pod's conditions (PodScheduled, Ready...).
type PodCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ContainerStatus is what the kubelet says of one container.
type ContainerStatus struct {
	Name                 string         `json:"name"`
	State                ContainerState `json:"state"`
	LastTerminationState ContainerState `json:"lastState"`
	RestartCount         int32          `json:"restartCount"`
	Started              *bool          `json:"started,omitempty"`
}

// ContainerState is one of waiting, running and terminated.
type ContainerState struct {
	Waiting    *ContainerStateWaiting    `json:"waiting,omitempty"`
	Running    *ContainerStateRunning    `json:"running,omitempty"`
	Terminated *ContainerStateTerminated `json:"terminated,omitempty"`
}

// ContainerStateWaiting says why a container has not started.
type ContainerStateWaiting struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ContainerStateRunning is a running container.
type ContainerStateRunning struct {
	StartedAt string `json:"startedAt,omitempty"`
}

// ContainerStateTerminated is how a container ended.
type ContainerStateTerminated struct {
	ExitCode int32  `json:"exitCode"`
	Signal   int32  `json:"signal,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

// NetworkPolicy is the defence-in-depth egress policy of the run's pod.
type NetworkPolicy struct {
	TypeMeta   `json:",inline"`
	ObjectMeta `json:"metadata"`
	Spec       NetworkPolicySpec `json:"spec"`
}

// NetworkPolicySpec selects the run's pod and says where it may connect.
type NetworkPolicySpec struct {
	PodSelector LabelSelector             `json:"podSelector"`
	PolicyTypes []string                  `json:"policyTypes"`
	Egress      []NetworkPolicyEgressRule `json:"egress"`
}

// LabelSelector matches labels exactly.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// NetworkPolicyEgressRule allows connections to some peers (and ports).
type NetworkPolicyEgressRule struct {
	To    []NetworkPolicyPeer `json:"to,omitempty"`
	Ports []NetworkPolicyPort `json:"ports,omitempty"`
}

// NetworkPolicyPeer is an address block or the pods of some namespaces.
type NetworkPolicyPeer struct {
	IPBlock           *IPBlock       `json:"ipBlock,omitempty"`
	NamespaceSelector *LabelSelector `json:"namespaceSelector,omitempty"`
}

// IPBlock is a CIDR less some of it.
type IPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// NetworkPolicyPort is a protocol and port.
type NetworkPolicyPort struct {
	Protocol string `json:"protocol,omitempty"`
	Port     int32  `json:"port,omitempty"`
}

// status is the API's error body (and the exec/attach error channel's message).
type status struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
	Details *struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details,omitempty"`
}

// watchEvent is one line of a watch.
type watchEvent struct {
	Type   string `json:"type"`
	Object Pod    `json:"object"`
}
