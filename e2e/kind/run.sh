#!/usr/bin/env bash
# Runs the e2e suite on a kind cluster, for machines with Docker and kind:
# creates the cluster, installs the pinned Agent Sandbox controller (built by
# hack/testbin.sh and packaged by hack/testimages, so nothing is pulled but
# kind's node image), loads the test images, runs `go test ./e2e/` against
# it, and deletes the cluster whatever happens.
#
# CI on this project's machines has no Docker engine; there the same suite
# runs on the local cluster's real node (`make test`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
name=sandbox-fleet-e2e

for tool in docker kind kubectl; do
	command -v "$tool" >/dev/null || { echo "e2e-kind needs $tool on PATH" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind needs a running Docker engine" >&2; exit 1; }

testbin=$(hack/testbin.sh)
work=$(mktemp -d)
trap 'kind delete cluster --name "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

kind create cluster --config e2e/kind/cluster.yaml --kubeconfig "$work/kubeconfig" --wait 2m
export KUBECONFIG=$work/kubeconfig

go run ./hack/testimages -controller "$testbin/bin/agent-sandbox-controller" "$work/images" >"$work/images.txt"
while read -r archive; do
	kind load image-archive "$archive" --name "$name"
done <"$work/images.txt"

# The module's all-in-one kustomization, with its ko:// placeholder replaced
# by the controller image just loaded.
sandbox=$(cd hack/tools && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)
controller=$(go run ./hack/testimages -print-controller-image)
kubectl kustomize "$sandbox/k8s" |
	sed "s#ko://sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller#$controller#" |
	kubectl apply --server-side -f -
kubectl -n agent-sandbox-system rollout status deployment/agent-sandbox-controller --timeout=3m

SANDBOX_FLEET_E2E_KUBECONFIG=$KUBECONFIG go test -count=1 -v ./e2e/
