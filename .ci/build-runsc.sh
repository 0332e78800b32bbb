#!/usr/bin/env bash
# Builds runsc (gvisor.dev/gvisor/runsc at VERSION) the way gVisor's own Bazel build does in one
# respect that `go install` cannot: with the Sentry's and the gofer's seccomp programs precompiled
# (runsc/boot/filter and runsc/fsgofer/filter's filter_precompiled.go, which the module ships as
# empty stubs). A `go install`ed runsc builds its host-network Sentry filter at every start (~30 ms of
# the gVisor tier's start, ~10 ms of bare `runsc do`); a release build does not. Nothing else of
# gVisor's source changes: the module is copied from the module cache, the generator
# (.ci/runsc-precompile) turns the two stub files on and registers in them the programs of
# the module's own PrecompiledPrograms, and the copy is built as the main module with
# `-X gvisor.dev/gvisor/runsc/version.version=VERSION`, which `runsc --version` prints and which the
# build information records (cordon reads it there, internal/sandbox/gvisor.ldflagsVersion).
# cordon itself never depends on such a build: whatever runsc a user has is theirs.
#
# Output: DIR/runsc, DIR defaulting to runsc-bin/VERSION-precompiled beside the module cache (a
# machine that keeps its caches builds it once). Prints the binary's path.
set -euo pipefail
version="${1:?usage: build-runsc.sh GVISOR_VERSION [DIR]}"
dir="${2:-$(go env GOMODCACHE)/../runsc-bin/$version-precompiled}"
bin="$dir/runsc"
here="$(cd "$(dirname "$0")" && pwd)"

built() {
  go version -m "$1" 2>/dev/null | awk -v v="$version" '
    $1 == "path" && $2 == "gvisor.dev/gvisor/runsc" { p = 1 }
    $1 == "build" && index($0, "-X gvisor.dev/gvisor/runsc/version.version=" v "\"") { x = 1 }
    END { exit !(p && x) }'
}
if built "$bin"; then
  echo "$bin"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
src="$(cd "$tmp" && go mod download -json "gvisor.dev/gvisor@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
for f in runsc/boot/filter/filter_precompiled.go runsc/fsgofer/filter/filter_precompiled.go; do
  if ! grep -q '^const PrecompilationDisabledAtBuildTime = true$' "$src/$f" 2>/dev/null; then
    echo "build-runsc.sh: gvisor.dev/gvisor@$version has no stub $f (module at '$src'): the generator needs updating" >&2
    exit 1
  fi
done
cp -R "$src" "$tmp/gvisor"
chmod -R u+w "$tmp/gvisor"
mkdir "$tmp/gvisor/runsc/precompilegen"
cp "$here/runsc-precompile/main.go" "$tmp/gvisor/runsc/precompilegen/main.go"
(
  cd "$tmp/gvisor"
  export CGO_ENABLED=0
  go run ./runsc/precompilegen -programs gofer -out runsc/fsgofer/filter/filter_precompiled.go >&2
  go run ./runsc/precompilegen -programs boot -out runsc/boot/filter/filter_precompiled.go >&2
  mkdir -p "$dir"
  # No -trimpath: it drops -ldflags from the build information, where the version is read.
  go build -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$version" -o "$bin.tmp" ./runsc
)
if ! built "$bin.tmp"; then
  echo "build-runsc.sh: the built $bin.tmp does not carry version $version in its build information" >&2
  exit 1
fi
mv "$bin.tmp" "$bin"
echo "$bin"
