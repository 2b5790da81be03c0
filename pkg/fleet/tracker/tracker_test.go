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

// A waiter on one pool is woken by its pool's events, not by another's.
func TestPoolChangedIsTargeted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-keyed")
	if err != nil {
		t.Fatal(err)
	}
	create := func(image string) string {
		tmpl, err := resources.Template(ns, "run-keyed", image, resources.PodSpec{})
		if err != nil {
			t.Fatal(err)
		}
		// Zero replicas: only the pool objects change, no Pods come.
		pool := resources.WarmPool(tmpl, 0)
		if err := clients.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		for {
			changed := tr.Changed()
			if _, found, err := tr.WarmPool(ctx, pool.Name); err != nil || found {
				return pool.Name
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("pool %s never seen", pool.Name)
			}
		}
	}
	mine := resources.PoolName("run-keyed", "busybox:1.36")
	woken := tr.PoolChanged(mine)
	create("busybox:1.35")
	select {
	case <-woken:
		t.Fatal("another pool's event woke the waiter")
	default:
	}
	create("busybox:1.36")
	select {
	case <-woken:
	case <-ctx.Done():
		t.Fatal("the pool's own event did not wake the waiter")
	}
}

// Peak is the most live sandboxes the run held at once: a pool of 3 makes
// it 3, and it stays 3 once the pool and its Pods are gone. ReadySince
// says when the watch first saw each Pod Ready.
func TestPeakLiveSandboxes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, "run-peak")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := resources.Template(ns, "run-peak", "busybox:1.36", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, 3)
	for _, obj := range []client.Object{tmpl, pool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitLive := func(want int) {
		for {
			changed := tr.Changed()
			names, err := tr.LivePods(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) == want {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("live sandboxes %v, want %d", names, want)
			}
		}
	}
	waitLive(3)
	if p := tr.Peak(); p != 3 {
		t.Errorf("Peak with 3 live sandboxes = %d", p)
	}
	before := time.Now()
	names, err := tr.LivePods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		for {
			changed := tr.Changed()
			if since, ok := tr.ReadySince(name); ok {
				if since.After(time.Now()) {
					t.Errorf("pod %s Ready since %s, in the future", name, since)
				}
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("pod %s never seen Ready (since %s)", name, before)
			}
		}
	}
	if err := clients.Client.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitLive(0)
	if p := tr.Peak(); p != 3 {
		t.Errorf("Peak after the pool went = %d, want 3", p)
	}
}
