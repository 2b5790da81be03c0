package testcluster

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Option configures a Cluster.
type Option func(*options)

type options struct {
	nodes        []Node
	agentSandbox bool
	// agentSandboxVersion is the Agent Sandbox line; empty: AgentSandboxEnv's or the newest.
	agentSandboxVersion string
	dir                 string
	detached            bool
	realNode            bool
	networkPolicies     bool
	cpus                []int
	pullDelays          bool
	restartExits        bool
	// registryLink is the rate of the registry's shared link; 0: its default.
	registryLink int
}

func defaultOptions() options {
	return options{
		nodes:        FakeNodes("kwok-node", 2, DefaultCapacity(), nil),
		agentSandbox: true,
	}
}

// Node is a kwok-simulated node: a Node object whose status kwok keeps Ready
// and whose pods kwok marks Running with an IP, without running anything.
type Node struct {
	Name     string
	Capacity corev1.ResourceList
	Labels   map[string]string
	Taints   []corev1.Taint
}

// DefaultCapacity is a roomy node: 32 CPUs, 128 GiB, 500 GiB of disk, 110 pods.
func DefaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("32"),
		corev1.ResourceMemory:           resource.MustParse("128Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}
}

// FakeNodes returns n nodes named prefix-0 ... prefix-(n-1), each with the
// given capacity and labels.
func FakeNodes(prefix string, n int, capacity corev1.ResourceList, labels map[string]string) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{Name: fmt.Sprintf("%s-%d", prefix, i), Capacity: capacity, Labels: labels}
	}
	return nodes
}

// WithAgentSandbox runs the Agent Sandbox line version (v0.5.6, v1.0.1)
// instead of the one AgentSandboxEnv names or the newest built.
func WithAgentSandbox(version string) Option {
	return func(o *options) { o.agentSandboxVersion = version }
}

// WithNodes replaces the default two kwok nodes.
func WithNodes(nodes ...Node) Option {
	return func(o *options) { o.nodes = nodes }
}

// WithoutAgentSandbox leaves out the Agent Sandbox CRDs and controller, for
// tests of what happens on a cluster that lacks them.
func WithoutAgentSandbox() Option {
	return func(o *options) { o.agentSandbox = false }
}

// WithDir keeps the cluster's files (PKI, kubeconfig, etcd data, logs) in dir
// instead of a new temporary directory.
func WithDir(dir string) Option {
	return func(o *options) { o.dir = dir }
}

// Detached lets the components outlive the process that started them, for a
// cluster a person uses; StopDetached stops it later. Tests never use it: their
// components die with the test binary.
func Detached() Option {
	return func(o *options) { o.detached = true }
}

// WithRealNode adds one real node: containerd, runc and a kubelet on this
// machine, with a bridge pod network of the cluster's own, pulling the test
// images (internal/testimages) from a registry on loopback. It needs root
// and the Debian packages of hack/node-deps.sh. Pods run on it for real:
// image pulls, exec, logs and disk usage are what they would be anywhere.
func WithRealNode() Option {
	return func(o *options) { o.realNode = true }
}

// WithRegistryLink has the real node's registry serve the blobs of
// repositories with a path element named link (ADDR/a/link/b) over one
// link of bytesPerSecond that all their pulls share, as a node's pulls
// share its network, so that a benchmark's pulls take the time they would
// over a network.
func WithRegistryLink(bytesPerSecond int) Option {
	return func(o *options) { o.registryLink = bytesPerSecond }
}

// WithNetworkPolicies has the real node enforce NetworkPolicies, as a
// cluster's network plugin does (kube-router's network policy
// controller), so that what a policy fences off is unreachable for real.
// Its rules are in the host's iptables: one cluster per machine may.
func WithNetworkPolicies() Option {
	return func(o *options) { o.networkPolicies = true }
}

// RestartingExited starts again, a second later, any component that exits
// on its own once the cluster is up, as the kubelet restarts a crashed
// control-plane Pod or a Deployment's. Fault tests use it: the Agent
// Sandbox controller exits by design when it cannot renew its leader Lease
// while the API server is down, and a real cluster survives that. Other
// tests leave it off, so that a component exiting is a failure they see.
func RestartingExited() Option {
	return func(o *options) { o.restartExits = true }
}

// WithCPUs runs every component on the given CPUs only, so that a
// benchmark can keep the control plane apart from what it measures, as a
// real cluster keeps it on nodes of its own.
func WithCPUs(cpus ...int) Option {
	return func(o *options) { o.cpus = cpus }
}

// ReadyAtAnnotation is where a cluster WithPullDelays reads when a Pod on
// a kwok node is Ready: an RFC 3339 time.
const ReadyAtAnnotation = "testcluster.sandbox-fleet.io/ready-at"

// WithPullDelays makes kwok hold each Pod it runs Pending until the Pod
// carries ReadyAtAnnotation, and make it Ready at that time: the stand-in
// for a kubelet's image pull, whose length a benchmark works out from what
// the node lacks of the Pod's image.
func WithPullDelays() Option {
	return func(o *options) { o.pullDelays = true }
}
