package nodecache_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestScores(t *testing.T) {
	for _, tt := range []struct {
		missing, want []int64
	}{
		{nil, []int64{}},
		{[]int64{0, 50, 100}, []int64{100, 50, 0}},
		{[]int64{300, 300}, []int64{100, 100}},
		{[]int64{10 << 30, 1 << 30, 4 << 30}, []int64{0, 100, 66}},
		{[]int64{7}, []int64{100}},
	} {
		if got := nodecache.Scores(tt.missing, 100); !slices.Equal(got, tt.want) {
			t.Errorf("Scores(%v) = %v, want %v", tt.missing, got, tt.want)
		}
	}
}

func TestPodLayers(t *testing.T) {
	base, env := toLayers(layer("debian", 900))[0], toLayers(layer("env", 90))[0]
	app, sidecar := toLayers(layer("app", 10))[0], toLayers(layer("sidecar", 5))[0]
	got := nodecache.PodLayers([]v1alpha1.Layer{base, env, app}, []v1alpha1.Layer{base, sidecar})
	if want := []v1alpha1.Layer{base, env, app, sidecar}; !slices.Equal(got, want) {
		t.Errorf("PodLayers = %v, want %v", got, want)
	}
	if size := nodecache.Size(got); size != 1005 {
		t.Errorf("Size(PodLayers) = %d, want 1005", size)
	}
}

// What a node lacks of an image is cheap to count: a scheduler asks it
// of every node for every Pod.
func BenchmarkMissing(b *testing.B) {
	imgs := testcri.SWEBench(5000)
	cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	nodecache.Build(cache, imgs[:4000], nodecache.MaxObjectBytes)
	n, err := nodecache.NewNode(cache)
	if err != nil {
		b.Fatal(err)
	}
	// An image the node lacks, sharing its base and environment layers.
	layers := toLayers(imgs[4999].Layers...)
	b.ResetTimer()
	var missing int64
	for b.Loop() {
		missing = n.Missing(layers)
	}
	b.ReportMetric(float64(len(layers)), "layers/op")
	if missing <= 0 {
		b.Fatalf("the image lacks nothing: %d", missing)
	}
}
