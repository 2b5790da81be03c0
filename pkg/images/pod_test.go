package images_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/images"
)

func TestOfPod(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Image: "busybox:1.36"}},
		Containers:     []corev1.Container{{Image: "swebench/django-1:v1"}, {Image: "docker.io/library/busybox:1.36"}, {Image: "Not A Reference"}},
		Volumes:        []corev1.Volume{{VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example.com/data"}}}},
	}}
	want := []string{"Not A Reference", "docker.io/library/busybox:1.36", "docker.io/swebench/django-1:v1", "registry.example.com/data:latest"}
	if got := images.OfPod(&pod.Spec); !slices.Equal(got, want) {
		t.Errorf("OfPod = %q, want %q", got, want)
	}
}
