package nodecache

import (
	"slices"
	"strings"
	"unique"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// Index is the caches of a cluster's nodes, kept for scoring Pods: every
// image some node lists with its layers, so a Pod's images are looked up
// once, not once per node; and for each layer the nodes holding it, so
// what every node lacks of a Pod's layers is summed over the few layers'
// lists of holders rather than looked up node by node. It is not safe
// for concurrent use.
type Index struct {
	nodes map[string]*Node
	// ids number the nodes densely, for holders; free are ids of nodes
	// gone, to use again.
	ids  map[string]int32
	free []int32
	// holders are the ids of the nodes holding each layer.
	holders map[string][]int32
	// images are each image some node lists, by imageKey, with how many
	// nodes list it.
	images map[string]indexedImage
}

type indexedImage struct {
	image unique.Handle[image]
	nodes int
}

// NewIndex is an empty index.
func NewIndex() *Index {
	return &Index{nodes: map[string]*Node{}, ids: map[string]int32{}, holders: map[string][]int32{}, images: map[string]indexedImage{}}
}

// Set puts node's cache in the index, in place of what it held of it.
func (x *Index) Set(node *Node) {
	x.Delete(node.Name)
	x.nodes[node.Name] = node
	id := int32(len(x.ids))
	if n := len(x.free); n > 0 {
		id, x.free = x.free[n-1], x.free[:n-1]
	}
	x.ids[node.Name] = id
	for _, l := range node.layers {
		digest := l.Value().Digest
		x.holders[digest] = append(x.holders[digest], id)
	}
	for _, h := range node.images {
		for key := range h.Value().eachKey() {
			x.images[key] = indexedImage{image: h, nodes: x.images[key].nodes + 1}
		}
	}
}

// Delete takes node name's cache out of the index.
func (x *Index) Delete(name string) {
	old, ok := x.nodes[name]
	if !ok {
		return
	}
	id := x.ids[name]
	delete(x.nodes, name)
	delete(x.ids, name)
	x.free = append(x.free, id)
	for _, l := range old.layers {
		digest := l.Value().Digest
		holders := x.holders[digest]
		if i := slices.Index(holders, id); i >= 0 {
			holders[i] = holders[len(holders)-1]
			holders = holders[:len(holders)-1]
		}
		if len(holders) == 0 {
			delete(x.holders, digest)
		} else {
			x.holders[digest] = holders
		}
	}
	for _, h := range old.images {
		for key := range h.Value().eachKey() {
			if e := x.images[key]; e.nodes > 1 {
				e.nodes--
				x.images[key] = e
			} else {
				delete(x.images, key)
			}
		}
	}
}

// Layers are the layers of image ref, if some node lists it.
func (x *Index) Layers(ref string) ([]v1alpha1.Layer, bool) {
	key, ok := imageKey(ref)
	if !ok {
		return nil, false
	}
	e, ok := x.images[key]
	if !ok {
		return nil, false
	}
	return e.image.Value().Layers(), true
}

// PodLayers are the distinct layers of a Pod's images: of those some node
// lists, and of the others those unlisted knows, if not nil (a registry's
// answers); nil when none is known.
func (x *Index) PodLayers(images []string, unlisted func(ref string) ([]v1alpha1.Layer, bool)) []v1alpha1.Layer {
	var known [][]v1alpha1.Layer
	for _, img := range images {
		layers, ok := x.Layers(img)
		if !ok && unlisted != nil {
			layers, ok = unlisted(img)
		}
		if ok {
			known = append(known, layers)
		}
	}
	return PodLayers(known...)
}

// Lacking is what each node with a cache lacks of layers.
func (x *Index) Lacking(layers []v1alpha1.Layer) map[string]int64 {
	held, total := x.held(layers)
	missing := make(map[string]int64, len(x.ids))
	for name, id := range x.ids {
		missing[name] = total - held[id]
	}
	return missing
}

// MissingOn is what each of nodes lacks of layers; a node without a cache
// in the index (no agent runs there) is taken to lack them all.
func (x *Index) MissingOn(layers []v1alpha1.Layer, nodes []string) []int64 {
	held, total := x.held(layers)
	missing := make([]int64, len(nodes))
	for i, name := range nodes {
		missing[i] = total
		if id, ok := x.ids[name]; ok {
			missing[i] -= held[id]
		}
	}
	return missing
}

// Missing is what node lacks of layers: all of them if it has no cache
// in the index.
func (x *Index) Missing(layers []v1alpha1.Layer, node string) int64 {
	if n, ok := x.nodes[node]; ok {
		return n.Missing(layers)
	}
	return Size(layers)
}

// held is the bytes of layers each node holds, by id, and their total.
func (x *Index) held(layers []v1alpha1.Layer) ([]int64, int64) {
	held := make([]int64, len(x.ids)+len(x.free))
	var total int64
	for _, l := range layers {
		total += l.Size
		for _, id := range x.holders[l.Digest] {
			held[id] += l.Size
		}
	}
	return held, total
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
