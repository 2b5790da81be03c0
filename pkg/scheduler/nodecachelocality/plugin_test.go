package nodecachelocality

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testobjects"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// GiB-sized layers of SWE-bench-style images, for the scoring table and
// the scheduler test: a shared base, an environment per repository, and
// each instance's own.
var (
	base      = v1alpha1.Layer{Digest: "0000000000000001", Size: 8 << 30}
	djangoEnv = v1alpha1.Layer{Digest: "0000000000000002", Size: 1 << 30}
	flaskEnv  = v1alpha1.Layer{Digest: "0000000000000003", Size: 1 << 30}
	django1   = v1alpha1.Layer{Digest: "0000000000000004", Size: 100 << 20}
	django2   = v1alpha1.Layer{Digest: "0000000000000005", Size: 100 << 20}
	sidecar   = v1alpha1.Layer{Digest: "0000000000000006", Size: 10 << 20}
)

func TestScore(t *testing.T) {
	index := nodecache.NewIndex()
	for _, c := range []*v1alpha1.NodeImageCache{
		testobjects.NodeImageCache("has-django-1", map[string][]v1alpha1.Layer{"swebench/django-1:v1": {base, djangoEnv, django1}}),
		testobjects.NodeImageCache("has-django-2", map[string][]v1alpha1.Layer{"swebench/django-2:v1": {base, djangoEnv, django2}}),
		testobjects.NodeImageCache("has-flask", map[string][]v1alpha1.Layer{"swebench/flask-1:v1": {base, flaskEnv}}),
		testobjects.NodeImageCache("has-sidecar", map[string][]v1alpha1.Layer{"sidecar:1": {sidecar}}),
		testobjects.NodeImageCache("empty", nil),
	} {
		n, err := nodecache.NewNode(c)
		if err != nil {
			t.Fatal(err)
		}
		index.Set(n)
	}
	all := []string{"has-django-1", "has-django-2", "has-flask", "has-sidecar", "empty", "no-agent"}
	django3 := v1alpha1.Layer{Digest: "0000000000000007", Size: 100 << 20}
	reg := &registryAnswers{layers: map[string][]v1alpha1.Layer{
		"docker.io/swebench/django-3:v1": {base, djangoEnv, django3},
		"docker.io/swebench/flask-2:v1":  {base, flaskEnv, django3},
	}}
	for _, tt := range []struct {
		name   string
		images []string
		nodes  []string
		pods   map[string][]*corev1.Pod // on the nodes
		want   string                   // the scores in the nodes' order, or "skip"
	}{
		{"the node with the image first, then its siblings by what they share",
			[]string{"docker.io/swebench/django-1:v1"}, all, nil, "[100 98 87 0 0 0]"},
		{"an image known only from a sibling's node scores the same way",
			[]string{"docker.io/swebench/django-2:v1"}, all, nil, "[98 100 87 0 0 0]"},
		{"a Pod's images count together: the sidecar's node holds little of them",
			[]string{"docker.io/swebench/django-1:v1", "docker.io/library/sidecar:1"}, all, nil, "[100 98 87 0 0 0]"},
		{"an image no node lists nor the registry knows: no preference", []string{"docker.io/swebench/astropy-1:v1"}, all, nil, "skip"},
		{"an image no node lists: its layers from the registry",
			[]string{"docker.io/swebench/django-3:v1"}, all, nil, "[100 100 88 0 0 0]"},
		{"every candidate lacks the same: no preference", []string{"docker.io/swebench/django-1:v1"}, []string{"empty", "no-agent"}, nil, "skip"},
		{"only the feasible nodes are scored", []string{"docker.io/swebench/flask-1:v1"}, []string{"has-django-1", "empty"}, nil, "[100 0]"},
		{"no nodes", []string{"docker.io/swebench/django-1:v1"}, nil, nil, "skip"},
		{"a node pulling another image must pull that first",
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]*corev1.Pod{"has-django-1": {pending("docker.io/swebench/flask-1:v1")}}, "[95 100 88 0 0 0]"},
		{"a node's running Pods pull nothing",
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]*corev1.Pod{"has-django-1": {running("docker.io/swebench/flask-1:v1")}}, "[100 98 87 0 0 0]"},
		{"a node pulling the same image: joining it adds no pull",
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]*corev1.Pod{"has-django-2": {pending("docker.io/swebench/django-1:v1")}}, "[100 99 87 0 0 0]"},
		{"an unlisted image being pulled counts if the registry was read for it",
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]*corev1.Pod{"has-django-1": {pending("docker.io/swebench/flask-2:v1")}}, "[94 100 88 0 0 0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nodes := make([]candidate, len(tt.nodes))
			for i, n := range tt.nodes {
				nodes[i] = candidate{name: n, queued: queuedLayers(index, tt.pods[n], reg)}
			}
			reg.asked = nil
			s, ok := score(index, tt.images, nodes, reg)
			got := "skip"
			if ok {
				ordered := make([]int64, len(tt.nodes))
				for i, n := range tt.nodes {
					ordered[i] = s[n]
				}
				got = fmt.Sprint(ordered)
			}
			if got != tt.want {
				t.Errorf("scores %s, want %s", got, tt.want)
			}
			for _, img := range reg.asked {
				if !slices.Contains(tt.images, img) {
					t.Errorf("the registry was asked to read %s, not an image of the Pod", img)
				}
			}
		})
	}
}

// pending is a Pod of image bound to a node that has not started it;
// running one that has.
func pending(image string) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: image}}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
}

func running(image string) *corev1.Pod {
	p := pending(image)
	p.Status.Phase = corev1.PodRunning
	return p
}

// registryAnswers stands in for registry.Layers, whose reads need a
// registry; asked is what Known was asked.
type registryAnswers struct {
	layers map[string][]v1alpha1.Layer
	asked  []string
}

func (r *registryAnswers) Known(ref string) ([]v1alpha1.Layer, bool) {
	r.asked = append(r.asked, ref)
	return r.Cached(ref)
}

func (r *registryAnswers) Cached(ref string) ([]v1alpha1.Layer, bool) {
	l, ok := r.layers[ref]
	return l, ok
}

// A Pod's scores over 1,000 nodes holding 20 SWE-bench-style images each:
// PreScore's work for every Pod, which must stay small next to the
// scheduler's own (~0.5 ms a Pod on 1,000 nodes).
func BenchmarkScore(b *testing.B) {
	index := nodecache.NewIndex()
	image := func(repo, instance int) (string, []v1alpha1.Layer) {
		return fmt.Sprintf("docker.io/swebench/repo-%d:instance-%d", repo, instance), []v1alpha1.Layer{base,
			{Digest: fmt.Sprintf("%016x", 0x100000+repo), Size: 2 << 30}, {Digest: fmt.Sprintf("%016x", 0x200000+repo*100+instance), Size: 300 << 20}}
	}
	nodes := make([]candidate, 1000)
	for i := range nodes {
		nodes[i].name = fmt.Sprintf("node-%d", i)
		held := map[string][]v1alpha1.Layer{}
		for j := range 20 {
			name, layers := image((i+j)%50, (i*7+j)%20)
			held[name] = layers
		}
		n, err := nodecache.NewNode(testobjects.NodeImageCache(nodes[i].name, held))
		if err != nil {
			b.Fatal(err)
		}
		index.Set(n)
	}
	pod, _ := image(7, 3)
	podImages := []string{pod}
	for b.Loop() {
		if _, ok := score(index, podImages, nodes, &registryAnswers{}); !ok {
			b.Fatal("no preference")
		}
	}
}
