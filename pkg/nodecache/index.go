package nodecache

import (
	"strings"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Index is the caches of a cluster's nodes, kept for scoring Pods: each
// node's layers, and every image some node lists with its layers, so a
// Pod's images are looked up once, not once per node. It is not safe for
// concurrent use.
type Index struct {
	nodes map[string]*Node
	// images are the layers of each image some node lists, by normalised
	// name and by manifest digest prefix ("@" + digest), with how many
	// nodes list it.
	images map[string]indexedImage
}

type indexedImage struct {
	layers []v1alpha1.Layer
	nodes  int
}

// NewIndex is an empty index.
func NewIndex() *Index {
	return &Index{nodes: map[string]*Node{}, images: map[string]indexedImage{}}
}

// Set puts node's cache in the index, in place of what it held of it.
func (x *Index) Set(node *Node) {
	x.Delete(node.Name)
	x.nodes[node.Name] = node
	for key, layers := range node.images {
		x.images[key] = indexedImage{layers: layers, nodes: x.images[key].nodes + 1}
	}
}

// Delete takes node name's cache out of the index.
func (x *Index) Delete(name string) {
	old, ok := x.nodes[name]
	if !ok {
		return
	}
	delete(x.nodes, name)
	for key := range old.images {
		if e := x.images[key]; e.nodes > 1 {
			e.nodes--
			x.images[key] = e
		} else {
			delete(x.images, key)
		}
	}
}

// Node is node name's cache, nil if the index has none.
func (x *Index) Node(name string) *Node { return x.nodes[name] }

// Layers are the layers of image ref, if some node lists it.
func (x *Index) Layers(ref string) ([]v1alpha1.Layer, bool) {
	key, ok := imageKey(ref)
	if !ok {
		return nil, false
	}
	e, ok := x.images[key]
	return e.layers, ok
}

// PodLayers are the distinct layers of those of a Pod's images some node
// lists; nil when none is.
func (x *Index) PodLayers(images []string) []v1alpha1.Layer {
	var known [][]v1alpha1.Layer
	for _, img := range images {
		if layers, ok := x.Layers(img); ok {
			known = append(known, layers)
		}
	}
	return PodLayers(known...)
}

// Lacking is what each node with a cache lacks of layers.
func (x *Index) Lacking(layers []v1alpha1.Layer) map[string]int64 {
	missing := make(map[string]int64, len(x.nodes))
	for name, n := range x.nodes {
		missing[name] = n.Missing(layers)
	}
	return missing
}

// Missing is the bytes of layers node name lacks; a node without a cache
// in the index (no agent runs there) is taken to lack them all.
func (x *Index) Missing(name string, layers []v1alpha1.Layer) int64 {
	if n := x.nodes[name]; n != nil {
		return n.Missing(layers)
	}
	var all int64
	for _, l := range layers {
		all += l.Size
	}
	return all
}

// imageKey is how the index and Node name an image ref: by its
// normalised name, or "@" and its digest prefix when it has a digest.
func imageKey(ref string) (string, bool) {
	full, err := images.Normalize(ref)
	if err != nil {
		return "", false
	}
	if _, digest, ok := strings.Cut(full, "@"); ok {
		return "@" + Short(digest), true
	}
	return full, true
}
