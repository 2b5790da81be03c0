package nodecache_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// digest makes a sha256 digest from a name.
func digest(name string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(name)))
}

func layer(name string, size int64) nodecache.RuntimeLayer {
	return nodecache.RuntimeLayer{Digest: digest(name), Size: size}
}

// node builds the indexed cache of a node holding imgs.
func node(t *testing.T, imgs ...nodecache.RuntimeImage) *nodecache.Node {
	t.Helper()
	cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	nodecache.Build(cache, imgs, nodecache.MaxObjectBytes)
	// Through JSON, as readers get it from the API server.
	b, err := json.Marshal(cache)
	if err != nil {
		t.Fatal(err)
	}
	read := &v1alpha1.NodeImageCache{}
	if err := json.Unmarshal(b, read); err != nil {
		t.Fatal(err)
	}
	n, err := nodecache.NewNode(read)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func toLayers(ls ...nodecache.RuntimeLayer) []v1alpha1.Layer {
	out := make([]v1alpha1.Layer, len(ls))
	for i, l := range ls {
		out[i] = v1alpha1.Layer{Digest: nodecache.Short(l.Digest), Size: l.Size}
	}
	return out
}

func TestMissing(t *testing.T) {
	base := layer("debian", 900)
	django := nodecache.RuntimeImage{RepoTags: []string{"docker.io/swebench/django-1:latest"}, ManifestDigest: digest("m-django"),
		Layers: []nodecache.RuntimeLayer{base, layer("django", 100)}}
	n := node(t, django)
	for _, tt := range []struct {
		name   string
		layers []v1alpha1.Layer
		want   int64
	}{
		{"the image on the node", toLayers(django.Layers...), 0},
		{"an image sharing 90% of its bytes", toLayers(base, layer("flask", 100)), 100},
		{"an image sharing nothing", toLayers(layer("alpine", 50), layer("go", 450)), 500},
		{"no layers", nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := n.Missing(tt.layers); got != tt.want {
				t.Errorf("Missing = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestImageLookup(t *testing.T) {
	busybox := nodecache.RuntimeImage{RepoTags: []string{"docker.io/library/busybox:1.36"}, ManifestDigest: digest("m-busybox"),
		Layers: []nodecache.RuntimeLayer{layer("busybox", 2)}}
	byDigest := nodecache.RuntimeImage{RepoDigests: []string{"registry.example.com/eval/x@" + digest("m-x")}, ManifestDigest: digest("m-x"),
		Layers: []nodecache.RuntimeLayer{layer("x", 3)}}
	n := node(t, busybox, byDigest)
	for _, tt := range []struct {
		ref  string
		want []v1alpha1.Layer
	}{
		{"busybox:1.36", toLayers(busybox.Layers...)},
		{"docker.io/library/busybox:1.36", toLayers(busybox.Layers...)},
		{"library/busybox:1.36", toLayers(busybox.Layers...)},
		{"busybox@" + digest("m-busybox"), toLayers(busybox.Layers...)},
		{"registry.example.com/eval/x@" + digest("m-x"), toLayers(byDigest.Layers...)},
		{"busybox:1.37", nil},
		{"busybox", nil},
		{"Not A Reference", nil},
	} {
		got, ok := n.Image(tt.ref)
		if ok != (tt.want != nil) || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("Image(%q) = %v, %v; want %v", tt.ref, got, ok, tt.want)
		}
	}
}

func TestBuild(t *testing.T) {
	shared := layer("base", 500)
	small := nodecache.RuntimeImage{RepoTags: []string{"b:1", "a:1"}, ManifestDigest: digest("m-small"), Layers: []nodecache.RuntimeLayer{shared, layer("s", 1)}}
	big := nodecache.RuntimeImage{RepoTags: []string{"big:1"}, ManifestDigest: digest("m-big"), Layers: []nodecache.RuntimeLayer{shared, layer("b", 90)}}
	build := func(imgs ...nodecache.RuntimeImage) string {
		cache := &v1alpha1.NodeImageCache{}
		nodecache.Build(cache, imgs, nodecache.MaxObjectBytes)
		b, _ := json.Marshal(cache)
		return string(b)
	}
	got := build(small, big)
	if got != build(big, small) {
		t.Error("Build depends on the order of the images")
	}
	want := `"imageCount":2,"layerCount":3,` +
		`"layers":["` + nodecache.Short(shared.Digest) + `:500","` + nodecache.Short(big.Layers[1].Digest) + `:90","` + nodecache.Short(small.Layers[1].Digest) + `:1"],` +
		`"images":[{"names":["big:1"],"digest":"` + nodecache.Short(big.ManifestDigest) + `","layers":[0,1]},` +
		`{"names":["a:1","b:1"],"digest":"` + nodecache.Short(small.ManifestDigest) + `","layers":[0,2]}]`
	if !strings.Contains(got, want) {
		t.Errorf("Build wrote\n%s\nwant it to hold\n%s", got, want)
	}
}

// sweBench makes n images shaped like SWE-bench's: a Debian base shared by
// all, a few environment layers shared by the images of one repository,
// and two layers of each instance's own.
func sweBench(n int) []nodecache.RuntimeImage {
	r := rand.New(rand.NewPCG(1, 2))
	var base []nodecache.RuntimeLayer
	for i := range 4 {
		base = append(base, layer(fmt.Sprintf("base-%d", i), 30<<20+r.Int64N(50<<20)))
	}
	imgs := make([]nodecache.RuntimeImage, n)
	for i := range imgs {
		repo := i % 50
		layers := append([]nodecache.RuntimeLayer(nil), base...)
		for k := range 3 {
			layers = append(layers, layer(fmt.Sprintf("env-%d-%d", repo, k), 100<<20+int64(repo*k)<<10))
		}
		layers = append(layers, layer(fmt.Sprintf("instance-%d-a", i), r.Int64N(200<<20)), layer(fmt.Sprintf("instance-%d-b", i), r.Int64N(1<<20)))
		imgs[i] = nodecache.RuntimeImage{
			RepoTags:       []string{fmt.Sprintf("docker.io/swebench/sweb.eval.x86_64.repo%02d_1776_repo%02d-%05d:latest", repo, repo, i)},
			RepoDigests:    []string{fmt.Sprintf("docker.io/swebench/sweb.eval.x86_64.repo%02d_1776_repo%02d-%05d@%s", repo, repo, i, digest(fmt.Sprint("m", i)))},
			ManifestDigest: digest(fmt.Sprint("m", i)),
			Layers:         layers,
		}
	}
	return imgs
}

func TestBuildFits(t *testing.T) {
	for _, tt := range []struct {
		images, maxBytes int
		complete         bool
	}{
		{5000, nodecache.MaxObjectBytes, true},
		{5000, 200 << 10, false},
		{20000, nodecache.MaxObjectBytes, false},
	} {
		t.Run(fmt.Sprintf("%d images in %d bytes", tt.images, tt.maxBytes), func(t *testing.T) {
			cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
			nodecache.Build(cache, sweBench(tt.images), tt.maxBytes)
			b, err := json.Marshal(cache)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > tt.maxBytes {
				t.Errorf("the object takes %d bytes, over %d", len(b), tt.maxBytes)
			}
			if int(cache.ImageCount) != tt.images {
				t.Errorf("imageCount %d, want %d", cache.ImageCount, tt.images)
			}
			complete := meta.IsStatusConditionTrue(cache.Conditions, v1alpha1.ConditionComplete)
			if complete != tt.complete || complete != (len(cache.Images) == tt.images) {
				t.Errorf("Complete %v with %d of %d images listed, want %v", complete, len(cache.Images), tt.images, tt.complete)
			}
			t.Logf("%d of %d images in %d bytes", len(cache.Images), tt.images, len(b))
			if _, err := nodecache.NewNode(cache); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestNewNodeRejectsBadIndices(t *testing.T) {
	cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Layers: []v1alpha1.Layer{{Digest: "0123456789abcdef", Size: 1}},
		Images: []v1alpha1.CachedImage{{Names: []string{"a:1"}, Layers: []int32{0, 1}}}}
	if _, err := nodecache.NewNode(cache); err == nil || !strings.Contains(err.Error(), "images[0] names layer 1 of 1") {
		t.Errorf("NewNode = %v, want an error naming the bad index", err)
	}
}

func TestLayerJSON(t *testing.T) {
	for _, tt := range []struct {
		json string
		ok   bool
	}{
		{`"0123456789abcdef:42"`, true},
		{`"0123456789abcdef"`, false},
		{`"0123456789abcde:42"`, false},
		{`"0123456789abcdef:-1"`, false},
		{`{"digest":"0123456789abcdef","size":42}`, false},
	} {
		var l v1alpha1.Layer
		err := json.Unmarshal([]byte(tt.json), &l)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok %v", tt.json, err, tt.ok)
			continue
		}
		if tt.ok {
			if b, _ := json.Marshal(l); string(b) != tt.json {
				t.Errorf("%s written back as %s", tt.json, b)
			}
		}
	}
}
