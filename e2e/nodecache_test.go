package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/nodecache/agent"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testimages"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// The node cache reads the runtime's images with the layers they were
// built from: compressed digests and sizes, base first.
func TestRuntimeRead(t *testing.T) {
	if local == nil {
		t.Skip("needs the suite's own real node")
	}
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
	built, err := remote.Image(inRegistry(t, ref), remote.WithContext(ctx))
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

// inRegistry is where the node's registry on loopback keeps image ref.
func inRegistry(t *testing.T, ref string) name.Reference {
	t.Helper()
	upstream, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := name.ParseReference(local.RegistryAddr()+"/"+upstream.Context().RepositoryStr()+":"+upstream.Identifier(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return pushed
}

// The agent publishes the node's images as the runtime reads them, and a
// pod's pull of a new image shows in the object within two seconds.
func TestAgentPublishesTheNodesImages(t *testing.T) {
	requireLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	clients, err := kube.ForConfig(restConfig(), newNamespace(t))
	if err != nil {
		t.Fatal(err)
	}
	node := local.RealNodeName()
	endpoint := "unix://" + local.CRISocket()
	rt := startAgent(t, ctx)
	// What the runtime holds, read apart from the agent, is what it publishes.
	snap, err := rt.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cache := waitForCache(t, ctx, clients, node, func(c *v1alpha1.NodeImageCache) bool { return int(c.ImageCount) == len(snap.Images) })
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

	ref, img := pushNewImage(t, ctx, "agent-e2e")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "puller", Namespace: clients.Namespace},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: new(int64(0)),
			Containers: []corev1.Container{{Name: "c", Image: ref, Command: []string{"sleep", "infinity"}}}}}
	if err := clients.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cri, err := criclient.NewRemoteImageService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	var pulled time.Time
	for pulled.IsZero() {
		status, err := cri.ImageStatus(ctx, &criapi.ImageSpec{Image: ref}, false)
		if err != nil {
			t.Fatal(err)
		}
		if status.GetImage() != nil {
			pulled = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		cache = waitForCache(t, ctx, clients, node, func(*v1alpha1.NodeImageCache) bool { return true })
		n, err := nodecache.NewNode(cache)
		if err != nil {
			t.Fatal(err)
		}
		if layers, ok := n.Image(ref); ok {
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
		if time.Since(pulled) > 2*time.Second {
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

// startAgent runs the node agent for the real node until the test ends,
// and returns its runtime connection.
func startAgent(t *testing.T, ctx context.Context) *agent.Runtime {
	t.Helper()
	rt, _ := runAgent(t, ctx, t.TempDir())
	return rt
}

// runAgent runs the node agent for the real node with stateDir, and
// returns its runtime connection and a function that stops it (at the
// latest when the test ends).
func runAgent(t *testing.T, ctx context.Context, stateDir string) (*agent.Runtime, func()) {
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
	a := &agent.Agent{Node: local.RealNodeName(), Runtime: rt, Client: api, Version: "e2e", Resync: time.Minute,
		Settle: 300 * time.Millisecond, Poll: time.Second, PullInterval: time.Second, StateDir: stateDir, Log: klog.NewKlogr().WithName("agent"),
		Limits: nodecache.PullLimits{AllowedRegistries: []string{"docker.io", "registry.k8s.io"}}}
	go func() { agentDone <- a.Run(agentCtx) }()
	stop := sync.OnceFunc(func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
		rt.Close()
	})
	t.Cleanup(stop)
	return rt, stop
}

// pushNewImage pushes an image no node has: busybox with a layer of its
// own, under a new name in repository docker.io/sandbox-fleet/NAME.
func pushNewImage(t *testing.T, ctx context.Context, name string) (string, v1.Image) {
	t.Helper()
	return pushImage(t, ctx, "docker.io/sandbox-fleet/"+name, 4096)
}

// pushImage pushes busybox with a random layer of size bytes of its own
// to repository repo, under a new tag.
func pushImage(t *testing.T, ctx context.Context, repo string, size int64) (string, v1.Image) {
	t.Helper()
	base, err := remote.Image(inRegistry(t, testimages.Busybox), remote.WithContext(ctx))
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
	if err := remote.Write(inRegistry(t, ref), img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	return ref, img
}
