// Package nodecache is the per-node image cache: what a node's runtime
// holds, layer by layer, as the NodeImageCache its asrl-prepull-agent
// publishes, and what placing an image on a node would cost — the bytes of
// the image's layers the node lacks. Building the object and computing
// the cost are pure functions of plain data.
package nodecache

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

// RuntimeImage is an image as the runtime reports it.
type RuntimeImage struct {
	// RepoTags and RepoDigests are its references, as CRI lists them.
	RepoTags, RepoDigests []string
	// ManifestDigest is the digest of its manifest, "sha256:...".
	ManifestDigest string
	// Layers are its compressed layers, base first, with full digests.
	Layers []RuntimeLayer
}

// RuntimeLayer is a compressed layer with its full "sha256:..." digest.
type RuntimeLayer struct {
	Digest string
	Size   int64
}

// Snapshot is what a read of the runtime found.
type Snapshot struct {
	Images     []RuntimeImage
	Filesystem v1alpha1.ImageFilesystem
	// Partial says what could not be read, when something could not;
	// the images are then listed without some or all of their layers.
	Partial []string
}

// Short cuts a "sha256:..." digest to the prefix NodeImageCaches keep.
func Short(digest string) string {
	hex := digest[strings.IndexByte(digest, ':')+1:]
	return hex[:min(len(hex), v1alpha1.LayerDigestLength)]
}

// MaxObjectBytes is what a NodeImageCache may take in JSON: the API
// server's limit is 1.5 MiB, and etcd's a little more; staying at 1 MiB
// leaves room for metadata and keeps each update cheap.
const MaxObjectBytes = 1 << 20

// Build fills cache's layer table, images and counts from what the runtime
// holds, and its Complete condition. Images are listed largest first;
// when they would not fit in maxBytes of JSON, the smaller ones are left
// out and Complete is False with reason TooManyImages. The result does not
// depend on the order images are given in.
func Build(cache *v1alpha1.NodeImageCache, imgs []RuntimeImage, maxBytes int) {
	type sized struct {
		img  RuntimeImage
		size int64
	}
	all := make([]sized, 0, len(imgs))
	// index is each layer's place in the table, or -1 until an image
	// that uses it is listed: the node's layers are counted even when
	// not all are listed.
	index := map[string]int32{}
	for _, img := range imgs {
		s := sized{img: img}
		for _, l := range img.Layers {
			s.size += l.Size
			index[Short(l.Digest)] = -1
		}
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b sized) int {
		return cmp.Or(cmp.Compare(b.size, a.size), cmp.Compare(a.img.ManifestDigest, b.img.ManifestDigest),
			slices.Compare(a.img.RepoTags, b.img.RepoTags))
	})
	cache.ImageCount, cache.LayerCount = int32(len(all)), int32(len(index))
	cache.Layers, cache.Images = nil, nil
	// What the object takes besides the images and layers, and then each
	// image and its new layers, counted as they are added.
	size := baseSize(cache)
	for _, s := range all {
		entry := v1alpha1.CachedImage{Names: names(s.img), Digest: Short(s.img.ManifestDigest),
			Layers: make([]int32, 0, len(s.img.Layers))}
		var added []v1alpha1.Layer
		for _, l := range s.img.Layers {
			d := Short(l.Digest)
			i := index[d]
			if i < 0 {
				i = int32(len(cache.Layers) + len(added))
				index[d] = i
				added = append(added, v1alpha1.Layer{Digest: d, Size: l.Size})
			}
			entry.Layers = append(entry.Layers, i)
		}
		cost := jsonSize(entry) + 1
		for _, l := range added {
			cost += len(l.String()) + 3
		}
		if size+cost > maxBytes {
			break
		}
		size += cost
		cache.Layers = append(cache.Layers, added...)
		cache.Images = append(cache.Images, entry)
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionComplete, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllListed,
		Message: fmt.Sprintf("all %d images are listed", len(all))}
	if len(cache.Images) < len(all) {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonTooManyImages
		cond.Message = fmt.Sprintf("the %d largest of %d images are listed: the rest would take the object over %d bytes",
			len(cache.Images), len(all), maxBytes)
	}
	meta.SetStatusCondition(&cache.Conditions, cond)
}

// Observe fills cache from a read of the runtime at now: its images and
// layers (Build), its image filesystem, RuntimeReachable True, and
// Complete False with reason PartialData when part of the read failed.
func Observe(cache *v1alpha1.NodeImageCache, snap Snapshot, now time.Time, maxBytes int) {
	cache.ObservedTime = metav1.NewTime(now)
	cache.ImageFilesystem = snap.Filesystem
	Build(cache, snap.Images, maxBytes)
	if len(snap.Partial) > 0 {
		meta.SetStatusCondition(&cache.Conditions, metav1.Condition{Type: v1alpha1.ConditionComplete,
			Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPartialData, LastTransitionTime: metav1.NewTime(now),
			Message: clip("the runtime listed its images, but could not give: " + strings.Join(snap.Partial, "; "))})
	}
	meta.SetStatusCondition(&cache.Conditions, metav1.Condition{Type: v1alpha1.ConditionRuntimeReachable,
		Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReachable, LastTransitionTime: metav1.NewTime(now),
		Message: fmt.Sprintf("the runtime listed %d images", len(snap.Images))})
}

// Unreachable records on cache that the runtime could not be read at now.
// What an earlier read found stays: an agent's restart or a runtime's
// restart does not empty a node's cache.
func Unreachable(cache *v1alpha1.NodeImageCache, err error, now time.Time) {
	since := "no read has worked yet"
	if !cache.ObservedTime.IsZero() {
		since = "the images are as read at " + cache.ObservedTime.UTC().Format(time.RFC3339)
	}
	meta.SetStatusCondition(&cache.Conditions, metav1.Condition{Type: v1alpha1.ConditionRuntimeReachable,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonUnreachable,
		LastTransitionTime: metav1.NewTime(now), Message: clip(fmt.Sprintf("%v; %s", err, since))})
}

// clip keeps a condition message readable and under the API's limit.
func clip(msg string) string {
	const limit = 1024
	if len(msg) <= limit {
		return msg
	}
	return msg[:limit-3] + "..."
}

// Encode writes cache as JSON to w, a layer and an image at a time: a
// 5,000-image object is a MiB of JSON, which encoding/json would build
// in memory (with its growth, three times over) on every write.
func Encode(w io.Writer, cache *v1alpha1.NodeImageCache) error {
	head := *cache
	head.Layers, head.Images = nil, nil
	b, err := json.Marshal(&head)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	bw.Write(b[:len(b)-1])
	bw.WriteString(`,"layers":[`)
	for i, l := range cache.Layers {
		if i > 0 {
			bw.WriteByte(',')
		}
		// Hex digits, a colon and digits: nothing to escape.
		bw.WriteByte('"')
		bw.WriteString(l.String())
		bw.WriteByte('"')
	}
	bw.WriteString(`],"images":[`)
	enc := json.NewEncoder(bw)
	for i := range cache.Images {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(&cache.Images[i]); err != nil {
			return err
		}
	}
	bw.WriteString("]}")
	return bw.Flush()
}

// names are the references an image is listed under, in their familiar
// form: its tags, or its digest references when it has none.
func names(img RuntimeImage) []string {
	refs := img.RepoTags
	if len(refs) == 0 {
		refs = img.RepoDigests
	}
	out := make([]string, len(refs))
	for i, ref := range refs {
		out[i] = images.Familiar(ref)
	}
	slices.Sort(out)
	return out
}

// baseSize is what the object takes without images and layers, with room
// for the Complete condition set after them.
func baseSize(cache *v1alpha1.NodeImageCache) int {
	const conditionRoom = 512
	return jsonSize(cache) + len(`,"layers":[],"images":[]`) + conditionRoom
}

func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}
