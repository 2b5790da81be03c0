package nodecachelocality

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// GiB-sized layers of SWE-bench-style images: a shared base, an
// environment per repository, and each instance's own.
var (
	base      = v1alpha1.Layer{Digest: "0000000000000001", Size: 8 << 30}
	djangoEnv = v1alpha1.Layer{Digest: "0000000000000002", Size: 1 << 30}
	flaskEnv  = v1alpha1.Layer{Digest: "0000000000000003", Size: 1 << 30}
	django1   = v1alpha1.Layer{Digest: "0000000000000004", Size: 100 << 20}
	django2   = v1alpha1.Layer{Digest: "0000000000000005", Size: 100 << 20}
	sidecar   = v1alpha1.Layer{Digest: "0000000000000006", Size: 10 << 20}
)

// nodeCache is a NodeImageCache of node holding images (name → layers).
func nodeCache(node string, images map[string][]v1alpha1.Layer) *v1alpha1.NodeImageCache {
	c := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: node}}
	index := map[v1alpha1.Layer]int32{}
	for _, name := range slices.Sorted(maps.Keys(images)) {
		img := v1alpha1.CachedImage{Names: []string{name}}
		for _, l := range images[name] {
			i, ok := index[l]
			if !ok {
				i = int32(len(c.Layers))
				index[l] = i
				c.Layers = append(c.Layers, l)
			}
			img.Layers = append(img.Layers, i)
		}
		c.Images = append(c.Images, img)
	}
	return c
}

func TestScore(t *testing.T) {
	index := nodecache.NewIndex()
	for _, c := range []*v1alpha1.NodeImageCache{
		nodeCache("has-django-1", map[string][]v1alpha1.Layer{"swebench/django-1:v1": {base, djangoEnv, django1}}),
		nodeCache("has-django-2", map[string][]v1alpha1.Layer{"swebench/django-2:v1": {base, djangoEnv, django2}}),
		nodeCache("has-flask", map[string][]v1alpha1.Layer{"swebench/flask-1:v1": {base, flaskEnv}}),
		nodeCache("has-sidecar", map[string][]v1alpha1.Layer{"sidecar:1": {sidecar}}),
		nodeCache("empty", nil),
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
		name    string
		images  []string
		nodes   []string
		pulling map[string][]string // images of the nodes' Pods not started
		want    string              // the scores in the nodes' order, or "skip"
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
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]string{"has-django-1": {"docker.io/swebench/flask-1:v1"}}, "[95 100 88 0 0 0]"},
		{"a node pulling the same image: joining it adds no pull",
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]string{"has-django-2": {"docker.io/swebench/django-1:v1"}}, "[100 99 87 0 0 0]"},
		{"an unlisted image being pulled counts if the registry was read for it",
			[]string{"docker.io/swebench/django-1:v1"}, all, map[string][]string{"has-django-1": {"docker.io/swebench/flask-2:v1"}}, "[94 100 88 0 0 0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nodes := make([]candidate, len(tt.nodes))
			for i, n := range tt.nodes {
				nodes[i] = candidate{name: n, pulling: tt.pulling[n]}
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
		n, err := nodecache.NewNode(nodeCache(nodes[i].name, held))
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
