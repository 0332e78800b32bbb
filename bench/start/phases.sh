#!/bin/sh
# phases.sh: where the time of `cordon run -- true` goes, from syscall tracepoints (perf trace), over
# N runs; per phase the minimum (the run least disturbed by other jobs on a shared machine) and the
# median, in ms. Needs perf and root (tracepoints).
#
#	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && sh bench/start/phases.sh bin/cordon 20
set -eu
cordon=$(realpath "$1")
n=${2:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/project"
cd "$tmp/project"
export XDG_STATE_HOME="$tmp/state"
"$cordon" run -- true | cat # the first run makes the state directory
i=0
while [ "$i" -lt "$n" ]; do
	# Output to a pipe, as bench/start has it: a file would be relayed, and cordon's exit would wait
	# for init's teardown to close it.
	perf trace -o "$tmp/t$i" -e execve,clone,write,pivot_root,exit_group -- "$cordon" run -- true | cat
	i=$((i + 1))
done
# Each trace line: "START ( DUR ms): COMM/PID syscall(args) = ret". A phase ends at a syscall's end.
for f in "$tmp"/t*; do
	awk '
	$1 ~ /^[0-9.]+$/ {
		t = $1
		if (match($0, /\( *[0-9.]+ ms\)/)) { d = substr($0, RSTART + 1, RLENGTH - 5); t += d }
		who = ""; call = ""
		for (i = 2; i <= NF; i++) if ($i ~ /^[A-Za-z0-9_.-]+\/[0-9]+$/) { who = $i; call = $(i + 1); break }
		sub(/\/.*/, "", who)
		if (call ~ /^clone/ && /NEWPID/ && !cl) cl = t
		if (who == "exe" && call ~ /^execve/ && !ie) ie = t
		if (who ~ /^cordon/ && call ~ /^write/ && / count: [0-9][0-9][0-9][0-9]+/ && !cf) cf = t
		if (who == "true" && call ~ /^execve/ && !te) te = t
		if (who == "true" && call ~ /^exit_group/) tx = $1
		if (who ~ /^cordon/ && call ~ /^exit_group/) cx = $1
	}
	END {
		if (cl && ie && cf && te && tx && cx)
			printf "%.2f %.2f %.2f %.2f %.2f %.2f %.2f\n", cl, ie - cl, cf - cl, 0, te - (cf > ie ? cf : ie), tx - te, cx - tx
	}' "$f"
done >"$tmp/phases"
awk -v n="$(wc -l <"$tmp/phases")" '
BEGIN {
	name[1] = "exec of cordon -> init cloned (runtime start, policy, checks, clone)"
	name[2] = "init cloned -> init exec done"
	name[3] = "init cloned -> config written (cordon: run state, workspace, scan, spec)"
	name[4] = "config and init ready -> command exec done (root, Landlock, seccomp; waits for init)"
	name[5] = "command exec -> command exit (true)"
	name[6] = "command exit -> cordon exit (status, finish)"
}
{ for (i = 1; i <= 7; i++) v[i, NR] = $i }
END {
	printf "%d traced runs; ms: min median\n", n
	split("1 2 3 5 6 7", col, " ")
	for (k = 1; k <= 6; k++) {
		c = col[k]; m = 0
		for (r = 1; r <= n; r++) s[r] = v[c, r]
		for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (s[b] < s[a]) { x = s[a]; s[a] = s[b]; s[b] = x }
		printf "%-90s %6.2f %6.2f\n", name[k], s[1], s[int((n + 1) / 2)]
	}
}' "$tmp/phases"
