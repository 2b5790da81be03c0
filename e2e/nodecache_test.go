package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// The node cache reads the runtime's images with the layers they were
// built from: compressed digests and sizes, base first. It reads the CRI
// socket from this process, which only the local cluster's node lets it;
// on an existing cluster TestAgentPublishesTheNodesImages checks the same
// read, through the installed agent.
func TestRuntimeRead(t *testing.T) {
	requireLocal(t, "reads the node's CRI socket, which only the local cluster exposes to this process (TestAgentPublishesTheNodesImages checks the read through the installed agent)")
	ctx := context.Background()
	endpoint := "unix://" + local.CRISocket()
	images, err := criclient.NewRemoteImageService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	ref := testimages.Problem(2)
	if _, err := images.PullImage(ctx, &criapi.ImageSpec{Image: ref}, nil, nil); err != nil {
		t.Fatal(err)
	}
	// As built and pushed to the node's registry.
	built, err := remote.Image(theNode(t).inRegistry(t, ref), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := built.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var want []nodecache.RuntimeLayer
	for _, l := range manifest.Layers {
		want = append(want, nodecache.RuntimeLayer{Digest: l.Digest.String(), Size: l.Size})
	}
	wantDigest, err := built.Digest()
	if err != nil {
		t.Fatal(err)
	}

	rt, err := agent.Dial(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	snap, err := rt.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Partial) > 0 {
		t.Errorf("partial read: %v", snap.Partial)
	}
	// containerd counts the image filesystem's use every 10 s or so.
	fs := snap.Filesystem
	for deadline := time.Now().Add(30 * time.Second); fs.UsedBytes == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		again, err := rt.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs = again.Filesystem
	}
	if fs.UsedBytes <= 0 || fs.CapacityBytes < fs.UsedBytes || fs.AvailableBytes <= 0 {
		t.Errorf("image filesystem %+v, want its use, size and free space", fs)
	}
	found := false
	for _, img := range snap.Images {
		if !slices.Contains(img.RepoTags, ref) {
			continue
		}
		found = true
		if img.ManifestDigest != wantDigest.String() || !slices.Equal(img.Layers, want) {
			t.Errorf("%s read as manifest %s layers %v; built as %s %v", ref, img.ManifestDigest, img.Layers, wantDigest, want)
		}
	}
	if !found {
		t.Errorf("%s is not among the %d images read", ref, len(snap.Images))
	}
}

// The agent publishes the node's images as the runtime reads them, and a
// pod's pull of a new image shows in the object within two seconds (and
// the least time between its writes, which the in-process agent has none
// of).
func TestAgentPublishesTheNodesImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := theNode(t)
	n.agent.Start(t, ctx)
	agentPublishesTheNodesImages(t, ctx, n)
}

func agentPublishesTheNodesImages(t *testing.T, ctx context.Context, n *sandboxNode) {
	clients, err := kube.ForConfig(restConfig(), newNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	cri, readsRuntime := n.images.(criImages)
	cache := waitForCache(t, ctx, clients, n.name, func(c *v1alpha1.NodeImageCache) bool { return c.AgentVersion != "" })
	// What the runtime holds, read apart from the agent, is what it
	// publishes. Only the CRI reads it apart from the agent.
	if readsRuntime {
		snap, err := cri.rt.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cache = waitForCache(t, ctx, clients, n.name, func(c *v1alpha1.NodeImageCache) bool { return int(c.ImageCount) == len(snap.Images) })
		published, err := nodecache.NewNode(cache)
		if err != nil {
			t.Fatal(err)
		}
		for _, img := range snap.Images {
			for _, tag := range img.RepoTags {
				got, ok := published.Image(tag)
				if !ok || !slices.Equal(got, shortLayers(img.Layers)) {
					t.Errorf("%s published with layers %v, the runtime has %v", tag, got, img.Layers)
				}
			}
		}
	}

	ref, img := n.pushNewImage(t, ctx, "agent-e2e")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "puller", Namespace: clients.Namespace},
		Spec: corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: new(int64(0)),
			Containers: []corev1.Container{{Name: "c", Image: ref, Command: []string{"sleep", "infinity"}}}}}
	if err := clients.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// When the pull ended: the CRI tells at once; elsewhere the kubelet
	// reports the container's image a moment after.
	var pulled time.Time
	for pulled.IsZero() {
		if readsRuntime {
			if has, err := cri.Has(ctx, ref); err != nil {
				t.Fatal(err)
			} else if has {
				pulled = time.Now()
			}
		} else {
			if err := clients.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				t.Fatal(err)
			}
			if s := pod.Status.ContainerStatuses; len(s) == 1 && s[0].ImageID != "" {
				pulled = time.Now()
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s was never pulled", ref)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		cache = waitForCache(t, ctx, clients, n.name, func(*v1alpha1.NodeImageCache) bool { return true })
		published, err := nodecache.NewNode(cache)
		if err != nil {
			t.Fatal(err)
		}
		if layers, ok := published.Image(ref); ok {
			t.Logf("the pull shows after %v", time.Since(pulled).Round(time.Millisecond))
			manifest, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			want := make([]nodecache.RuntimeLayer, len(manifest.Layers))
			for i, l := range manifest.Layers {
				want[i] = nodecache.RuntimeLayer{Digest: l.Digest.String(), Size: l.Size}
			}
			if !slices.Equal(layers, shortLayers(want)) {
				t.Errorf("%s published with layers %v, pushed with %v", ref, layers, want)
			}
			break
		}
		if time.Since(pulled) > n.published {
			t.Fatalf("%s was pulled %v ago and is not in the NodeImageCache", ref, time.Since(pulled).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitForCache waits for node's NodeImageCache to satisfy ok.
func waitForCache(t *testing.T, ctx context.Context, clients *kube.Clients, node string, ok func(*v1alpha1.NodeImageCache) bool) *v1alpha1.NodeImageCache {
	t.Helper()
	for {
		cache := &v1alpha1.NodeImageCache{}
		err := clients.Client.Get(ctx, client.ObjectKey{Name: node}, cache)
		if err == nil && ok(cache) {
			return cache
		}
		if ctx.Err() != nil {
			t.Fatalf("NodeImageCache %s: %v (last read: %d images, %+v)", node, err, cache.ImageCount, cache.Conditions)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func shortLayers(ls []nodecache.RuntimeLayer) []v1alpha1.Layer {
	out := make([]v1alpha1.Layer, len(ls))
	for i, l := range ls {
		out[i] = v1alpha1.Layer{Digest: nodecache.Short(l.Digest), Size: l.Size}
	}
	return out
}
