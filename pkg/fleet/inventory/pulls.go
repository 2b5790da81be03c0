package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// How long ReadPulls reads the images' layers from their registries: each
// image, and all of them.
const (
	registryReadTimeout = 3 * time.Second
	registryReadBudget  = 5 * time.Second
	// cacheReads is how many NodeImageCaches ReadPulls reads at once.
	cacheReads = 8
)

// ReadPulls finds how far the nodes of the run's Pods that are not Ready
// are with pulling their images (PullOf): it reads those nodes'
// NodeImageCaches and, for the Pods whose node is fetching layers, their
// images' layers from the registries, within a few seconds; without them a
// Pod's pull is its node's fetching together. A node without a
// NodeImageCache (no asrl-prepull-agent) shows no pull. The error says
// what could not be read, for the caller to mention: what was read is
// kept.
func (inv *Inventory) ReadPulls(ctx context.Context, c client.Client) error {
	waiting := map[string][]*corev1.Pod{}
	for i := range inv.Pods {
		p := &inv.Pods[i]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !tracker.PodReady(p) && SandboxImage(p) != "" {
			waiting[p.Spec.NodeName] = append(waiting[p.Spec.NodeName], p)
		}
	}
	caches := map[string]*v1alpha1.NodeImageCache{}
	var mu sync.Mutex
	var errs []error
	// Each object may be up to a MiB: a few at a time.
	var reads errgroup.Group
	reads.SetLimit(cacheReads)
	for node := range waiting {
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
	inv.Pulls = map[types.NamespacedName]nodecache.Pull{}
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
