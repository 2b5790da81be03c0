#!/usr/bin/env bash
# Installs from Debian what the test cluster's real node needs and Go cannot
# build: runc, the CNI plugins, busybox-static (the busybox test image),
# mmdebstrap (the SWE-bench-like test image), iproute2/iptables and ipset
# (kube-router, the node's enforcer of NetworkPolicies, drives both); and
# what tests the Python client as it ships: pytest, build, setuptools and
# venv (its wheel, installed into a venv of the tests' own), mypy (its
# types) and bubblewrap (FakeFleet's sandboxes). With the argument "bench" it
# also installs python3-kubernetes, the bare client of bench/serve. It does
# nothing when they are all present.
set -euo pipefail
packages=(runc containernetworking-plugins busybox-static mmdebstrap iproute2 iptables ipset python3-pytest
	python3-build python3-setuptools python3-wheel python3-venv mypy bubblewrap)
[[ ${1:-} == bench ]] && packages+=(python3-kubernetes)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
if ((EUID != 0)); then
	echo "the real test node needs these Debian packages: ${missing[*]}; run this as root (sudo $0)" >&2
	exit 1
fi
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
