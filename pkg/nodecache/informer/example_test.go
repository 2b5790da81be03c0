package informer_test

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
)

// Snapshot reads the caches of some nodes once, as placement does before
// a run. (controller-runtime's fake client stands in for a cluster here.)
func ExampleSnapshot() {
	image := nodecache.RuntimeImage{RepoTags: []string{"docker.io/swebench/astropy:1"}, ManifestDigest: "sha256:" + strings.Repeat("1", 64),
		Layers: []nodecache.RuntimeLayer{{Digest: "sha256:" + strings.Repeat("a", 64), Size: 900 << 20}}}
	held := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	nodecache.Build(held, []nodecache.RuntimeImage{image}, nodecache.MaxObjectBytes)
	empty := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}
	nodecache.Build(empty, nil, nodecache.MaxObjectBytes)
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(held, empty).Build()

	index, err := informer.Snapshot(context.Background(), c, []string{"node-1", "node-2"})
	if err != nil {
		panic(err)
	}
	layers, _ := index.Layers("docker.io/swebench/astropy:1")
	fmt.Println(index.MissingOn(layers, []string{"node-1", "node-2"}))
	// Output: [0 943718400]
}
