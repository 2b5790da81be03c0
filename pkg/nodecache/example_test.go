package nodecache_test

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// A node that holds one SWE-bench image lacks only the top layer of its
// sibling: they share the base and the environment.
func ExampleIndex() {
	layer := func(hex string, mib int64) nodecache.RuntimeLayer {
		return nodecache.RuntimeLayer{Digest: "sha256:" + strings.Repeat(hex, 64), Size: mib << 20}
	}
	base, env, repoA, repoB := layer("a", 900), layer("b", 600), layer("c", 40), layer("d", 60)
	cache := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	nodecache.Build(cache, []nodecache.RuntimeImage{{RepoTags: []string{"docker.io/swebench/astropy:1"},
		ManifestDigest: "sha256:" + strings.Repeat("1", 64), Layers: []nodecache.RuntimeLayer{base, env, repoA}}}, nodecache.MaxObjectBytes)
	node, err := nodecache.NewNode(cache)
	if err != nil {
		panic(err)
	}
	index := nodecache.NewIndex()
	index.Set(node)

	var sibling []v1alpha1.Layer
	for _, l := range []nodecache.RuntimeLayer{base, env, repoB} {
		sibling = append(sibling, v1alpha1.Layer{Digest: nodecache.Short(l.Digest), Size: l.Size})
	}
	fmt.Printf("node-1 lacks %d of %d MiB\n", index.Missing(sibling, "node-1")>>20, nodecache.Size(sibling)>>20)
	// Output: node-1 lacks 60 of 1560 MiB
}
