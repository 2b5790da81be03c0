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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "NodeCacheLocality"

// syncTimeout bounds how long the scheduler's start waits for the
// caches: without the CRD or the right to list them, it starts anyway
// and the plugin scores nothing until they come.
const syncTimeout = 30 * time.Second

// Plugin is NodeCacheLocality.
type Plugin struct {
	caches *informer.Caches
	// registry reads the layers of images no node lists, with the
	// scheduler's docker config (DOCKER_CONFIG) for credentials.
	registry *registry.Layers
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
	_ fwk.SignPlugin     = (*Plugin)(nil)
)

// New starts following NodeImageCaches and waits a while for them.
func New(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	clients, err := kube.ForConfig(h.KubeConfig(), "")
	if err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx)
	p := &Plugin{caches: informer.Start(ctx, clients.Client), registry: &registry.Layers{Failed: func(ref string, err error) {
		log.Info("Reading an image's layers from its registry failed: Pods of it get no node-cache preference for now", "image", ref, "err", err)
	}}}
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !p.caches.WaitForSync(syncCtx) {
		log.Info("NodeImageCaches not listed yet: NodeCacheLocality scores nothing until they are", "waited", syncTimeout)
	}
	return p, nil
}

// Name is the plugin's name.
func (p *Plugin) Name() string { return Name }

// SignPod signs the Pod by its images, the only part of it the score
// depends on, so the scheduler may reuse a score for Pods alike.
func (p *Plugin) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: fwk.ImageNamesSignerName, Value: images.OfPod(&pod.Spec)}}, nil
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
	podImages := images.OfPod(&pod.Spec)
	candidates := make([]candidate, len(nodes))
	for i, n := range nodes {
		candidates[i].name = n.Node().Name
		for _, other := range n.GetPods() {
			if o := other.GetPod(); pulling(o) {
				candidates[i].pulling = append(candidates[i].pulling, images.OfPod(&o.Spec)...)
			}
		}
	}
	var s scores
	var ok bool
	p.caches.Read(func(x *nodecache.Index) { s, ok = score(x, podImages, candidates, p.registry) })
	if !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	state.Write(stateKey, s)
	return nil
}

// pulling reports whether pod's node may still be pulling its images: it
// is bound (or assumed) and has not started.
func pulling(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && (pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending)
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

// candidate is a feasible node and the images of its Pods that have not
// started: what it is pulling, or will pull first.
type candidate struct {
	name    string
	pulling []string
}

// imageRegistry knows the layers of images no node lists: Known reads
// them in the background, Cached answers only from what was read.
type imageRegistry interface {
	Known(ref string) ([]v1alpha1.Layer, bool)
	Cached(ref string) ([]v1alpha1.Layer, bool)
}

// score scores nodes for a Pod of images by what placing it there costs,
// from fwk.MaxNodeScore (least) to 0 (most). The cost counts bytes of the
// layers of the Pod's images that index knows (or the registry, for images
// no node lists) and of those of the node's Pods that have not started
// yet: the Pod's wait — what the node must pull before the Pod can start,
// its Pods' pulls first, since a node pulls one image after another (the
// kubelet's default) — plus what the Pod adds to the node's pulls, which
// later Pods wait for. So a node holding the image but busy pulling others
// loses to one lacking a little, and a Pod joins a node already pulling
// its image rather than pull it again elsewhere. The registry is read for
// the Pod's own images only, not for every Pod's on the nodes. It reports
// false when it has no preference: no image is known, or every node costs
// the same.
func score(index *nodecache.Index, podImages []string, nodes []candidate, reg imageRegistry) (scores, bool) {
	layers := index.PodLayers(podImages, reg.Known)
	if len(layers) == 0 || len(nodes) == 0 {
		return nil, false
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	cost := index.MissingOn(layers, names)
	known := map[string][]v1alpha1.Layer{}
	for i, n := range nodes {
		if len(n.pulling) == 0 {
			// It waits for its own layers and adds them.
			cost[i] *= 2
			continue
		}
		var queued [][]v1alpha1.Layer
		for _, img := range n.pulling {
			l, ok := known[img]
			if !ok {
				l = index.PodLayers([]string{img}, reg.Cached)
				known[img] = l
			}
			queued = append(queued, l)
		}
		before := index.Missing(nodecache.PodLayers(queued...), n.name)
		wait := index.Missing(nodecache.PodLayers(append(queued, layers)...), n.name)
		cost[i] = wait + wait - before
	}
	if slices.Min(cost) == slices.Max(cost) {
		return nil, false
	}
	s := make(scores, len(nodes))
	for i, v := range nodecache.Scores(cost, fwk.MaxNodeScore) {
		s[names[i]] = v
	}
	return s, true
}
