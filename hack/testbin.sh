#!/usr/bin/env bash
# Builds the binaries the tests run — etcd, the Kubernetes control plane and
# kubelet, kubectl, kwok and the Agent Sandbox controller from the versions
# pinned in hack/tools/go.mod, and the controller's second line from
# hack/tools/agent-sandbox-v1.0/go.mod (each line with its release
# manifests and CRDs, in agent-sandbox/<version>/); containerd and the loopback registry from
# hack/tools/node/go.mod; krew (as the kubectl plugin kubectl-krew) and its
# manifest validator from hack/tools/krew/go.mod; kube-router (the real
# node's enforcer of NetworkPolicies) from hack/tools/kube-router/go.mod —
# together with kwok's
# stages, into .cache/testbin/<versions>-<hash>/, and points
# .cache/testbin/current at it. A directory that already exists is complete
# (it is renamed into place only after a successful build), so a second run
# builds nothing.
#
#   hack/testbin.sh          build if needed, print the directory
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$root/hack/tools
cache=$root/.cache/testbin
cd "$tools"

version() { go list -m -f '{{.Version}}' "$1"; }
moddir() { go list -m -f '{{.Dir}}' "$1"; }

kube=$(version k8s.io/kubernetes)
etcd=$(version go.etcd.io/etcd/server/v3)
kwok=$(version sigs.k8s.io/kwok)
sandbox=$(version sigs.k8s.io/agent-sandbox)
sandbox1=$(cd agent-sandbox-v1.0 && version sigs.k8s.io/agent-sandbox)
# The hash covers everything that decides the output, so a changed build
# never reuses a stale directory that happens to carry the same versions.
containerd=$(cd node && version github.com/containerd/containerd/v2)
hash=$(cat go.mod go.sum agent-sandbox-v1.0/go.mod agent-sandbox-v1.0/go.sum node/go.mod node/go.sum node/registry/*.go krew/go.mod krew/go.sum kube-router/go.mod kube-router/go.sum "$root/hack/testbin.sh" | sha256sum | cut -c1-10)
dir=$cache/k8s-$kube-etcd-$etcd-kwok-$kwok-agent-sandbox-$sandbox-$sandbox1-containerd-$containerd-$hash

if [[ ! -d $dir ]]; then
	echo "building test binaries into $dir (about 12 minutes on a cold Go cache)" >&2
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	minor=${kube#v1.}
	minor=${minor%%.*}
	ldflags=(
		-s -w
		-X "k8s.io/component-base/version.gitVersion=$kube"
		-X "k8s.io/component-base/version.gitMajor=1"
		-X "k8s.io/component-base/version.gitMinor=$minor"
		-X "k8s.io/component-base/version.gitTreeState=clean"
		-X "sigs.k8s.io/kwok/pkg/consts.Version=${kwok#v}"
	)
	mkdir -p "$tmp/bin"
	CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags[*]}" -o "$tmp/bin/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kubectl \
		k8s.io/kubernetes/cmd/kubelet \
		sigs.k8s.io/kwok/cmd/kwok
	# etcd's main package is its module root, which go build names "v3".
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3

	# The real node's containerd (without the storage drivers that need cgo
	# libraries) and the loopback registry, from their own module.
	(cd node && CGO_ENABLED=0 go build -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd" -o "$tmp/bin/" \
		github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		github.com/containerd/containerd/v2/cmd/ctr \
		./registry)

	# krew installs plugins from a manifest; the validator drives it.
	(cd krew && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/bin/kubectl-krew" sigs.k8s.io/krew/cmd/krew &&
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/bin/" sigs.k8s.io/krew/cmd/validate-krew-manifest)

	# The real node's enforcer of NetworkPolicies: kube-router's network
	# policy controller (testcluster runs it with only that part on).
	(cd kube-router && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/bin/" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)

	# Each Agent Sandbox line, built from its own module, stamped with its
	# version as its release is, with the CRDs of that version.
	for line in .:"$sandbox" agent-sandbox-v1.0:"$sandbox1"; do
		mod=${line%%:*} v=${line#*:}
		mkdir -p "$tmp/agent-sandbox/$v/bin"
		(cd "$mod" && CGO_ENABLED=0 go build -trimpath \
			-ldflags "-s -w -X sigs.k8s.io/agent-sandbox/internal/version.gitVersion=$v" \
			-o "$tmp/agent-sandbox/$v/bin/" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller &&
			cp -r "$(moddir sigs.k8s.io/agent-sandbox)"/k8s "$tmp/agent-sandbox/$v/")
	done

	mkdir -p "$tmp/kwok-stages"
	stages=$(moddir sigs.k8s.io/kwok)/kustomize/stage
	cp "$stages"/node/fast/node-initialize.yaml \
		"$stages"/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		"$stages"/pod/fast/*.yaml \
		"$tmp/kwok-stages/"
	chmod -R u+w "$tmp"
	mv "$tmp" "$dir"
	trap - EXIT
fi

ln -sfn "$(basename "$dir")" "$cache/current"
echo "$dir"
