package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// clusterClient is a client of the test cluster as its admin.
func clusterClient(t *testing.T) client.Client {
	t.Helper()
	clients, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	return clients.Client
}

// newNode registers a Node of the test's own, deleted when it ends.
func newNode(t *testing.T, c client.Client) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))}}
	if err := c.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	return node
}

// startAgent runs an agent for node on the runtime at endpoint, with the
// API identity of cfg, until the test ends.
func startAgent(t *testing.T, cfg *rest.Config, node, endpoint string, edit ...func(*agent.Agent)) {
	t.Helper()
	rt, err := agent.Dial(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	// As the DaemonSet gives it: a directory on the image filesystem (the
	// fake runtime's mountpoint is nowhere).
	rt.ImageFSPath = t.TempDir()
	c, err := agent.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	a := &agent.Agent{Node: node, Runtime: rt, Client: c, Version: "test", Resync: time.Minute,
		Settle: 300 * time.Millisecond, Poll: 200 * time.Millisecond, Log: klog.NewKlogr().WithName(node)}
	for _, e := range edit {
		e(a)
	}
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		rt.Close()
	})
}

// waitFor polls node's NodeImageCache until ok holds, and returns it.
func waitFor(t *testing.T, c client.Client, node string, timeout time.Duration, what string, ok func(*v1alpha1.NodeImageCache) bool) *v1alpha1.NodeImageCache {
	t.Helper()
	cache := &v1alpha1.NodeImageCache{}
	deadline := time.Now().Add(timeout)
	for {
		err := c.Get(context.Background(), client.ObjectKey{Name: node}, cache)
		if err == nil && ok(cache) {
			return cache
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("NodeImageCache %s: not %s after %v: %+v (%v)", node, what, timeout, cache.Conditions, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hasImage(ref string) func(*v1alpha1.NodeImageCache) bool {
	return func(c *v1alpha1.NodeImageCache) bool {
		n, err := nodecache.NewNode(c)
		if err != nil {
			return false
		}
		_, ok := n.Image(ref)
		return ok
	}
}

func condition(typ string, status metav1.ConditionStatus, reason string) func(*v1alpha1.NodeImageCache) bool {
	return func(c *v1alpha1.NodeImageCache) bool {
		cond := meta.FindStatusCondition(c.Conditions, typ)
		return cond != nil && cond.Status == status && cond.Reason == reason
	}
}

// The agent publishes what the runtime holds, follows its changes within
// two seconds, and says what it cannot read instead of failing.
func TestAgentFollowsTheRuntime(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault testcri.Fault
	}{
		{"containerd events", testcri.Fault{}},
		{"polling a runtime without events", testcri.Fault{NoEvents: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterClient(t)
			node := newNode(t, c)
			rt, err := testcri.Start(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Stop()
			rt.SetFault(tt.fault)
			imgs := testcri.SWEBench(4)
			rt.Add(imgs[:3]...)
			startAgent(t, cluster.RESTConfig(), node.Name, rt.Endpoint)

			cache := waitFor(t, c, node.Name, 10*time.Second, "published", func(c *v1alpha1.NodeImageCache) bool { return c.ImageCount == 3 })
			if len(cache.OwnerReferences) != 1 || cache.OwnerReferences[0].UID != node.UID || cache.OwnerReferences[0].Kind != "Node" {
				t.Errorf("owner references %+v, want the Node %s", cache.OwnerReferences, node.UID)
			}
			if cache.AgentVersion != "test" || cache.ObservedTime.IsZero() {
				t.Errorf("agentVersion %q observedTime %v", cache.AgentVersion, cache.ObservedTime)
			}
			n, err := nodecache.NewNode(cache)
			if err != nil {
				t.Fatal(err)
			}
			for _, img := range imgs[:3] {
				got, ok := n.Image(img.RepoTags[0])
				if !ok || !slices.Equal(got, toLayers(img.Layers...)) {
					t.Errorf("%s: layers %v, want %v", img.RepoTags[0], got, toLayers(img.Layers...))
				}
				if n.Missing(toLayers(img.Layers...)) != 0 {
					t.Errorf("%s: bytes missing", img.RepoTags[0])
				}
			}

			added := time.Now()
			rt.Add(imgs[3])
			waitFor(t, c, node.Name, 2*time.Second, "showing a new image", hasImage(imgs[3].RepoTags[0]))
			t.Logf("a new image shows after %v", time.Since(added).Round(time.Millisecond))
			rt.Remove(imgs[0].ManifestDigest)
			waitFor(t, c, node.Name, 2*time.Second, "without a removed image", func(c *v1alpha1.NodeImageCache) bool { return !hasImage(imgs[0].RepoTags[0])(c) })

			// The manifests of images already read are not read again; a new
			// one that cannot be read makes the data partial.
			rt.SetFault(testcri.Fault{NoEvents: tt.fault.NoEvents, NoContent: true})
			rt.Add(testcri.SWEBench(5)[4])
			cache = waitFor(t, c, node.Name, 2*time.Second, "partial", condition(v1alpha1.ConditionComplete, metav1.ConditionFalse, v1alpha1.ReasonPartialData))
			if msg := meta.FindStatusCondition(cache.Conditions, v1alpha1.ConditionComplete).Message; !strings.Contains(msg, "content store is unavailable") {
				t.Errorf("PartialData message %q does not say why", msg)
			}

			// A runtime that cannot list its images leaves the last read in place.
			rt.SetFault(testcri.Fault{NoEvents: tt.fault.NoEvents, NoList: true})
			rt.Add(imgs[0])
			cache = waitFor(t, c, node.Name, 5*time.Second, "unreachable", condition(v1alpha1.ConditionRuntimeReachable, metav1.ConditionFalse, v1alpha1.ReasonUnreachable))
			if cache.ImageCount != 4 {
				t.Errorf("an unreachable runtime left %d images listed, want the last read's 4", cache.ImageCount)
			}
			rt.SetFault(testcri.Fault{NoEvents: tt.fault.NoEvents})
			waitFor(t, c, node.Name, 10*time.Second, "reachable again with every image", func(c *v1alpha1.NodeImageCache) bool {
				return condition(v1alpha1.ConditionRuntimeReachable, metav1.ConditionTrue, v1alpha1.ReasonReachable)(c) &&
					condition(v1alpha1.ConditionComplete, metav1.ConditionTrue, v1alpha1.ReasonAllListed)(c) && c.ImageCount == 5
			})
		})
	}
}

// A burst of image changes is written once per MinWriteInterval, not once
// per change: each write sends the whole object.
func TestAgentGathersABurstOfChanges(t *testing.T) {
	clients, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	c := clients.Client
	node := newNode(t, c)
	rt, err := testcri.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	imgs := testcri.SWEBench(8)
	rt.Add(imgs[0])
	const interval = 4 * time.Second
	startAgent(t, cluster.RESTConfig(), node.Name, rt.Endpoint, func(a *agent.Agent) { a.MinWriteInterval = interval })
	first := waitFor(t, c, node.Name, 10*time.Second, "published", func(c *v1alpha1.NodeImageCache) bool { return c.ImageCount == 1 })

	w, err := c.Watch(context.Background(), &v1alpha1.NodeImageCacheList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", node.Name), Raw: &metav1.ListOptions{ResourceVersion: first.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	for _, img := range imgs[1:] {
		rt.Add(img)
		time.Sleep(300 * time.Millisecond)
	}
	var writes []time.Duration
	deadline := time.After(2*interval + 2*time.Second)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if cache, ok := ev.Object.(*v1alpha1.NodeImageCache); ok {
				writes = append(writes, time.Since(start).Round(100*time.Millisecond))
				done = int(cache.ImageCount) == len(imgs)
			}
		case <-deadline:
			t.Fatalf("the object does not show all %d images after %v: writes at %v", len(imgs), 2*interval+2*time.Second, writes)
		}
	}
	// Seven changes over 2.1 s after the first write: at most the write
	// that ends the interval and one after it.
	if len(writes) > 2 {
		t.Errorf("%d writes for a burst of %d changes (at %v), want at most 2 with a %v interval", len(writes), len(imgs)-1, writes, interval)
	}
}

// An agent whose runtime is not there says so in the object, keeps
// running, and publishes the images once the runtime comes up; the object
// goes with its Node.
func TestAgentWithoutARuntime(t *testing.T) {
	c := clusterClient(t)
	node := newNode(t, c)
	dir := t.TempDir()
	startAgent(t, cluster.RESTConfig(), node.Name, "unix://"+dir+"/cri.sock")
	cache := waitFor(t, c, node.Name, 10*time.Second, "unreachable", condition(v1alpha1.ConditionRuntimeReachable, metav1.ConditionFalse, v1alpha1.ReasonUnreachable))
	if msg := meta.FindStatusCondition(cache.Conditions, v1alpha1.ConditionRuntimeReachable).Message; !strings.Contains(msg, dir) || !strings.Contains(msg, "no read has worked yet") {
		t.Errorf("Unreachable message %q should name the socket and say nothing was read", msg)
	}

	rt, err := testcri.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	rt.Add(testcri.SWEBench(1)...)
	waitFor(t, c, node.Name, 20*time.Second, "published once the runtime is up", func(c *v1alpha1.NodeImageCache) bool {
		return c.ImageCount == 1 && condition(v1alpha1.ConditionRuntimeReachable, metav1.ConditionTrue, v1alpha1.ReasonReachable)(c)
	})

	if err := c.Delete(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Get(context.Background(), client.ObjectKey{Name: node.Name}, &v1alpha1.NodeImageCache{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Errorf("the NodeImageCache outlived its Node by 30 s: %v", err))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// An agent in a Pod sees the image filesystem through a directory of its
// own on it; without one, reading it fails naming the path to give, and
// the disk budget stops every pull.
func TestImageFSPath(t *testing.T) {
	srv, err := testcri.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rt, err := agent.Dial(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	fs, err := rt.Filesystem(context.Background())
	if err == nil || !strings.Contains(err.Error(), "is not visible to the agent") || !strings.Contains(err.Error(), "--image-fs-path") {
		t.Fatalf("the fake runtime's mountpoint is not visible, yet: %+v %v", fs, err)
	}
	if a := nodecache.Admit(fs, 80, nodecache.Reservations{}); a.Decision != nodecache.Stop || !strings.Contains(a.Why, "cannot be checked") {
		t.Errorf("a budget on an unseen filesystem: %+v", a)
	}
	rt.ImageFSPath = t.TempDir()
	if fs, err = rt.Filesystem(context.Background()); err != nil || fs.CapacityBytes <= 0 || fs.AvailableBytes <= 0 {
		t.Errorf("through --image-fs-path: %+v %v", fs, err)
	}
}

// toLayers are layers as a NodeImageCache lists them.
func toLayers(ls ...nodecache.RuntimeLayer) []v1alpha1.Layer {
	out := make([]v1alpha1.Layer, len(ls))
	for i, l := range ls {
		out[i] = v1alpha1.Layer{Digest: nodecache.Short(l.Digest), Size: l.Size}
	}
	return out
}
