//go:build tools

// Package controlplane pins the Kubernetes components that the tests of cordon's Kubernetes backend run
// (kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kubectl). It is a module of its
// own so that cordon's module never depends on k8s.io/kubernetes; build.sh builds the binaries.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
