package nodecache

import "github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"

// PodLayers are the distinct layers of a Pod's images: images of one Pod
// (a sidecar on the same base) share layers, which a node pulls once.
func PodLayers(images ...[]v1alpha1.Layer) []v1alpha1.Layer {
	seen := map[string]bool{}
	var out []v1alpha1.Layer
	for _, layers := range images {
		for _, l := range layers {
			if !seen[l.Digest] {
				seen[l.Digest] = true
				out = append(out, l)
			}
		}
	}
	return out
}

// Size is the bytes of layers, each counted as often as it comes.
func Size(layers []v1alpha1.Layer) int64 {
	var size int64
	for _, l := range layers {
		size += l.Size
	}
	return size
}

// Scores turns the bytes each node lacks into scores from 0 to maxScore,
// as a scheduler's score plugin gives them: the node lacking least gets
// maxScore, the one lacking most 0, the rest in proportion. When every
// node lacks the same, all get maxScore: the cache has no preference.
func Scores(missing []int64, maxScore int64) []int64 {
	scores := make([]int64, len(missing))
	if len(missing) == 0 {
		return scores
	}
	least, most := missing[0], missing[0]
	for _, m := range missing {
		least, most = min(least, m), max(most, m)
	}
	for i, m := range missing {
		if most == least {
			scores[i] = maxScore
			continue
		}
		scores[i] = (most - m) * maxScore / (most - least)
	}
	return scores
}
