// Package kubee2e holds the end-to-end tests of the kubernetes backend: cordon's real binary runs
// agents as pods of a real one-node cluster (internal/kubetest: etcd, kube-apiserver, kubelet,
// containerd, runc and a runsc RuntimeClass) and attacks the boundary from inside them. It has no
// code of its own.
package kubee2e
