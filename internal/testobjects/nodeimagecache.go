package testobjects

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// NodeImageCache is the NodeImageCache of node holding images (name →
// layers, base first), as an agent writes it: each layer listed once
// however many images share it.
func NodeImageCache(node string, images map[string][]v1alpha1.Layer) *v1alpha1.NodeImageCache {
	c := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: node}}
	at := map[v1alpha1.Layer]int32{}
	for _, name := range slices.Sorted(maps.Keys(images)) {
		img := v1alpha1.CachedImage{Names: []string{name}}
		for _, l := range images[name] {
			i, ok := at[l]
			if !ok {
				i = int32(len(c.Layers))
				at[l] = i
				c.Layers = append(c.Layers, l)
			}
			img.Layers = append(img.Layers, i)
		}
		c.Images = append(c.Images, img)
	}
	return c
}
