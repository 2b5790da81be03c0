package tracker_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// Another run's objects in the same namespace are invisible to a tracker.
func TestTrackerSeesOnlyItsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	other, err := resources.Template(ns, "run-other", "busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	otherPool := resources.WarmPool(other, 1)
	for _, obj := range []client.Object{other, otherPool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-mine")
	if err != nil {
		t.Fatal(err)
	}
	// The cache is synced once Start returns, so a visible pool would be
	// found at once.
	if _, found, err := tr.WarmPool(ctx, otherPool.Name); err != nil || found {
		t.Fatalf("tracker of run-mine: WarmPool(%s of run-other) = found %v, %v", otherPool.Name, found, err)
	}
}
