package informer_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache/informer"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// The informer the scheduler plugin and the webhook follow the caches by
// receives them as a stream of watch events (client-go's WatchList), not
// as one LIST response holding every node's MiB at once.
func TestCachesStreamTheInitialList(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients, err := cluster.Clients("")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		nic := &v1alpha1.NodeImageCache{ObjectMeta: metav1.ObjectMeta{Name: "stream-" + strconv.Itoa(i)}}
		if err := clients.Client.Create(ctx, nic); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = clients.Client.Delete(context.Background(), nic) })
	}
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	before := lists(t, ctx, kc)
	caches := informer.Start(ctx, clients.Client)
	waitCtx, done := context.WithTimeout(ctx, 30*time.Second)
	defer done()
	if !caches.WaitForSync(waitCtx) {
		t.Fatal("the caches did not sync")
	}
	if after := lists(t, ctx, kc); after != before {
		t.Errorf("the informer listed NodeImageCaches %v times, want none: a streamed watch", after-before)
	}
}

// lists counts the API server's LIST requests for NodeImageCaches.
func lists(t *testing.T, ctx context.Context, kc kubernetes.Interface) float64 {
	t.Helper()
	b, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="nodeimagecaches"`) && strings.Contains(line, `verb="LIST"`) {
			fields := strings.Fields(line)
			n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	return total
}
