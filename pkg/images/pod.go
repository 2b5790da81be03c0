package images

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// OfPod are the distinct images a Pod's init containers, containers and
// image volumes name — what its node pulls to start it — normalised
// (Normalize; a reference that is not one is kept as written), sorted.
func OfPod(spec *corev1.PodSpec) []string {
	var refs []string
	for _, c := range spec.InitContainers {
		refs = append(refs, c.Image)
	}
	for _, c := range spec.Containers {
		refs = append(refs, c.Image)
	}
	for _, v := range spec.Volumes {
		if v.Image != nil {
			refs = append(refs, v.Image.Reference)
		}
	}
	for i, ref := range refs {
		if full, err := Normalize(ref); err == nil {
			refs[i] = full
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}
