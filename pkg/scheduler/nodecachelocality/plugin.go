// Package nodecachelocality is the NodeCacheLocality scheduler plugin: it
// prefers, for a Pod, the feasible nodes that lack the fewest bytes of its
// images' layers, as the nodes' asrl-prepull-agents publish them in
// NodeImageCaches. SWE-bench-style images share most of their layers, so
// a node that has a sibling of the Pod's image is nearly as good as one
// that has the image; the in-tree ImageLocality sees neither layers nor
// more than 50 images a node. Pulls a node has yet to finish count too: a
// node pulls one image after another.
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
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/yaml"

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
	// registry reads the layers of images no node lists from the
	// registries Args allows, with the scheduler's docker config
	// (DOCKER_CONFIG) for credentials.
	registry imageRegistry

	// mu guards the nodes' queues: those used since rotated, and those
	// used in the queueLifetime before.
	mu                sync.Mutex
	queues, oldQueues map[string]queue
	rotated           time.Time
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
	_ fwk.SignPlugin     = (*Plugin)(nil)
)

// Args are the plugin's arguments, its pluginConfig entry's args in a
// KubeSchedulerConfiguration.
type Args struct {
	metav1.TypeMeta `json:",inline"`
	// AllowedRegistries are the registries, or registry and repository
	// prefixes, whose images the plugin may read from their registry when
	// no node lists them; none (the default): it reads no registry. Pods
	// name any host they like, and the scheduler reads what they name from
	// inside the cluster's network with its credentials, so a cluster
	// admin lists the registries sandbox images come from — those of the
	// SandboxPolicies' allowedRegistries.
	AllowedRegistries []string `json:"allowedRegistries,omitempty"`
}

// DecodeArgs reads the plugin's args as kube-scheduler hands them to New:
// nil when the configuration has none, else their JSON. An unknown field
// or a prefix that is not a registry is an error naming it.
func DecodeArgs(obj runtime.Object) (Args, error) {
	var args Args
	if obj == nil {
		return args, nil
	}
	raw, ok := obj.(*runtime.Unknown)
	if !ok {
		return args, fmt.Errorf("%s args: got %T, want their JSON", Name, obj)
	}
	if err := yaml.UnmarshalStrict(raw.Raw, &args); err != nil {
		return args, fmt.Errorf("%s args in the scheduler's configuration: %w", Name, err)
	}
	for i, r := range args.AllowedRegistries {
		one, err := nodecache.ParseRegistries(r)
		if err == nil && len(one) != 1 {
			err = fmt.Errorf("%q is not one registry or registry and repository prefix", r)
		}
		if err != nil {
			return args, fmt.Errorf("%s args in the scheduler's configuration: allowedRegistries[%d]: %w", Name, i, err)
		}
	}
	return args, nil
}

// New starts following NodeImageCaches and waits a while for them.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	clients, err := kube.ForConfig(h.KubeConfig(), "")
	if err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx)
	p := &Plugin{caches: informer.Start(ctx, clients.Client), queues: map[string]queue{}, rotated: time.Now(),
		registry: allowedOnly{&registry.Layers{Failed: func(ref string, err error) {
			log.Info("Reading an image's layers from its registry failed: Pods of it get no node-cache preference for now", "image", ref, "err", err)
		}}, args.AllowedRegistries}}
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
// to what the others cost. It skips the Pod — the other plugins decide —
// when no image of the Pod is known, or every node costs the same.
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	podImages := images.OfPod(&pod.Spec)
	candidates := make([]candidate, len(nodes))
	var s scores
	var ok bool
	p.caches.Read(func(x *nodecache.Index) {
		p.mu.Lock()
		if time.Since(p.rotated) > queueLifetime {
			p.queues, p.oldQueues, p.rotated = map[string]queue{}, p.queues, time.Now()
		}
		for i, n := range nodes {
			candidates[i] = candidate{name: n.Node().Name, queued: p.queued(x, n)}
		}
		p.mu.Unlock()
		s, ok = score(x, podImages, candidates, p.registry)
	})
	if !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	state.Write(stateKey, s)
	return nil
}

// queue is the layers a node's Pods that have not started need, as of
// the node's generation: a node's Pods change far less often than Pods
// are scored.
type queue struct {
	generation int64
	layers     []v1alpha1.Layer
}

// queueLifetime is how long a node's queue is kept unused: nodes gone
// are forgotten after one to two of it.
const queueLifetime = 10 * time.Minute

// queued are the distinct layers of the images of node's Pods that have
// not started: what the node is pulling, or will pull first; p.mu is
// held. The registry is not read for them, only asked what it has read.
func (p *Plugin) queued(x *nodecache.Index, node fwk.NodeInfo) []v1alpha1.Layer {
	name := node.Node().Name
	q, ok := p.queues[name]
	if !ok {
		q, ok = p.oldQueues[name]
	}
	if ok && q.generation == node.GetGeneration() {
		p.queues[name] = q
		return q.layers
	}
	pods := make([]*corev1.Pod, len(node.GetPods()))
	for i, pi := range node.GetPods() {
		pods[i] = pi.GetPod()
	}
	layers := queuedLayers(x, pods, p.registry)
	p.queues[name] = queue{generation: node.GetGeneration(), layers: layers}
	return layers
}

// queuedLayers are the distinct layers of the images of those of a node's
// pods that have not started (bound or assumed, not yet Running), that
// index or what the registry has read knows.
func queuedLayers(index *nodecache.Index, pods []*corev1.Pod, reg imageRegistry) []v1alpha1.Layer {
	var waiting []string
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil && (pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending) {
			waiting = append(waiting, images.OfPod(&pod.Spec)...)
		}
	}
	return index.PodLayers(waiting, reg.Cached)
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

// candidate is a feasible node and the layers its Pods that have not
// started need: what it is pulling, or will pull first.
type candidate struct {
	name   string
	queued []v1alpha1.Layer
}

// imageRegistry knows the layers of images no node lists: Known reads
// them in the background, Cached answers only from what was read.
type imageRegistry interface {
	Known(ref string) ([]v1alpha1.Layer, bool)
	Cached(ref string) ([]v1alpha1.Layer, bool)
}

// allowedOnly is an imageRegistry that knows only the images within
// prefixes: of others it reads nothing.
type allowedOnly struct {
	imageRegistry
	prefixes []string
}

func (a allowedOnly) Known(ref string) ([]v1alpha1.Layer, bool) {
	if !images.WithinAny(ref, a.prefixes) {
		return nil, false
	}
	return a.imageRegistry.Known(ref)
}

// score scores nodes for a Pod of images by what placing it there costs,
// from fwk.MaxNodeScore (least) to 0 (most). The cost counts bytes of the
// layers of the Pod's images that index knows (or the registry, for images
// no node lists) and of the layers queued on the node that it lacks: the
// Pod's wait — what the node must pull before the Pod can start, the
// queued layers first, since a node pulls one image after another (the
// kubelet's default) — plus what the Pod adds to the node's pulls, which
// later Pods wait for. So a node holding the image but busy pulling others
// loses to one lacking a little, and a Pod joins a node already pulling
// its image rather than pull it again elsewhere. It reports false when it
// has no preference: no image is known, or every node costs the same.
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
	for i, n := range nodes {
		if len(n.queued) == 0 {
			// It waits for its own layers and adds them.
			cost[i] *= 2
			continue
		}
		var added []v1alpha1.Layer
		for _, l := range layers {
			if !slices.ContainsFunc(n.queued, func(q v1alpha1.Layer) bool { return q.Digest == l.Digest }) {
				added = append(added, l)
			}
		}
		before := index.Missing(n.queued, n.name)
		extra := index.Missing(added, n.name)
		cost[i] = before + 2*extra
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
