// Package kubetest runs a real one-node Kubernetes cluster on this machine for the Kubernetes
// backend's tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (runc,
// and runsc for a "gvisor" RuntimeClass) and kubelet, as plain processes started by the test. The
// backend's promise (the agent's pod has no way out but cordon's gateway) is only as good as what it
// is tested against, and an API fake has neither a kubelet that mounts Secrets nor a network
// namespace, so nothing here is simulated.
//
// Start starts the cluster once per test process and hands the same one to every later caller; the
// test package's TestMain calls Stop after m.Run (Main does both). Two test processes on one machine
// (go test runs packages in parallel) take turns: a file lock is held from Start to Stop, and a
// second process's Start waits for it. Everything the cluster leaves on the
// machine (processes, mounts under the state directory, the CNI bridge, the pods' network
// namespaces, the kernel settings kubelet changes) is removed by Stop, and again by the next Start
// when a run was killed before it could stop.
//
// No image registry is reachable: images are built here (CordonImage, AgentImage, the pause image)
// with go-containerregistry and imported into containerd; pods use imagePullPolicy Never.
//
// The Kubernetes binaries are built by internal/kubetest/controlplane/build.sh (a module of its own,
// so that cordon does not depend on k8s.io/kubernetes) into a directory beside the module cache, or
// the one CORDON_KUBE_BIN names. The package is imported by tests only.
//
// The "gvisor" RuntimeClass runs gVisor's containerd shim at runsc's version, which CORDON_RUNSC_SHIM
// names (ShimEnv). The stock shim sets its daemon's oom_score_adj to -999 and fails every pod when
// the kernel refuses, and some machines refuse any negative score (CAP_SYS_RESOURCE is not in the
// bounding set of the VM this test bed was built on). There, and only there, the cluster runs the
// shim that internal/kubetest/controlplane/build-shim.sh builds from the module's source with that
// one constant set to 0 (containerd's restrict_oom_score_adj, which the cluster sets, is the same
// accommodation for runc); on a machine that allows negative scores the stock shim is used
// unchanged, and the patched one is refused. The binary's build information says which it is.
package kubetest
