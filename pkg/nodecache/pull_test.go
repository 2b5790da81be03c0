package nodecache_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestImagePull(t *testing.T) {
	base := layer("debian", 900)
	held := node(t, nodecache.RuntimeImage{RepoTags: []string{"docker.io/library/debian:12"}, ManifestDigest: digest("m-debian"), Layers: []nodecache.RuntimeLayer{base}})
	image := toLayers(base, layer("env", 600), layer("repo", 100))
	env, repo := image[1], image[2]
	fetching := func(l v1alpha1.Layer, done, rate int64) v1alpha1.LayerPull {
		return v1alpha1.LayerPull{Digest: l.Digest, Done: done, Size: l.Size, BytesPerSecond: rate}
	}
	other := v1alpha1.LayerPull{Digest: "0123456789abcdef", Done: 5, Size: 50, BytesPerSecond: 7}
	for _, tt := range []struct {
		name   string
		node   *nodecache.Node
		layers []v1alpha1.Layer
		pulls  []v1alpha1.LayerPull
		want   nodecache.Pull
		ok     bool
		left   time.Duration
	}{
		{"the base held, two layers fetching", held, image, []v1alpha1.LayerPull{fetching(env, 300, 50), fetching(repo, 20, 10), other},
			nodecache.Pull{Done: 1220, Size: 1600, BytesPerSecond: 60}, true, 6 * time.Second},
		{"a layer fetched, one fetching", held, image, []v1alpha1.LayerPull{fetching(env, 600, 50), fetching(repo, 20, 10)},
			nodecache.Pull{Done: 1520, Size: 1600, BytesPerSecond: 10}, true, 8 * time.Second},
		{"the node's cache unknown", nil, image, []v1alpha1.LayerPull{fetching(env, 300, 50)},
			nodecache.Pull{Done: 300, Size: 1600, BytesPerSecond: 50}, true, 26 * time.Second},
		{"none of its layers fetching", held, image, []v1alpha1.LayerPull{other},
			nodecache.Pull{Done: 900, Size: 1600}, false, 0},
		{"the image's layers unknown: the node's pulls", held, nil, []v1alpha1.LayerPull{fetching(env, 300, 50), other},
			nodecache.Pull{Done: 305, BytesPerSecond: 57}, true, 0},
	} {
		got, ok := nodecache.ImagePull(tt.node, tt.layers, tt.pulls)
		if got != tt.want || ok != tt.ok || got.Left() != tt.left {
			t.Errorf("%s: ImagePull = %+v, %v, left %s; want %+v, %v, left %s", tt.name, got, ok, got.Left(), tt.want, tt.ok, tt.left)
		}
	}
}

func TestPullString(t *testing.T) {
	for _, tt := range []struct {
		pull nodecache.Pull
		want string
	}{
		{nodecache.Pull{Done: 2254857830, Size: 5690831667, BytesPerSecond: 180 << 20}, "pulling 2.1/5.3 GiB (180 MiB/s, ~18s)"},
		{nodecache.Pull{Done: 30 << 20, Size: 200 << 20, BytesPerSecond: 4 << 20}, "pulling 30.0/200.0 MiB (4 MiB/s, ~43s)"},
		{nodecache.Pull{Done: 3 << 30, BytesPerSecond: 100 << 20}, "pulling 3.0 GiB (100 MiB/s)"},
		{nodecache.Pull{Done: 0, Size: 100 << 20}, "pulling 0.0/100.0 MiB (0 MiB/s)"},
	} {
		if got := tt.pull.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.pull, got, tt.want)
		}
	}
}

// A node's pulls sum to what its annotation says: every layer's bytes and
// size, finished ones kept whole, and the rate of those still fetching.
func TestFetching(t *testing.T) {
	for _, tt := range []struct {
		name  string
		pulls []v1alpha1.LayerPull
		want  nodecache.Pull
		ok    bool
	}{
		{"nothing", nil, nodecache.Pull{}, false},
		{"two fetching, one finished", []v1alpha1.LayerPull{
			{Digest: "0000000000000001", Done: 10, Size: 40, BytesPerSecond: 5},
			{Digest: "0000000000000002", Done: 30, Size: 30, BytesPerSecond: 9},
			{Digest: "0000000000000003", Done: 0, Size: 100, BytesPerSecond: 0},
		}, nodecache.Pull{Done: 40, Size: 170, BytesPerSecond: 5}, true},
		{"all finished", []v1alpha1.LayerPull{{Digest: "0000000000000002", Done: 30, Size: 30, BytesPerSecond: 9}},
			nodecache.Pull{Done: 30, Size: 30}, false},
	} {
		got, ok := nodecache.Fetching(tt.pulls)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: Fetching = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
		back, err := nodecache.ParsePulling(got.Annotation())
		if err != nil || back != got {
			t.Errorf("%s: %q read back as %+v, %v", tt.name, got.Annotation(), back, err)
		}
	}
	if got := (nodecache.Pull{Done: 1, Size: 2, BytesPerSecond: 3}).Plus(nodecache.Pull{Done: 10, Size: 20}); got != (nodecache.Pull{Done: 11, Size: 22, BytesPerSecond: 3}) {
		t.Errorf("Plus = %+v", got)
	}
	if _, err := nodecache.ParsePulling("12/40"); err == nil || !strings.Contains(err.Error(), v1alpha1.PullingAnnotation) {
		t.Errorf("ParsePulling of a bad value: %v, want an error naming the annotation", err)
	}
}
