package inventory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// How long ReadPulls reads the images' layers from their registries: each
// image, and all of them.
const (
	registryReadTimeout = 3 * time.Second
	registryReadBudget  = 5 * time.Second
	// cacheReads is how many NodeImageCaches ReadPulls reads at once, and
	// cacheReadsMax how many in all.
	cacheReads    = 8
	cacheReadsMax = 32
)

// ReadPulls finds how far the nodes of the run's Pods that are not Ready
// are with pulling their images (PullOf). It lists the NodeImageCaches'
// metadata, whose annotation sums what each node is fetching, and reads
// in full the caches of the nodes fetching (at most cacheReadsMax, each
// may be a MiB) and, for their Pods, the images' layers from the
// registries, within a few seconds: a Pod's pull is then its image's
// layers against what its node holds and fetches. Past that cap, or
// without the image's layers, a Pod's pull is its node's fetching
// together, with no total. A node without a NodeImageCache (no
// asrl-prepull-agent) shows no pull. The error says what could not be
// read, for the caller to mention: what was read is kept.
func (inv *Inventory) ReadPulls(ctx context.Context, c client.Client) error {
	waiting := map[string][]*corev1.Pod{}
	for i := range inv.Pods {
		p := &inv.Pods[i]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !kube.PodReady(p) && SandboxImage(p) != "" {
			waiting[p.Spec.NodeName] = append(waiting[p.Spec.NodeName], p)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	metas := &metav1.PartialObjectMetadataList{}
	metas.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("NodeImageCacheList"))
	if err := c.List(ctx, metas); err != nil {
		if notServed(err) {
			return nil
		}
		return fmt.Errorf("listing the NodeImageCaches: %w", err)
	}
	fetching := map[string]nodecache.Pull{}
	for _, m := range metas.Items {
		if value, ok := m.Annotations[v1alpha1.PullingAnnotation]; ok && len(waiting[m.Name]) > 0 {
			if sum, err := nodecache.ParsePulling(value); err == nil && sum.Done < sum.Size {
				fetching[m.Name] = sum
			}
		}
	}
	inv.Pulls = map[types.NamespacedName]nodecache.Pull{}
	full, summed := PullReads(fetching, cacheReadsMax)
	for node, sum := range summed {
		for _, p := range waiting[node] {
			inv.Pulls[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = nodecache.Pull{Done: sum.Done, BytesPerSecond: sum.BytesPerSecond}
		}
	}
	caches, errs := readCaches(ctx, c, full)
	var images []string
	for node := range caches {
		for _, p := range waiting[node] {
			if img := SandboxImage(p); !slices.Contains(images, img) {
				images = append(images, img)
			}
		}
	}
	if len(images) == 0 {
		return errors.Join(errs...)
	}
	rctx, cancel := context.WithTimeout(ctx, registryReadBudget)
	defer cancel()
	layers := (&registry.Layers{}).GetAll(rctx, images, registryReadTimeout).Found
	for name, cache := range caches {
		node, err := nodecache.NewNode(cache)
		if err != nil {
			errs = append(errs, fmt.Errorf("the NodeImageCache of node %s: %w", name, err))
			node = nil
		}
		for _, p := range waiting[name] {
			if pull, ok := nodecache.ImagePull(node, layers[SandboxImage(p)], cache.Pulls); ok {
				inv.Pulls[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = pull
			}
		}
	}
	return errors.Join(errs...)
}

// PullReads chooses, of the nodes fetching (by what their annotations
// sum), the max whose caches are read in full to match their pulls to
// the images' layers: those with the most bytes left, then by name. The
// others are summed: their pulls are shown as the node's fetching.
func PullReads(fetching map[string]nodecache.Pull, max int) (full []string, summed map[string]nodecache.Pull) {
	nodes := slices.SortedFunc(maps.Keys(fetching), func(a, b string) int {
		return cmp.Or(cmp.Compare(fetching[b].Size-fetching[b].Done, fetching[a].Size-fetching[a].Done), cmp.Compare(a, b))
	})
	summed = map[string]nodecache.Pull{}
	for i, node := range nodes {
		if i < max {
			full = append(full, node)
		} else {
			summed[node] = fetching[node]
		}
	}
	return full, summed
}

// readCaches reads the NodeImageCaches of nodes, a few at a time.
func readCaches(ctx context.Context, c client.Client, nodes []string) (map[string]*v1alpha1.NodeImageCache, []error) {
	caches := map[string]*v1alpha1.NodeImageCache{}
	var mu sync.Mutex
	var errs []error
	var reads errgroup.Group
	reads.SetLimit(cacheReads)
	for _, node := range nodes {
		reads.Go(func() error {
			cache := &v1alpha1.NodeImageCache{}
			err := c.Get(ctx, client.ObjectKey{Name: node}, cache)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && len(cache.Pulls) > 0:
				caches[node] = cache
			case err != nil && !notServed(err):
				errs = append(errs, fmt.Errorf("reading the NodeImageCache of node %s: %w", node, err))
			}
			return nil
		})
	}
	_ = reads.Wait()
	return caches, errs
}

// notServed reports whether err says the cluster has no NodeImageCaches
// to read, or no right to read them: then no pull is shown, and that is
// not worth a warning.
func notServed(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apimeta.IsNoMatchError(err)
}

// PullOf says how far pod's node is with pulling its image, as ReadPulls
// found; ok is false when it found no pull for it.
func (inv *Inventory) PullOf(pod *corev1.Pod) (nodecache.Pull, bool) {
	if pod == nil {
		return nodecache.Pull{}, false
	}
	p, ok := inv.Pulls[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]
	return p, ok
}

// SandboxImage is the image of pod's sandbox container, its first; "" when
// it has none.
func SandboxImage(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	return pod.Spec.Containers[0].Image
}
