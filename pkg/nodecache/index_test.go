package nodecache_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestIndex(t *testing.T) {
	base := layer("debian", 900)
	django := nodecache.RuntimeImage{RepoTags: []string{"docker.io/swebench/django-1:latest"}, ManifestDigest: digest("m-django"),
		Layers: []nodecache.RuntimeLayer{base, layer("django", 100)}}
	flask := nodecache.RuntimeImage{RepoTags: []string{"swebench/flask-1:v1"}, ManifestDigest: digest("m-flask"),
		Layers: []nodecache.RuntimeLayer{base, layer("flask", 50)}}
	x := nodecache.NewIndex()
	x.Set(namedNode(t, "a", django, flask))
	x.Set(namedNode(t, "b", flask))

	lookup := func(ref string) string {
		layers, ok := x.Layers(ref)
		if !ok {
			return "unknown"
		}
		return fmt.Sprint(layers)
	}
	check := func(when, ref string, want []nodecache.RuntimeLayer) {
		t.Helper()
		w := "unknown"
		if want != nil {
			w = fmt.Sprint(toLayers(want...))
		}
		if got := lookup(ref); got != w {
			t.Errorf("%s: Layers(%q) = %s, want %s", when, ref, got, w)
		}
	}
	check("on a", "swebench/django-1", django.Layers)
	check("by digest", "docker.io/swebench/django-1@"+digest("m-django"), django.Layers)
	check("on both", "docker.io/swebench/flask-1:v1", flask.Layers)
	check("nowhere", "swebench/flask-1:v2", nil)
	check("not a reference", "Not A Reference", nil)

	djangoLayers := toLayers(django.Layers...)
	if got := x.MissingOn(djangoLayers, []string{"a", "b", "no-agent"}); fmt.Sprint(got) != "[0 100 1000]" {
		t.Errorf("MissingOn(django, a, b, no-agent) = %v, want [0 100 1000]", got)
	}

	if got := x.Missing(djangoLayers, "b"); got != 100 {
		t.Errorf("Missing(django, b) = %d, want 100", got)
	}
	if got := x.Missing(djangoLayers, "no-agent"); got != 1000 {
		t.Errorf("Missing(django, no-agent) = %d, want 1000", got)
	}

	layers := x.PodLayers([]string{"swebench/django-1", "swebench/flask-1:v1", "unknown:1"}, nil)
	if want := toLayers(base, layer("django", 100), layer("flask", 50)); fmt.Sprint(layers) != fmt.Sprint(want) {
		t.Errorf("PodLayers = %v, want %v (each layer once, unknown images left out)", layers, want)
	}
	registry := func(ref string) ([]v1alpha1.Layer, bool) {
		if ref == "unknown:1" {
			return toLayers(base, layer("unknown", 7)), true
		}
		return nil, false
	}
	withRegistry := x.PodLayers([]string{"swebench/django-1", "unknown:1", "nowhere:1"}, registry)
	if want := toLayers(base, layer("django", 100), layer("unknown", 7)); fmt.Sprint(withRegistry) != fmt.Sprint(want) {
		t.Errorf("PodLayers with a registry = %v, want %v (an unlisted image's layers from it)", withRegistry, want)
	}
	if got := fmt.Sprint(x.Lacking(layers)); got != "map[a:0 b:100]" {
		t.Errorf("Lacking = %s, want a lacking nothing and b django's own layer", got)
	}

	// Node a removes flask: b still lists it. Then b goes: nobody does.
	x.Set(namedNode(t, "a", django))
	check("after a removed it", "swebench/flask-1:v1", flask.Layers)
	x.Delete("b")
	check("after b went", "swebench/flask-1:v1", nil)
	check("a's other image", "swebench/django-1", django.Layers)
	if got := fmt.Sprint(x.Lacking(djangoLayers)); got != "map[a:0]" {
		t.Errorf("after b went, Lacking(django) = %s, want map[a:0]", got)
	}
	// A node coming back takes b's freed place in the layers' holders.
	x.Set(namedNode(t, "c", flask))
	if got := fmt.Sprint(x.Lacking(toLayers(flask.Layers...))); got != "map[a:50 c:0]" {
		t.Errorf("with c, Lacking(flask) = %s, want map[a:50 c:0]", got)
	}
	x.Delete("a")
	x.Delete("a")
	check("empty", "swebench/django-1", nil)
}

// TestNodesShareTheirImages checks that the index of many nodes holding
// the same images keeps each image once: a node's own cost is a handle
// an image, and a handle and a holder id a layer (two of each image's
// layers here are its own), about 64 bytes an image it lists. Keeping
// each node's names and layers, as the index did, cost 590 bytes an
// image here, and 2.8 GiB at 1,000 nodes × 5,000 images
// (bench/nodecachescale).
func TestNodesShareTheirImages(t *testing.T) {
	const nodes, perNode = 100, 2500
	pool := testcri.SWEBench(5000)
	r := rand.New(rand.NewPCG(3, 4))
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	x := nodecache.NewIndex()
	for i := range nodes {
		held := make([]nodecache.RuntimeImage, perNode)
		for k, j := range r.Perm(len(pool))[:perNode] {
			held[k] = pool[j]
		}
		cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("node-", i)}}
		nodecache.Build(cache, held, nodecache.MaxObjectBytes)
		n, err := nodecache.NewNode(cache)
		if err != nil {
			t.Fatal(err)
		}
		x.Set(n)
	}
	perImage := float64(heap()-before) / (nodes * perNode)
	runtime.KeepAlive(x)
	runtime.KeepAlive(pool)
	t.Logf("%.1f bytes an image a node lists", perImage)
	if perImage > 100 {
		t.Errorf("the index takes %.1f bytes an image a node lists, want at most 100: nodes do not share their images", perImage)
	}
}
