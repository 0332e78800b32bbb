#!/bin/sh
# Installs the peers this machine can have (Debian packages, the npm package), builds cordon and runs
# the comparison. A peer that cannot be installed is skipped by the Go program with a message.
set -u
cd "$(dirname "$0")/../.."
need() { command -v "$1" >/dev/null 2>&1; }
if need apt-get; then
	for pkg in bubblewrap firejail socat ripgrep; do
		dpkg -s "$pkg" >/dev/null 2>&1 || apt-get install -y --no-install-recommends --no-upgrade "$pkg" >/dev/null 2>&1 ||
			echo "peers: could not install $pkg" >&2
	done
fi
if ! need srt && need npm; then
	npm install -g @anthropic-ai/sandbox-runtime >/dev/null 2>&1 || echo "peers: could not install the sandbox runtime (srt)" >&2
fi
CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon || exit 1
CGO_ENABLED=0 go run ./bench/peers -cordon bin/cordon "$@"
