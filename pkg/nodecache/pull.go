package nodecache

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
)

// Pull is how far a node has come in pulling an image.
type Pull struct {
	// Done is the bytes of the image's layers the node has, fetched or
	// held before, of Size, all of them. Size is 0 when the image's
	// layers are not known: Done is then what the node's pulls fetched.
	Done int64 `json:"done"`
	Size int64 `json:"size,omitempty"`
	// BytesPerSecond is the rate of the layers fetching.
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
}

// Fetching sums what a node fetches: the bytes fetched and the size of
// the layers in pulls, and the rate of those not done; ok is false when
// none fetches.
func Fetching(pulls []v1alpha1.LayerPull) (p Pull, ok bool) {
	for _, f := range pulls {
		p.Done += f.Done
		p.Size += f.Size
		if f.Done < f.Size {
			p.BytesPerSecond += f.BytesPerSecond
			ok = true
		}
	}
	return p, ok
}

// Plus adds the bytes and rates of two pulls: what several nodes fetch.
func (p Pull) Plus(q Pull) Pull {
	return Pull{Done: p.Done + q.Done, Size: p.Size + q.Size, BytesPerSecond: p.BytesPerSecond + q.BytesPerSecond}
}

// Annotation is p as the value of v1alpha1.PullingAnnotation.
func (p Pull) Annotation() string {
	// A struct of integers always encodes.
	b, _ := json.Marshal(p)
	return string(b)
}

// ParsePulling reads a value of v1alpha1.PullingAnnotation.
func ParsePulling(value string) (Pull, error) {
	var p Pull
	if err := json.Unmarshal([]byte(value), &p); err != nil {
		return Pull{}, fmt.Errorf("reading annotation %s %q: %w", v1alpha1.PullingAnnotation, value, err)
	}
	return p, nil
}

// ImagePull says how far node (nil when its cache is not known), which
// is fetching pulls, has come with an image of layers (nil when not
// known); ok is false when it fetches none of them.
func ImagePull(node *Node, layers []v1alpha1.Layer, pulls []v1alpha1.LayerPull) (p Pull, ok bool) {
	fetching := make(map[string]v1alpha1.LayerPull, len(pulls))
	for _, f := range pulls {
		fetching[f.Digest] = f
	}
	if layers == nil {
		// The size of the layers fetching is not the image's.
		p, ok = Fetching(pulls)
		p.Size = 0
		return p, ok
	}
	for _, l := range layers {
		p.Size += l.Size
		f, pulling := fetching[l.Digest]
		switch {
		case node != nil && node.holds(l.Digest):
			p.Done += l.Size
		case pulling:
			p.Done += f.Done
			if f.Done < f.Size {
				p.BytesPerSecond += f.BytesPerSecond
				ok = true
			}
		}
	}
	return p, ok
}

// Left is how long the rest of the pull takes at its rate, 0 when that
// is not known.
func (p Pull) Left() time.Duration {
	if p.Size == 0 || p.BytesPerSecond == 0 {
		return 0
	}
	return time.Duration(float64(p.Size-p.Done) / float64(p.BytesPerSecond) * float64(time.Second)).Round(time.Second)
}

// String says how far the pull is, as "pulling 2.1/5.3 GiB (180 MiB/s,
// ~17s)": in the unit of its size, or of what it fetched when its size
// is not known ("pulling 2.1 GiB (180 MiB/s)").
func (p Pull) String() string {
	unit, name := float64(1<<20), "MiB"
	if max(p.Size, p.Done) >= 1<<30 {
		unit, name = 1<<30, "GiB"
	}
	amount := fmt.Sprintf("%.1f %s", float64(p.Done)/unit, name)
	if p.Size > 0 {
		amount = fmt.Sprintf("%.1f/%.1f %s", float64(p.Done)/unit, float64(p.Size)/unit, name)
	}
	rate := fmt.Sprintf("%d MiB/s", p.BytesPerSecond>>20)
	if left := p.Left(); left > 0 {
		rate += ", ~" + left.String()
	}
	return "pulling " + amount + " (" + rate + ")"
}
