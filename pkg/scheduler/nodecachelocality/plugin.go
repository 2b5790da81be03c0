// Package nodecachelocality is the NodeCacheLocality scheduler plugin: it
// prefers, for a Pod, the feasible nodes that lack the fewest bytes of its
// images' layers, as the nodes' asrl-prepull-agents publish them in
// NodeImageCaches. SWE-bench-style images share most of their layers, so
// a node that has a sibling of the Pod's image is nearly as good as one
// that has the image; the in-tree ImageLocality sees neither layers nor
// more than 50 images a node.
//
// The caches come from an informer the plugin runs; scoring makes no API
// call. cmd/asrl-scheduler is kube-scheduler with this plugin compiled in.
package nodecachelocality

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "NodeCacheLocality"

// syncTimeout bounds how long the scheduler's start waits for the
// caches: without the CRD or the right to list them, it starts anyway
// and the plugin scores nothing until they come.
const syncTimeout = 30 * time.Second

// Plugin is NodeCacheLocality.
type Plugin struct {
	mu     sync.RWMutex
	index  *nodecache.Index
	synced cache.InformerSynced
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
	_ fwk.SignPlugin     = (*Plugin)(nil)
)

// New starts the plugin's informer on NodeImageCaches and waits a while
// for it to sync.
func New(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	clients, err := kube.ForConfig(h.KubeConfig(), "")
	if err != nil {
		return nil, err
	}
	p := &Plugin{index: nodecache.NewIndex()}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: listWatch(clients.Client),
		ObjectType:    &v1alpha1.NodeImageCache{},
		Transform:     indexCache,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    p.set,
			UpdateFunc: func(_, obj any) { p.set(obj) },
			DeleteFunc: p.delete,
		},
	})
	go informer.RunWithContext(ctx)
	p.synced = informer.HasSynced
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		klog.FromContext(ctx).Info("NodeImageCaches not listed yet: NodeCacheLocality scores nothing until they are", "waited", syncTimeout)
	}
	return p, nil
}

// Name is the plugin's name.
func (p *Plugin) Name() string { return Name }

// SignPod signs the Pod by its images, the only part of it the score
// depends on, so the scheduler may reuse a score for Pods alike.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: fwk.ImageNamesSignerName, Value: podImages(pod)}}, nil
}

// stateKey is where PreScore leaves the scores for Score.
const stateKey fwk.StateKey = Name

// scores are the Pod's scores by node name.
type scores map[string]int64

// Clone shares the map: it is not written after PreScore.
func (s scores) Clone() fwk.StateData { return s }

// PreScore scores every feasible node at once, since a score is relative
// to what the others lack. It skips the Pod — the other plugins decide —
// when no image of the Pod is known, or every node lacks the same.
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Node().Name
	}
	p.mu.RLock()
	s, ok := score(p.index, podImages(pod), names)
	p.mu.RUnlock()
	if !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	state.Write(stateKey, s)
	return nil
}

// Score is the node's score from PreScore.
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, node fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("reading %s's PreScore state: %w", Name, err))
	}
	return data.(scores)[node.Node().Name], nil
}

// ScoreExtensions is nil: PreScore's scores are normalised already.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// score scores nodes for a Pod of images by the bytes each lacks of the
// images' layers that index knows, from fwk.MaxNodeScore (lacks least)
// to 0 (lacks most). It reports false when it has no preference: no
// image is known, or every node lacks the same.
func score(index *nodecache.Index, images []string, nodes []string) (scores, bool) {
	var known [][]v1alpha1.Layer
	for _, img := range images {
		if layers, ok := index.Layers(img); ok {
			known = append(known, layers)
		}
	}
	if len(known) == 0 || len(nodes) == 0 {
		return nil, false
	}
	layers := nodecache.PodLayers(known...)
	missing := make([]int64, len(nodes))
	for i, n := range nodes {
		missing[i] = index.Missing(n, layers)
	}
	if slices.Min(missing) == slices.Max(missing) {
		return nil, false
	}
	s := make(scores, len(nodes))
	for i, v := range nodecache.Scores(missing, fwk.MaxNodeScore) {
		s[nodes[i]] = v
	}
	return s, true
}

// podImages are the distinct images a Pod's containers, init containers
// and image volumes name, normalised and sorted.
func podImages(pod *corev1.Pod) []string {
	var refs []string
	for _, c := range pod.Spec.InitContainers {
		refs = append(refs, c.Image)
	}
	for _, c := range pod.Spec.Containers {
		refs = append(refs, c.Image)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			refs = append(refs, v.Image.Reference)
		}
	}
	for i, ref := range refs {
		if full, err := images.Normalize(ref); err == nil {
			refs[i] = full
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// indexedCache is what the informer keeps of a NodeImageCache: its
// metadata and the node's index, not the object, which for a node with
// thousands of images is a MiB.
type indexedCache struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// node is nil for an object the plugin cannot use.
	node *nodecache.Node
}

// DeepCopyObject shares the node: it is never changed once built.
func (c *indexedCache) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// indexCache turns a listed or watched NodeImageCache into what the
// informer keeps.
func indexCache(obj any) (any, error) {
	c, ok := obj.(*v1alpha1.NodeImageCache)
	if !ok {
		// A deletion's last state, already turned.
		return obj, nil
	}
	out := &indexedCache{ObjectMeta: metav1.ObjectMeta{Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion}}
	node, err := nodecache.NewNode(c)
	if err != nil {
		klog.Background().Error(err, "Ignoring a NodeImageCache", "nodeimagecache", c.Name)
		return out, nil
	}
	out.node = node
	return out, nil
}

func (p *Plugin) set(obj any) {
	c := obj.(*indexedCache)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.node == nil {
		p.index.Delete(c.Name)
		return
	}
	p.index.Set(c.node)
}

func (p *Plugin) delete(obj any) {
	if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = gone.Obj
	}
	c, ok := obj.(*indexedCache)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.index.Delete(c.Name)
}

// listWatch lists and watches NodeImageCaches.
func listWatch(c client.WithWatch) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &v1alpha1.NodeImageCacheList{}
			err := c.List(ctx, list, &client.ListOptions{Raw: &opts})
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &v1alpha1.NodeImageCacheList{}, &client.ListOptions{Raw: &opts})
		},
	}
}
