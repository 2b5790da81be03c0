package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

const (
	// RegistryEnv names, on an existing cluster, host:port of a plain-HTTP
	// registry this process pushes to and the sandbox node's runtime pulls
	// from, both as a mirror of docker.io and by its own address. It holds
	// the test images under their docker.io paths (e2e/kind sets it up).
	RegistryEnv = "SANDBOX_FLEET_E2E_REGISTRY"
	// NodeEnv names, on an existing cluster, the node the node tests work
	// on; by default the first Ready node an installed agent publishes.
	NodeEnv = "SANDBOX_FLEET_E2E_NODE"
)

// The installed agent, as manifests/prepull-agent names it.
const agentNamespace, agentName = "sandbox-fleet-agent", "asrl-prepull-agent"

// shippedMinWriteInterval is the installed agent's least time between two
// writes of its NodeImageCache: its --min-write-interval, which the
// manifests leave at its default.
const shippedMinWriteInterval = 10 * time.Second

// sandboxNode is the node the node tests pull images onto and place
// sandboxes on, with what they reach it by: the registry its runtime pulls
// from, its agent, and a view of its images.
type sandboxNode struct {
	name string
	// registry is host:port of the plain-HTTP registry this process pushes
	// to and the node's runtime pulls from.
	registry string
	images   nodeImages
	agent    nodeAgent
	// published is how long after the runtime's change the agent
	// publishes it at the latest: it settles and reads within two seconds,
	// and may wait out the least time between its writes.
	published time.Duration
}

// nodeImages is what the tests see of the node's images.
type nodeImages interface {
	Has(ctx context.Context, ref string) (bool, error)
	Filesystem(ctx context.Context) (v1alpha1.ImageFilesystem, error)
}

// nodeAgent is the node's asrl-prepull-agent.
type nodeAgent interface {
	// Start has the agent run, until the test ends at the latest.
	Start(t *testing.T, ctx context.Context)
	// Restart stops the agent, calls whileDown, and starts it again.
	Restart(t *testing.T, ctx context.Context, whileDown func())
}

// theNode is the node the node tests work on. On the local cluster it is
// the real node, its runtime read through its CRI socket and an agent run
// in this process for each test, with timings tuned for tests; on an
// existing cluster it is the node installed as an admin installs it (see
// installedNode).
func theNode(t *testing.T) *sandboxNode {
	t.Helper()
	if local == nil {
		return existingNode(t)
	}
	rt, err := agent.Dial("unix://" + local.CRISocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &sandboxNode{name: local.RealNodeName(), registry: local.RegistryAddr(),
		images: criImages{rt}, agent: &inProcessAgent{stateDir: t.TempDir()}, published: 2 * time.Second}
}

// existingNode is the node of the existing cluster under test that
// NodeEnv names, or the first Ready one with an agent's NodeImageCache.
func existingNode(t *testing.T) *sandboxNode {
	t.Helper()
	registry := os.Getenv(RegistryEnv)
	if registry == "" {
		t.Skipf("set %s to a registry this process pushes to and the sandbox nodes pull from (e2e/kind does): this test pushes its own images", RegistryEnv)
	}
	node := os.Getenv(NodeEnv)
	if node == "" {
		node = publishedNode(t)
	}
	return installedNode(t, node, registry)
}

// publishedNode is the first Ready node whose NodeImageCache an agent wrote.
func publishedNode(t *testing.T) string {
	t.Helper()
	c := clusterClient(t)
	caches := &v1alpha1.NodeImageCacheList{}
	if err := c.List(context.Background(), caches); err != nil {
		t.Fatalf("listing NodeImageCaches: %v (are the components installed? see docs/admin.md)", err)
	}
	for _, cache := range caches.Items {
		node := &corev1.Node{}
		if cache.AgentVersion == "" || c.Get(context.Background(), client.ObjectKey{Name: cache.Name}, node) != nil {
			continue
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && !node.Spec.Unschedulable {
				return node.Name
			}
		}
	}
	t.Fatalf("no Ready node has a NodeImageCache from %s: install the components (docs/admin.md) or set %s", agentName, NodeEnv)
	return ""
}

// installedNode is node, whose installed agent (the shipped DaemonSet)
// publishes its images: the tests see them as the agent publishes them,
// for nothing else reads a node's runtime from outside it (the kubelet
// lists at most 50 images, late, and a Pod using an image would keep the
// agent from removing it).
func installedNode(t *testing.T, node, registry string) *sandboxNode {
	t.Helper()
	c := clusterClient(t)
	return &sandboxNode{name: node, registry: registry,
		images: publishedImages{c, node}, agent: &installedAgent{c: c, node: node}, published: 2*time.Second + shippedMinWriteInterval}
}

func clusterClient(t *testing.T) client.Client {
	t.Helper()
	clients, err := kube.ForConfig(restConfig(), "")
	if err != nil {
		t.Fatal(err)
	}
	return clients.Client
}

// criImages reads the local node's runtime through its CRI socket, apart
// from the agent.
type criImages struct{ rt *agent.Runtime }

func (i criImages) Has(ctx context.Context, ref string) (bool, error) {
	id, err := i.rt.ImageID(ctx, ref)
	return id != "", err
}

func (i criImages) Filesystem(ctx context.Context) (v1alpha1.ImageFilesystem, error) {
	return i.rt.Filesystem(ctx)
}

// publishedImages reads the node's images from its NodeImageCache.
type publishedImages struct {
	c    client.Client
	node string
}

func (i publishedImages) cache(ctx context.Context) (*v1alpha1.NodeImageCache, error) {
	cache := &v1alpha1.NodeImageCache{}
	return cache, i.c.Get(ctx, client.ObjectKey{Name: i.node}, cache)
}

func (i publishedImages) Has(ctx context.Context, ref string) (bool, error) {
	cache, err := i.cache(ctx)
	if err != nil {
		return false, err
	}
	n, err := nodecache.NewNode(cache)
	if err != nil {
		return false, err
	}
	_, ok := n.Image(ref)
	return ok, nil
}

func (i publishedImages) Filesystem(ctx context.Context) (v1alpha1.ImageFilesystem, error) {
	cache, err := i.cache(ctx)
	return cache.ImageFilesystem, err
}

// waitForImage waits until the node has ref, or has not when want is
// false: the CRI answers at once, a NodeImageCache within a second or so.
func (n *sandboxNode) waitForImage(t *testing.T, ctx context.Context, ref string, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		has, err := n.images.Has(ctx, ref)
		return has == want, err
	})
	if err != nil {
		t.Fatalf("node %s: has %s is not %v: %v", n.name, ref, want, err)
	}
}

// inProcessAgent runs the agent for the local real node in this process,
// keeping its state in stateDir across restarts.
type inProcessAgent struct {
	stateDir string
	stop     func()
}

func (a *inProcessAgent) Start(t *testing.T, ctx context.Context) {
	t.Helper()
	rt, err := agent.Dial("unix://" + local.CRISocket())
	if err != nil {
		t.Fatal(err)
	}
	api, err := agent.NewClient(restConfig())
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	run := &agent.Agent{Node: local.RealNodeName(), Runtime: rt, Client: api, Version: "e2e", Resync: time.Minute,
		Settle: 300 * time.Millisecond, Poll: time.Second, PullInterval: time.Second, StateDir: a.stateDir, Log: klog.NewKlogr().WithName("agent"),
		Limits: nodecache.PullLimits{AllowedRegistries: []string{"docker.io", "registry.k8s.io"}}}
	go func() { agentDone <- run.Run(agentCtx) }()
	a.stop = sync.OnceFunc(func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
		rt.Close()
	})
	t.Cleanup(a.stop)
}

func (a *inProcessAgent) Restart(t *testing.T, ctx context.Context, whileDown func()) {
	t.Helper()
	a.stop()
	whileDown()
	a.Start(t, ctx)
}

// installedAgent is the shipped DaemonSet's Pod on node.
type installedAgent struct {
	c    client.Client
	node string
}

// offNodeLabel, added to the DaemonSet's node selector, stops its Pods:
// no node has it.
const offNodeLabel = "sandbox-fleet.io/e2e-agent-stopped"

// Start waits for the agent's Pod on the node to be Ready and for its
// NodeImageCache.
func (a *installedAgent) Start(t *testing.T, ctx context.Context) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := a.pods(ctx)
		if err != nil || len(pods) != 1 || !kube.PodReady(&pods[0]) {
			return false, err
		}
		cache := &v1alpha1.NodeImageCache{}
		err = a.c.Get(ctx, client.ObjectKey{Name: a.node}, cache)
		return err == nil && cache.AgentVersion != "", client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("the installed %s on %s is not running with its NodeImageCache: %v", agentName, a.node, err)
	}
}

// Restart takes the DaemonSet off every node by its node selector, as
// an admin would, and back once whileDown returns: the new Pod starts
// from the state the old one left on the node.
func (a *installedAgent) Restart(t *testing.T, ctx context.Context, whileDown func()) {
	t.Helper()
	selector := func(value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:%s}}}}}`, offNodeLabel, value)
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: agentName}}
		if err := a.c.Patch(ctx, ds, client.RawPatch(ktypes.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	selector(`"true"`)
	restored := false
	t.Cleanup(func() {
		if !restored {
			selector("null")
		}
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := a.pods(ctx)
		return len(pods) == 0, err
	})
	if err != nil {
		t.Fatalf("the installed %s on %s did not stop: %v", agentName, a.node, err)
	}
	whileDown()
	selector("null")
	restored = true
	a.Start(t, ctx)
}

// pods are the agent's Pods on the node.
func (a *installedAgent) pods(ctx context.Context) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := a.c.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{"app.kubernetes.io/name": agentName}); err != nil {
		return nil, err
	}
	var on []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName == a.node {
			on = append(on, p)
		}
	}
	return on, nil
}

// inRegistry is where the node's registry keeps image ref.
func (n *sandboxNode) inRegistry(t *testing.T, ref string) name.Reference {
	t.Helper()
	upstream, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := name.ParseReference(n.registry+"/"+upstream.Context().RepositoryStr()+":"+upstream.Identifier(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return pushed
}

// pushNewImage pushes an image no node has: busybox with a layer of its
// own, under a new name in repository docker.io/sandbox-fleet/NAME.
func (n *sandboxNode) pushNewImage(t *testing.T, ctx context.Context, name string) (string, v1.Image) {
	t.Helper()
	return n.pushImage(t, ctx, "docker.io/sandbox-fleet/"+name, 4096)
}

// pushImage pushes busybox with a random layer of size bytes of its own
// to repository repo, under a new tag.
func (n *sandboxNode) pushImage(t *testing.T, ctx context.Context, repo string, size int64) (string, v1.Image) {
	t.Helper()
	base, err := remote.Image(n.inRegistry(t, testimages.Busybox), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	own, err := random.Layer(size, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, own)
	if err != nil {
		t.Fatal(err)
	}
	ref := fmt.Sprintf("%s:%d", repo, time.Now().UnixNano())
	if err := remote.Write(n.inRegistry(t, ref), img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	return ref, img
}
