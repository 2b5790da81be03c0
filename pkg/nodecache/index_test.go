package nodecache_test

import (
	"fmt"
	"testing"

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
	for node, want := range map[string]int64{"a": 0, "b": 100, "no-agent": 1000} {
		if got := x.Missing(node, djangoLayers); got != want {
			t.Errorf("Missing(%s, django) = %d, want %d", node, got, want)
		}
	}

	layers := x.PodLayers([]string{"swebench/django-1", "swebench/flask-1:v1", "unknown:1"})
	if want := toLayers(base, layer("django", 100), layer("flask", 50)); fmt.Sprint(layers) != fmt.Sprint(want) {
		t.Errorf("PodLayers = %v, want %v (each layer once, unknown images left out)", layers, want)
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
	if x.Node("b") != nil || x.Node("a") == nil {
		t.Errorf("Node: a %v, b %v", x.Node("a"), x.Node("b"))
	}
	x.Delete("a")
	x.Delete("a")
	check("empty", "swebench/django-1", nil)
}
