package cache

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/golden"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcri"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

func TestPrintNodes(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	read := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	nodecache.Observe(read, nodecache.Snapshot{Images: testcri.SWEBench(120),
		Filesystem: v1alpha1.ImageFilesystem{UsedBytes: 40 << 30, CapacityBytes: 200 << 30, AvailableBytes: 150 << 30}}, now.Add(-90*time.Second), nodecache.MaxObjectBytes)
	down := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	nodecache.Unreachable(down, errRefused{}, now)
	var out bytes.Buffer
	if err := printNodes(&out, []NodeSummary{summarize(read), summarize(down)}, now); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "nodes", out.String())
}

type errRefused struct{}

func (errRefused) Error() string { return "listing images through CRI: connection refused" }

func TestPrintPresences(t *testing.T) {
	imgs := testcri.SWEBench(3)
	index := nodecache.NewIndex()
	add := func(name string, held ...nodecache.RuntimeImage) {
		c := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: name}}
		nodecache.Build(c, held, nodecache.MaxObjectBytes)
		n, err := nodecache.NewNode(c)
		if err != nil {
			t.Fatal(err)
		}
		index.Set(n)
	}
	add("node-a", imgs[0])
	add("node-b", imgs[1])
	add("node-c")
	presences := nodecache.Presences(index, []string{imgs[0].RepoTags[0], "docker.io/swebench/unknown:1"}, nil)
	var out bytes.Buffer
	if err := printPresences(&out, presences); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "presences", out.String())
}
