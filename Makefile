# sandbox-fleet. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

MODULE  := github.com/sandbox-fleet/sandbox-fleet
# A semantic version, as krew requires: the tag, or v0.0.0-<commit> between tags.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-$$(git rev-parse --short HEAD 2>/dev/null || echo dev))
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X $(MODULE)/pkg/version.gitVersion=$(VERSION) -X $(MODULE)/pkg/version.gitCommit=$(COMMIT)
BIN     := $(CURDIR)/bin
TESTBIN := $(CURDIR)/.cache/testbin/current/bin
LOCALCLUSTER := go run ./hack/localcluster

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

.PHONY: build
build: ## build the kubectl plugin and its completion helper into bin/
	go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-sandbox_fleet ./cmd/kubectl-sandbox_fleet
	install -m 0755 plugins/kubectl_complete-sandbox_fleet $(BIN)/

.PHONY: dist
dist: ## build the release archives for krew into dist/ and dist/sandbox-fleet.yaml with their sha256, and the Python client's wheels, pure and per platform with the plugin (VERSION=vX.Y.Z)
	go run ./hack/dist -version $(VERSION) -out dist -ldflags "$(LDFLAGS)"

.PHONY: testbin
testbin: ## build the pinned test binaries (etcd, Kubernetes, kwok, Agent Sandbox) if not cached
	hack/testbin.sh >/dev/null

.PHONY: node-deps
node-deps: ## install from Debian what the real test node needs (runc, CNI plugins, busybox-static, mmdebstrap) and pytest
	hack/node-deps.sh

.PHONY: prebuild
prebuild: ## build what tests build as they ship (the release archives, asrl-scheduler), so that a cold Go cache fills before any test's deadline starts
	tmp=$$(mktemp -d) && go run ./hack/dist -version v0.0.0 -out $$tmp; rc=$$?; rm -rf $$tmp; exit $$rc
	cd cmd/asrl-scheduler && CGO_ENABLED=0 go build -trimpath -o /dev/null .

# The Agent Sandbox lines the tests run (hack/testbin.sh builds both): the
# whole suite on the newest, the line users install; the suites that drive
# the controller hardest (e2e, clients/python, faults) on the older again.
AGENT_SANDBOX_LINES := $(CURDIR)/.cache/testbin/current/agent-sandbox
OLDER_AGENT_SANDBOX = $(shell cd hack/tools && go list -m -f '{{.Version}}' sigs.k8s.io/agent-sandbox)

.PHONY: test
test: testbin node-deps lint prebuild ## run every test: unit, integration on a local control plane, e2e on a real node; e2e, clients/python and faults on both Agent Sandbox lines
	for v in $(AGENT_SANDBOX_LINES)/*/bin/agent-sandbox-controller; do $$v --version | head -1; done
	go test -race -count=1 -timeout 30m ./...
	@echo "again on Agent Sandbox $(OLDER_AGENT_SANDBOX):"
	SANDBOX_FLEET_AGENT_SANDBOX=$(OLDER_AGENT_SANDBOX) go test -race -count=1 -timeout 30m ./e2e/ ./clients/python/ ./faults/
	go test -run '^$$' -fuzz '^FuzzMutate$$' -fuzztime 30s ./pkg/webhook/
	go test -run '^$$' -fuzz '^FuzzCallCondition$$' -fuzztime 30s ./pkg/webhook/
	go test -run '^$$' -fuzz '^FuzzCallConditionImage$$' -fuzztime 30s ./pkg/webhook/
	hack/check-leftovers.sh

.PHONY: e2e
e2e: testbin node-deps ## run the end-to-end suite alone, on the local cluster's real node
	go test -count=1 -timeout 20m -v ./e2e/

.PHONY: e2e-kind
e2e-kind: testbin ## run the end-to-end suite on a kind cluster, made with kind's Go library, with the components installed (needs a Docker engine that runs privileged containers)
	go run ./e2e/kind

.PHONY: image
image: ## build the asrl-webhook, asrl-prepull-agent and asrl-scheduler images, and sandbox-fleet (serve, for manifests/serve), as docker archives in dist/ (no Docker needed; IMAGE_ARCH=arm64 for arm)
	for cmd in asrl-webhook asrl-prepull-agent asrl-scheduler; do \
		go run ./hack/image -cmd $$cmd -tag ghcr.io/sandbox-fleet/$$cmd:$(VERSION) -arch $(or $(IMAGE_ARCH),amd64) -ldflags "$(LDFLAGS)" || exit 1; \
	done
	go run ./hack/image -cmd kubectl-sandbox_fleet -tag ghcr.io/sandbox-fleet/sandbox-fleet:$(VERSION) -out dist/sandbox-fleet.tar -arch $(or $(IMAGE_ARCH),amd64) -ldflags "$(LDFLAGS)"

.PHONY: push
push: ## build the four images and push them to REGISTRY as REGISTRY/CMD:VERSION, serve's as REGISTRY/sandbox-fleet:VERSION (no Docker needed; credentials from the docker config)
	@test -n "$(REGISTRY)" || { echo "make push: set REGISTRY, e.g. make push REGISTRY=registry.example.com/sandbox-fleet" >&2; exit 2; }
	for cmd in asrl-webhook asrl-prepull-agent asrl-scheduler; do \
		go run ./hack/image -cmd $$cmd -tag $(REGISTRY)/$$cmd:$(VERSION) -push -arch $(or $(IMAGE_ARCH),amd64) -ldflags "$(LDFLAGS)" || exit 1; \
	done
	go run ./hack/image -cmd kubectl-sandbox_fleet -tag $(REGISTRY)/sandbox-fleet:$(VERSION) -push -arch $(or $(IMAGE_ARCH),amd64) -ldflags "$(LDFLAGS)"

.PHONY: generate
generate: ## regenerate api/'s deep-copy functions and manifests/crd/ with controller-gen, and api/fleet/v1's Go code with protogen
	cd hack/tools/controller-gen && go tool controller-gen object paths=../../../api/v1alpha1/... \
		crd:crdVersions=v1 output:crd:artifacts:config=../../../manifests/crd
	cd hack/tools/protogen && go run . -root ../../.. -out ../../.. api/fleet/v1/fleet.proto

.PHONY: docs
docs: ## regenerate docs/reference: the CLI from the cobra commands, the CRDs from manifests/crd, the configuration file from pkg/fleet/config
	go run ./hack/docs

.PHONY: lint
lint: ## gofmt and go vet (the main module and asrl-scheduler's)
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n $$bad ]]; then echo "gofmt would change: $$bad"; exit 1; fi
	go vet ./...
	cd cmd/asrl-scheduler && go vet ./...

.PHONY: demo
DEMO := examples/demo
demo: build testbin node-deps ## a sample eval sweep (12 tasks, 3 images) through kubectl on a local cluster with a real node, then tear it all down (root)
	$(LOCALCLUSTER) -real-node up
	trap '$(LOCALCLUSTER) down' EXIT; \
	export PATH=$(BIN):$(TESTBIN):$$PATH KUBECONFIG=$$($(LOCALCLUSTER) env | sed 's/^export KUBECONFIG=//'); \
	results=$$(mktemp -d)/results.jsonl; \
	set -x; \
	kubectl plugin list; \
	kubectl sandbox-fleet version; \
	kubectl sandbox-fleet plan -f $(DEMO)/fleet.yaml --tasks $(DEMO)/tasks.jsonl; \
	kubectl sandbox-fleet preflight; \
	kubectl sandbox-fleet run -f $(DEMO)/fleet.yaml --tasks $(DEMO)/tasks.jsonl --script $(DEMO)/eval.sh \
		--results $$results -- '{metadata.mode}'; \
	kubectl sandbox-fleet get runs

.PHONY: bench
bench: testbin ## benchmark the claim path against a bare client on a local kwok cluster (~45 min)
	go run ./bench/claims -rounds 2

.PHONY: bench-serve
bench-serve: testbin ## benchmark the training-loop path: Python through serve, the engine in process, a bare python3-kubernetes client (~10 min)
	hack/node-deps.sh bench
	go run ./bench/serve -rounds 3

.PHONY: bench-serveload
bench-serveload: testbin ## load one serve with 8 trainer processes × 64 rollouts at once on kwok nodes: serve's CPU and RSS per 1,000 rollouts (~5 min)
	go run ./bench/serveload

.PHONY: bench-agent
bench-agent: testbin node-deps ## benchmark the agent loop on the real node: 64 rollouts × 50 commands through serve, over a shell and an exec each, against the engine in process (~10 min)
	go run ./bench/serve -shape agent -rounds 3 -rollouts 64 -commands 50

.PHONY: bench-recycle
bench-recycle: testbin node-deps ## benchmark recycling on the real node: 3 problems × G=8 recycled against fresh claims, and a 200-command agent loop over one shell against an exec each (~10 min)
	go run ./bench/recycle -rounds 3

.PHONY: bench-webhook
bench-webhook: testbin ## benchmark asrl-webhook against no webhook, a policy-free webhook and a constant condition: latency at 200 Pods/s, creates/s ratios, warm pool fill (~20 min)
	go run ./bench/webhook -rounds 6

.PHONY: bench-scheduler
bench-scheduler: testbin ## benchmark asrl-scheduler on 1,000 kwok nodes: Pods/s against the default profile, cache-optimal placements (~15 min)
	go run ./bench/scheduler

.PHONY: bench-sweep
bench-sweep: testbin ## a simulated pull-bound sweep through the engine on 50 kwok nodes: wall time and bytes pulled, --prepull, cache-aware placement and planned pulls against the stock scheduler (~25 min)
	go run ./bench/sweep

.PHONY: bench-sweepnode
bench-sweepnode: testbin node-deps ## a pull-bound sweep through the engine on the real node, the components installed from the shipped manifests: wall time with planned pulls against without (~10 min)
	go run ./bench/sweepnode

.PHONY: bench-nodecache
bench-nodecache: testbin ## benchmark asrl-prepull-agent with 5,000 images on its node: object size, RSS, CPU per change (~2 min)
	go run ./bench/nodecache

.PHONY: bench-nodecachescale
bench-nodecachescale: testbin ## measure NodeImageCaches at scale on 1,000 kwok nodes × 5,000 images: object size, asrl-scheduler's and asrl-webhook's memory, the agents' write volume paced and unpaced (~15 min)
	go run ./bench/nodecachescale

.PHONY: cluster-up cluster-down
cluster-up: testbin ## start the local cluster and leave it running
	$(LOCALCLUSTER) up
cluster-down: ## stop the local cluster
	$(LOCALCLUSTER) down

.PHONY: clean
clean: ## remove built binaries (the test binary cache stays; rm -rf .cache to drop it)
	rm -rf $(BIN) dist
