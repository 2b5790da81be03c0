package nodecache

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"unique"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// Node is a node's cache, indexed to answer what a node has. Its images
// and layers are interned (package unique): the nodes holding an image
// share one copy of its names and layers. A reader following 1,000 nodes
// of 5,000 images each keeps tens of thousands of distinct images, not
// five million, and a Node is a few bytes an image.
type Node struct {
	Name string
	// layers are the node's layers, ordered by digest.
	layers   []unique.Handle[v1alpha1.Layer]
	images   []unique.Handle[image]
	complete bool
}

// image is an image as a node lists it, in a comparable form to be
// interned: keys are its imageKeys (of its names, and "@" and its digest)
// joined by newlines, which no reference holds; layers are its layers,
// base first, each as its digest's length, its digest and its size, in
// uvarints.
type image struct {
	keys, layers string
}

// eachKey yields the keys the image is listed under.
func (m image) eachKey() iter.Seq[string] {
	if m.keys == "" {
		return func(func(string) bool) {}
	}
	return strings.SplitSeq(m.keys, "\n")
}

// has reports whether the image is listed under key.
func (m image) has(key string) bool {
	for k := range m.eachKey() {
		if k == key {
			return true
		}
	}
	return false
}

// Layers are the image's layers, base first.
func (m image) Layers() []v1alpha1.Layer {
	var out []v1alpha1.Layer
	for b := []byte(m.layers); len(b) > 0; {
		n, w := binary.Uvarint(b)
		digest := string(b[w : w+int(n)])
		b = b[w+int(n):]
		size, w := binary.Uvarint(b)
		b = b[w:]
		out = append(out, v1alpha1.Layer{Digest: digest, Size: int64(size)})
	}
	return out
}

// NewNode indexes a NodeImageCache. Layer indices out of the table's range
// are an error: the object is not what an agent writes.
func NewNode(cache *v1alpha1.NodeImageCache) (*Node, error) {
	n := &Node{Name: cache.Name, layers: make([]unique.Handle[v1alpha1.Layer], 0, len(cache.Layers)),
		images:   make([]unique.Handle[image], 0, len(cache.Images)),
		complete: !meta.IsStatusConditionFalse(cache.Conditions, v1alpha1.ConditionComplete)}
	for _, l := range cache.Layers {
		n.layers = append(n.layers, unique.Make(l))
	}
	slices.SortFunc(n.layers, func(a, b unique.Handle[v1alpha1.Layer]) int { return cmp.Compare(a.Value().Digest, b.Value().Digest) })
	n.layers = slices.Compact(n.layers)
	var keys, layers []byte
	for i, img := range cache.Images {
		keys, layers = keys[:0], layers[:0]
		for _, li := range img.Layers {
			if li < 0 || int(li) >= len(cache.Layers) {
				return nil, fmt.Errorf("NodeImageCache %s: images[%d] names layer %d of %d", cache.Name, i, li, len(cache.Layers))
			}
			l := cache.Layers[li]
			layers = binary.AppendUvarint(layers, uint64(len(l.Digest)))
			layers = append(layers, l.Digest...)
			layers = binary.AppendUvarint(layers, uint64(l.Size))
		}
		addKey := func(key string) {
			if len(keys) > 0 {
				keys = append(keys, '\n')
			}
			keys = append(keys, key...)
		}
		for _, name := range img.Names {
			if key, ok := imageKey(name); ok {
				addKey(key)
			}
		}
		if img.Digest != "" {
			addKey("@" + img.Digest)
		}
		n.images = append(n.images, unique.Make(image{keys: string(keys), layers: string(layers)}))
	}
	return n, nil
}

// Image returns the layers of the image ref names, if the node has it. It
// looks through the node's images: an Index answers many lookups faster.
func (n *Node) Image(ref string) ([]v1alpha1.Layer, bool) {
	key, ok := imageKey(ref)
	if !ok {
		return nil, false
	}
	for _, h := range n.images {
		if img := h.Value(); img.has(key) {
			return img.Layers(), true
		}
	}
	return nil, false
}

// Missing is the bytes of layers the node lacks: what it would pull to
// run an image made of them.
func (n *Node) Missing(layers []v1alpha1.Layer) int64 {
	var missing int64
	for _, l := range layers {
		if !n.holds(l.Digest) {
			missing += l.Size
		}
	}
	return missing
}

// holds reports whether the node has the layer of digest.
func (n *Node) holds(digest string) bool {
	_, ok := slices.BinarySearchFunc(n.layers, digest, func(h unique.Handle[v1alpha1.Layer], d string) int {
		return cmp.Compare(h.Value().Digest, d)
	})
	return ok
}

// Complete reports whether the node's cache lists every image it holds;
// when not, a layer it lacks by the list may still be there.
func (n *Node) Complete() bool { return n.complete }

// Presence is how much of an image each node holds.
type Presence struct {
	Image string `json:"image"`
	// SizeBytes is the image's compressed size. Its layers are learnt from
	// a node that has it, else from its registry; when neither tells,
	// they are unknown (Known false) and every node lacks the whole image.
	SizeBytes int64 `json:"sizeBytes"`
	Known     bool  `json:"known"`
	// Nodes are every node, those holding most of the image first.
	Nodes []NodePresence `json:"nodes"`
}

// NodePresence is how much of an image a node holds.
type NodePresence struct {
	Node         string `json:"node"`
	PresentBytes int64  `json:"presentBytes"`
	MissingBytes int64  `json:"missingBytes"`
	// Complete is false when the node's cache does not list all it holds
	// (TooManyImages), so it may hold more than it shows.
	Complete bool `json:"complete"`
}

// Presences computes, for each image, how many of its bytes each node of
// index holds. The layers of an image no node has come from registry,
// when it has them.
func Presences(index *Index, images []string, registry map[string][]v1alpha1.Layer) []Presence {
	sorted := slices.SortedFunc(maps.Values(index.nodes), func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]Presence, 0, len(images))
	for _, img := range images {
		p := Presence{Image: img}
		layers, known := index.Layers(img)
		if !known {
			layers, known = registry[img]
		}
		p.Known, p.SizeBytes = known, Size(layers)
		for _, n := range sorted {
			missing := n.Missing(layers)
			p.Nodes = append(p.Nodes, NodePresence{Node: n.Name, Complete: n.Complete(),
				PresentBytes: p.SizeBytes - missing, MissingBytes: missing})
		}
		slices.SortStableFunc(p.Nodes, func(a, b NodePresence) int { return cmp.Compare(b.PresentBytes, a.PresentBytes) })
		out = append(out, p)
	}
	return out
}
