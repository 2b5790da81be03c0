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

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
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
	p := &Plugin{caches: informer.Start(ctx, clients.Client)}
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !p.caches.WaitForSync(syncCtx) {
		klog.FromContext(ctx).Info("NodeImageCaches not listed yet: NodeCacheLocality scores nothing until they are", "waited", syncTimeout)
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
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Node().Name
	}
	var s scores
	var ok bool
	p.caches.Read(func(x *nodecache.Index) { s, ok = score(x, images.OfPod(&pod.Spec), names) })
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
func score(index *nodecache.Index, podImages []string, nodes []string) (scores, bool) {
	layers := index.PodLayers(podImages)
	if len(layers) == 0 || len(nodes) == 0 {
		return nil, false
	}
	missing := index.MissingOn(layers, nodes)
	if slices.Min(missing) == slices.Max(missing) {
		return nil, false
	}
	s := make(scores, len(nodes))
	for i, v := range nodecache.Scores(missing, fwk.MaxNodeScore) {
		s[nodes[i]] = v
	}
	return s, true
}
