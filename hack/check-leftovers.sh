#!/usr/bin/env bash
# Fails if a process started from the test binaries is still running (and so
# may still hold a port), or the real node's NetworkPolicy rules (kube-router's
# chains) are still in the host's iptables: every test must stop what it
# started.
# It only reports; it never kills anything.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=$root/.cache/testbin

left=()
for exe in /proc/[0-9]*/exe; do
	target=$(readlink "$exe" 2>/dev/null) || continue
	if [[ $target == "$cache"/* ]]; then
		pid=${exe#/proc/}
		pid=${pid%/exe}
		left+=("$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-150)")
	fi
done
if ((${#left[@]} > 0)); then
	echo "processes started by the tests are still running:" >&2
	printf '  %s\n' "${left[@]}" >&2
	exit 1
fi
if iptables -S 2>/dev/null | grep -q '^-N KUBE-ROUTER-'; then
	echo "kube-router's iptables chains are still there: a real node's NetworkPolicy rules were not removed (go run ./hack/localcluster unfence removes them)" >&2
	exit 1
fi
echo "no test processes left running"
