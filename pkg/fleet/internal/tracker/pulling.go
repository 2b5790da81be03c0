package tracker

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// watchPulling watches the metadata of the cluster's NodeImageCaches,
// whose annotation v1alpha1.PullingAnnotation sums what each node is
// fetching, until ctx ends. Metadata only: the objects are up to 1 MiB,
// their metadata a few hundred bytes. It returns nil, and nothing is
// watched, when the caches cannot be listed — no node agents, or no
// right to — as pulls are then only not shown.
func watchPulling(ctx context.Context, cfg *rest.Config) toolscache.Store {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	resource := v1alpha1.GroupVersion.WithResource("nodeimagecaches")
	if _, err := mc.Resource(resource).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil
	}
	inf := metadatainformer.NewFilteredMetadataInformer(mc, resource, "", 0, toolscache.Indexers{}, nil).Informer()
	if err := inf.SetTransform(cache.TransformStripManagedFields()); err != nil {
		return nil
	}
	go inf.RunWithContext(ctx)
	return inf.GetStore()
}

// Pulling sums what the nodes of the run's Pods that wait to be Ready
// are fetching, as their NodeImageCaches' annotations say; it is zero
// when they fetch nothing or the caches cannot be read. The first call
// starts the watch of the caches; calls see them once it has listed them.
func (t *Tracker) Pulling() nodecache.Pull {
	t.cachesOnce.Do(func() { t.caches = t.watchCaches() })
	if t.caches == nil {
		return nodecache.Pull{}
	}
	t.mu.Lock()
	nodes := map[string]bool{}
	for _, node := range t.waiting {
		nodes[node] = true
	}
	t.mu.Unlock()
	var sum nodecache.Pull
	for node := range nodes {
		obj, found, err := t.caches.GetByKey(node)
		if err != nil || !found {
			continue
		}
		value, ok := obj.(metav1.Object).GetAnnotations()[v1alpha1.PullingAnnotation]
		if !ok {
			continue
		}
		// A value the agent did not write counts for nothing.
		if p, err := nodecache.ParsePulling(value); err == nil {
			sum = sum.Plus(p)
		}
	}
	return sum
}
