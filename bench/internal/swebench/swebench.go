// Package swebench is the benchmarks' SWE-bench-shaped images: every image
// of a family shares a base layer, the images of one repository share an
// environment layer, and each task instance has a small layer of its own.
package swebench

import (
	"fmt"
	"hash/fnv"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
)

// The layers' sizes, as SWE-bench's evaluation images have them.
const (
	BaseSize        = 3 << 30
	EnvironmentSize = 2 << 30
	InstanceSize    = 300 << 20
)

// Image is an image and its layers, base first.
type Image struct {
	Family, Name string
	Layers       []v1alpha1.Layer
}

// Of is the image of instance of repo in family; families share no
// layers, so a benchmark can give each of its trials images of their own.
func Of(family string, repo, instance int) Image { return In("docker.io", family, repo, instance) }

// In is Of with the image in registry, a host[:port].
func In(registry, family string, repo, instance int) Image {
	return Image{
		Family: family,
		Name:   fmt.Sprintf("%s/%s/repo-%d:instance-%d", registry, family, repo, instance),
		Layers: []v1alpha1.Layer{
			{Digest: digest(family), Size: BaseSize},
			{Digest: digest(fmt.Sprintf("%s/%d", family, repo)), Size: EnvironmentSize},
			{Digest: digest(fmt.Sprintf("%s/%d/%d", family, repo, instance)), Size: InstanceSize},
		},
	}
}

// digest is a layer digest as NodeImageCaches keep them, made up from s.
func digest(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return fmt.Sprintf("%0*x", v1alpha1.LayerDigestLength, h.Sum64())
}

// NodeCache is the NodeImageCache of a node holding images.
func NodeCache(node string, images []Image) *v1alpha1.NodeImageCache {
	held := map[string][]v1alpha1.Layer{}
	for _, img := range images {
		held[img.Name] = img.Layers
	}
	return testobjects.NodeImageCache(node, held)
}
