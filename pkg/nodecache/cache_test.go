package nodecache_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

var (
	digest = testcri.Digest
	layer  = testcri.Layer
)

// node builds the indexed cache of a node holding imgs.
func node(t *testing.T, imgs ...nodecache.RuntimeImage) *nodecache.Node {
	t.Helper()
	return namedNode(t, "node-a", imgs...)
}

// namedNode builds the indexed cache of node name holding imgs.
func namedNode(t *testing.T, name string, imgs ...nodecache.RuntimeImage) *nodecache.Node {
	t.Helper()
	cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: name}}
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
			nodecache.Build(cache, testcri.SWEBench(tt.images), tt.maxBytes)
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

func TestObserve(t *testing.T) {
	img := nodecache.RuntimeImage{RepoTags: []string{"docker.io/library/busybox:1.36"}, ManifestDigest: digest("m"),
		Layers: []nodecache.RuntimeLayer{layer("a", 10)}}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	fs := v1alpha1.ImageFilesystem{UsedBytes: 10, CapacityBytes: 100, AvailableBytes: 90}
	type want struct {
		images             int
		complete, reach    metav1.ConditionStatus
		reason, reachMsgOf string
	}
	for _, tt := range []struct {
		name  string
		steps func(c *v1alpha1.NodeImageCache)
		want  want
	}{
		{"a full read", func(c *v1alpha1.NodeImageCache) {
			nodecache.Observe(c, nodecache.Snapshot{Images: []nodecache.RuntimeImage{img}, Filesystem: fs}, t0, nodecache.MaxObjectBytes)
		}, want{1, metav1.ConditionTrue, metav1.ConditionTrue, v1alpha1.ReasonAllListed, "listed 1 images"}},
		{"a partial read", func(c *v1alpha1.NodeImageCache) {
			nodecache.Observe(c, nodecache.Snapshot{Images: []nodecache.RuntimeImage{img}, Filesystem: fs, Partial: []string{"layers of sha256:1: boom"}}, t0, nodecache.MaxObjectBytes)
		}, want{1, metav1.ConditionFalse, metav1.ConditionTrue, v1alpha1.ReasonPartialData, "listed 1 images"}},
		{"unreachable before any read", func(c *v1alpha1.NodeImageCache) {
			nodecache.Unreachable(c, errors.New("dial unix /run/containerd/containerd.sock: no such file"), t0)
		}, want{0, "", metav1.ConditionFalse, "", "no such file; no read has worked yet"}},
		{"unreachable after a read keeps what it found", func(c *v1alpha1.NodeImageCache) {
			nodecache.Observe(c, nodecache.Snapshot{Images: []nodecache.RuntimeImage{img}, Filesystem: fs}, t0, nodecache.MaxObjectBytes)
			nodecache.Unreachable(c, errors.New("deadline exceeded"), t0.Add(time.Minute))
		}, want{1, metav1.ConditionTrue, metav1.ConditionFalse, v1alpha1.ReasonAllListed, "deadline exceeded; the images are as read at 2026-11-29T12:00:00Z"}},
		{"reachable again", func(c *v1alpha1.NodeImageCache) {
			nodecache.Unreachable(c, errors.New("deadline exceeded"), t0)
			nodecache.Observe(c, nodecache.Snapshot{Filesystem: fs}, t0.Add(time.Minute), nodecache.MaxObjectBytes)
		}, want{0, metav1.ConditionTrue, metav1.ConditionTrue, v1alpha1.ReasonAllListed, "listed 0 images"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.NodeImageCache{}
			tt.steps(c)
			if len(c.Images) != tt.want.images {
				t.Errorf("%d images listed, want %d", len(c.Images), tt.want.images)
			}
			complete := meta.FindStatusCondition(c.Conditions, v1alpha1.ConditionComplete)
			switch {
			case tt.want.complete == "" && complete != nil:
				t.Errorf("Complete %+v, want none before a read", complete)
			case tt.want.complete != "" && (complete == nil || complete.Status != tt.want.complete || complete.Reason != tt.want.reason):
				t.Errorf("Complete %+v, want %s/%s", complete, tt.want.complete, tt.want.reason)
			}
			reach := meta.FindStatusCondition(c.Conditions, v1alpha1.ConditionRuntimeReachable)
			if reach == nil || reach.Status != tt.want.reach || !strings.Contains(reach.Message, tt.want.reachMsgOf) {
				t.Errorf("RuntimeReachable %+v, want %s saying %q", reach, tt.want.reach, tt.want.reachMsgOf)
			}
			if tt.want.reach == metav1.ConditionTrue && c.ImageFilesystem != fs {
				t.Errorf("image filesystem %+v, want %+v", c.ImageFilesystem, fs)
			}
		})
	}
}

// Encode writes what encoding/json writes, a piece at a time.
func TestEncode(t *testing.T) {
	for _, n := range []int{0, 1, 50} {
		cache := &v1alpha1.NodeImageCache{TypeMeta: metav1.TypeMeta{APIVersion: "sandbox-fleet.io/v1alpha1", Kind: "NodeImageCache"},
			ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "7"}}
		nodecache.Observe(cache, nodecache.Snapshot{Images: testcri.SWEBench(n), Partial: []string{`a "quoted" <reason>`}},
			time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), nodecache.MaxObjectBytes)
		var streamed strings.Builder
		if err := nodecache.Encode(&streamed, cache); err != nil {
			t.Fatal(err)
		}
		var got, want any
		if err := json.Unmarshal([]byte(streamed.String()), &got); err != nil {
			t.Fatalf("%d images: %v\n%s", n, err, streamed.String())
		}
		marshalled, err := json.Marshal(cache)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(marshalled, &want); err != nil {
			t.Fatal(err)
		}
		// An empty table is written as [], which encoding/json leaves out.
		if n == 0 {
			want.(map[string]any)["layers"], want.(map[string]any)["images"] = []any{}, []any{}
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%d images: Encode wrote\n%s\nencoding/json\n%s", n, streamed.String(), marshalled)
		}
	}
}

func TestPresences(t *testing.T) {
	base, env := layer("debian", 900), layer("env", 90)
	full := nodecache.RuntimeImage{RepoTags: []string{"docker.io/swebench/django-1:latest"}, ManifestDigest: digest("m1"),
		Layers: []nodecache.RuntimeLayer{base, env, layer("django-1", 10)}}
	sibling := nodecache.RuntimeImage{RepoTags: []string{"docker.io/swebench/django-2:latest"}, ManifestDigest: digest("m2"),
		Layers: []nodecache.RuntimeLayer{base, env, layer("django-2", 10)}}
	index := nodecache.NewIndex()
	for _, n := range []*nodecache.Node{namedNode(t, "node-c"), namedNode(t, "node-b", sibling), namedNode(t, "node-a", full)} {
		index.Set(n)
	}
	fromRegistry := map[string][]v1alpha1.Layer{"swebench/django-3": toLayers(base, env, layer("django-3", 10))}
	got := nodecache.Presences(index, []string{"swebench/django-1", "swebench/nowhere:1", "swebench/django-3"}, fromRegistry)
	want := []nodecache.Presence{
		{Image: "swebench/django-1", SizeBytes: 1000, Known: true, Nodes: []nodecache.NodePresence{
			{Node: "node-a", PresentBytes: 1000, Complete: true},
			{Node: "node-b", PresentBytes: 990, MissingBytes: 10, Complete: true},
			{Node: "node-c", MissingBytes: 1000, Complete: true}}},
		{Image: "swebench/nowhere:1", Nodes: []nodecache.NodePresence{
			{Node: "node-a", Complete: true}, {Node: "node-b", Complete: true}, {Node: "node-c", Complete: true}}},
		{Image: "swebench/django-3", SizeBytes: 1000, Known: true, Nodes: []nodecache.NodePresence{
			{Node: "node-a", PresentBytes: 990, MissingBytes: 10, Complete: true},
			{Node: "node-b", PresentBytes: 990, MissingBytes: 10, Complete: true},
			{Node: "node-c", MissingBytes: 1000, Complete: true}}},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("Presences =\n%+v\nwant\n%+v", got, want)
	}
}
