package fleet

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/registry"
)

// readNodeCaches sets what each cluster's nodes (those its node selector
// picks) lack of each image of the plan, from their NodeImageCaches, for
// image-affinity placement. A cluster whose caches cannot be read (no
// agents, no CRD, no right to list) gives no signal: it is warned about,
// and its images are placed as if no cache knew them.
func (f *Fleet) readNodeCaches(ctx context.Context) {
	indexes := make([]*nodecache.Index, len(f.clusters))
	nodes := make([][]string, len(f.clusters))
	for i, c := range f.clusters {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		err := c.Clients.Client.List(ctx, list, client.MatchingLabels(c.spec.NodeSelector))
		if err == nil {
			for _, n := range list.Items {
				nodes[i] = append(nodes[i], n.Name)
			}
			indexes[i], err = informer.Snapshot(ctx, c.Clients.Client, nodes[i])
		}
		if err != nil {
			f.log.Error(err, "Image-affinity: reading the nodes' image caches failed; placing without them", "cluster", c.Name)
			indexes[i] = nil
		}
	}
	layers := f.poolLayers(ctx, func(ref string) []v1alpha1.Layer {
		for _, x := range indexes {
			if x != nil {
				if l := x.PodLayers([]string{ref}, nil); len(l) > 0 {
					return l
				}
			}
		}
		return nil
	})
	for _, p := range f.plan.Pools {
		if len(layers[p.Image]) == 0 {
			continue
		}
		for i, c := range f.clusters {
			if indexes[i] == nil || len(nodes[i]) == 0 {
				continue
			}
			if c.lacking == nil {
				c.lacking = map[string]int64{}
			}
			c.lacking[p.Image] = slices.Min(indexes[i].MissingOn(layers[p.Image], nodes[i]))
		}
	}
}

// poolLayers are the layers of the plan's pools' images: what listed
// gives, and for the images it gives none of, what their registries tell
// (readRegistries).
func (f *Fleet) poolLayers(ctx context.Context, listed func(ref string) []v1alpha1.Layer) map[string][]v1alpha1.Layer {
	layers := map[string][]v1alpha1.Layer{}
	var unlisted []string
	for _, p := range f.plan.Pools {
		if l := listed(p.Image); len(l) > 0 {
			layers[p.Image] = l
		} else {
			unlisted = append(unlisted, p.Image)
		}
	}
	maps.Copy(layers, f.readRegistries(ctx, unlisted))
	return layers
}

// readRegistries reads the layers of images no node lists from their
// registries (with the docker config's credentials), so that a new image
// is placed where its base already is. Start-up waits for this at most a
// minute, each image 30 s; an image not read then is placed without its
// layers, and the failures and skips are warned about at once.
func (f *Fleet) readRegistries(ctx context.Context, images []string) map[string][]v1alpha1.Layer {
	ctx, cancel := context.WithTimeout(ctx, registryBudget)
	defer cancel()
	r := (&registry.Layers{}).GetAll(ctx, images, 30*time.Second)
	if len(r.Failed) > 0 {
		f.log.Info("Image-affinity: images no node holds could not be read from their registries, and are placed without their layers",
			"failed", len(r.Failed), "of", len(images), "first", r.Failed[0])
	}
	if len(r.Skipped) > 0 {
		f.log.Info("Image-affinity: images no node holds were not read (their registry did not answer, or start-up's budget for reading ran out), and are placed without their layers",
			"skipped", len(r.Skipped), "of", len(images), "budget", registryBudget, "first", r.Skipped[0])
	}
	return r.Found
}

// registryBudget bounds how long start-up reads registries for placement.
const registryBudget = time.Minute
