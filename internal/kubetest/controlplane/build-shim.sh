#!/usr/bin/env bash
# Builds gVisor's containerd shim (gvisor.dev/gvisor/shim at VERSION, runsc's) with one change: it
# leaves its daemon's oom_score_adj at 0 instead of setting -999 (oomScoreMax in
# pkg/shim/v1/manager.go), for a machine that refuses a negative oom_score_adj (no CAP_SYS_RESOURCE
# in the bounding set, as on some VMs), where the stock shim gives up on every pod. It is what
# containerd's restrict_oom_score_adj does for runc there. A machine that allows negative scores
# uses the stock shim (internal/kubetest refuses this one there).
#
# The module's source is copied from the module cache, patched (the build fails if the line is not
# there as expected) and built as the dependency of a main module named runsc-shim-restricted-oom,
# so that the binary's build information says both that it is patched and which gVisor it is
# (internal/kubetest reads it). Output: DIR/containerd-shim-runsc-v1, DIR defaulting to
# runsc-shim-restricted-oom/VERSION beside the module cache (a machine that keeps its caches builds
# it once). Prints the binary's path.
set -euo pipefail
version="${1:?usage: build-shim.sh GVISOR_VERSION [DIR]}"
dir="${2:-$(go env GOMODCACHE)/../runsc-shim-restricted-oom/$version}"
bin="$dir/containerd-shim-runsc-v1"
main=runsc-shim-restricted-oom # internal/kubetest.PatchedShimModule

built() {
  go version -m "$1" 2>/dev/null | awk -v main="$main" -v v="$version" '
    $1 == "path" && $2 == main { m = 1 }
    $1 == "dep" && $2 == "gvisor.dev/gvisor" && $3 == v { d = 1 }
    END { exit !(m && d) }'
}
if built "$bin"; then
  echo "$bin"
  exit 0
fi

src="$(go mod download -json "gvisor.dev/gvisor@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ ! -f "$src/pkg/shim/v1/manager.go" ]; then
  echo "build-shim.sh: gvisor.dev/gvisor@$version has no pkg/shim/v1/manager.go (module at '$src')" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
cp -R "$src" "$tmp/gvisor"
chmod -R u+w "$tmp/gvisor"

# The one change, checked before and after: exactly one line sets the score, and it then says 0.
manager="$tmp/gvisor/pkg/shim/v1/manager.go"
want='^	oomScoreMax = -999$'
if [ "$(grep -c "$want" "$manager")" != 1 ]; then
  echo "build-shim.sh: $manager (gVisor $version) does not have exactly one line 'oomScoreMax = -999': the patch needs updating" >&2
  exit 1
fi
sed -i "s/$want/	oomScoreMax = 0 \/\/ patched by cordon's build-shim.sh: this machine refuses a negative oom_score_adj/" "$manager"
if [ "$(grep -c '^	oomScoreMax = 0 ' "$manager")" != 1 ] || grep -q -- '-999' "$manager"; then
  echo "build-shim.sh: patching $manager did not leave exactly oomScoreMax = 0" >&2
  exit 1
fi

goversion="$(awk '$1 == "go" {print $2; exit}' "$tmp/gvisor/go.mod")"
mkdir "$tmp/$main"
cat >"$tmp/$main/go.mod" <<EOF
module $main

go $goversion

require gvisor.dev/gvisor $version

replace gvisor.dev/gvisor $version => ../gvisor
EOF
cp "$tmp/gvisor/go.sum" "$tmp/$main/go.sum"
cat >"$tmp/$main/main.go" <<'EOF'
// Binary containerd-shim-runsc-v1 is gVisor's containerd shim (gvisor.dev/gvisor/shim's main) built
// from a copy of gVisor whose shim leaves its daemon's oom_score_adj at 0 (build-shim.sh).
package main

import "gvisor.dev/gvisor/shim/v1/cli"

func main() {
	cli.Main()
}
EOF
mkdir -p "$dir"
(cd "$tmp/$main" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" .)
if ! built "$bin.tmp"; then
  echo "build-shim.sh: $bin.tmp's build information does not name $main and gvisor.dev/gvisor $version" >&2
  go version -m "$bin.tmp" >&2 || true
  exit 1
fi
mv "$bin.tmp" "$bin"
echo "$bin"
