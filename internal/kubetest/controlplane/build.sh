#!/usr/bin/env bash
# Builds the Kubernetes components the Kubernetes backend's tests run (kube-apiserver, kube-scheduler,
# kube-controller-manager, kubelet, kubectl) from the Go module proxy into DIR (default: a directory
# beside the module cache, so a machine that keeps its caches builds them once). Prints DIR.
set -euo pipefail
cd "$(dirname "$0")"
version=v1.37.2 # the k8s.io/kubernetes of go.mod
dir="${1:-$(go env GOMODCACHE)/../kube-bin/$version}"
mkdir -p "$dir"
minor=${version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$version"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  if [ -x "$dir/$cmd" ] && [ "$(cat "$dir/.$cmd.version" 2>/dev/null)" = "$version" ]; then
    continue
  fi
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv "$dir/$cmd.tmp" "$dir/$cmd"
  echo "$version" >"$dir/.$cmd.version"
done
echo "$dir"
