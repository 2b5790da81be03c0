package warm_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/internal/warm"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// Three pools of 3, 2 and 1 filled with a budget of 2 creates a wave end
// full and Ready, with exactly their sandboxes.
func TestFillInWaves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	const runID = "warm-waves"
	tr, err := tracker.Start(ctx, clients.Config, ns, runID)
	if err != nil {
		t.Fatal(err)
	}
	var pools []warm.Pool
	for i, img := range []string{"busybox:1.34", "busybox:1.35", "busybox:1.36"} {
		tmpl, err := resources.Template(ns, runID, img, resources.PodSpec{})
		if err != nil {
			t.Fatal(err)
		}
		pools = append(pools, warm.Pool{Template: tmpl, Pool: resources.WarmPool(tmpl, int32(3-i))})
	}
	if err := (&warm.Filler{Client: clients.Client, Tracker: tr, Budget: 2}).Fill(ctx, pools); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		got := &extensionsv1beta1.SandboxWarmPool{}
		if err := clients.Client.Get(ctx, client.ObjectKeyFromObject(p.Pool), got); err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Replicas != *p.Pool.Spec.Replicas || got.Status.ReadyReplicas != *p.Pool.Spec.Replicas {
			t.Errorf("pool %s: spec %d ready %d, want %d", got.Name, *got.Spec.Replicas, got.Status.ReadyReplicas, *p.Pool.Spec.Replicas)
		}
	}
	sandboxes := &sandboxv1beta1.SandboxList{}
	if err := clients.Client.List(ctx, sandboxes, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	// The controller labels Sandboxes its own way; the run's label reaches
	// their Pods through the template's pod metadata.
	pods := &corev1.PodList{}
	if err := clients.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels.ForRun(runID))); err != nil {
		t.Fatal(err)
	}
	if len(sandboxes.Items) != 6 || len(pods.Items) != 6 {
		t.Errorf("%d sandboxes and %d pods of the run, want 6 of each", len(sandboxes.Items), len(pods.Items))
	}

	// Filling again, as a second epoch or a rerun of a kept-warm run does,
	// finds the pools and grows the one asked for more, shrinking none.
	pools[2].Pool.Spec.Replicas = new(int32(2))
	pools[0].Pool.Spec.Replicas = new(int32(1))
	var phases []string
	filler := &warm.Filler{Client: clients.Client, Tracker: tr, Budget: 1, Observe: func(p string, _ time.Duration) { phases = append(phases, p) }}
	if err := filler.Fill(ctx, pools); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int32{3, 2, 2} {
		got := &extensionsv1beta1.SandboxWarmPool{}
		if err := clients.Client.Get(ctx, client.ObjectKeyFromObject(pools[i].Pool), got); err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Replicas != want {
			t.Errorf("refilled pool %s has %d replicas, want %d", got.Name, *got.Spec.Replicas, want)
		}
	}
	if len(phases) == 0 || phases[0] != "create_warmpool" || phases[1] != "wait_pool_ready" {
		t.Errorf("observed phases %v, want create_warmpool then wait_pool_ready per wave", phases)
	}
}
