package e2e

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/api/v1alpha1"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testscheduler"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/nodecache"
)

// After a PrepullJob warms the sandbox node, a warm pool of that image
// scheduled by asrl-scheduler lands there, though the stock scheduler
// prefers one of two emptier kwok nodes the test adds beside it: on the
// local cluster with asrl-scheduler run from its binary, on an existing
// cluster with the installed asrl-scheduler.
func TestPoolLandsWherePrepulled(t *testing.T) {
	n := theNode(t)
	var bin string
	if local != nil {
		// Built before the test's deadline starts: a cold build of the
		// scheduler (it links k8s.io/kubernetes) can take longer than the test.
		var err error
		if bin, err = testscheduler.Build(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addEmptierNodes(t, ctx)
	if local != nil {
		if _, err := testscheduler.Start(ctx, local, bin, nil); err != nil {
			t.Fatal(err)
		}
	}
	n.agent.Start(t, ctx)
	poolLandsWherePrepulled(t, ctx, n, "e2e-placement")
}

// addEmptierNodes adds two kwok nodes beside the sandbox node, for the
// test only: emptier and larger, the stock scheduler prefers them. Added
// before any Pod is scheduled, every scheduler knows them. A kwok of the
// test's own runs them, on the local cluster as on an existing one (which
// has none), and deletes them when the test ends.
func addEmptierNodes(t *testing.T, ctx context.Context) {
	t.Helper()
	kubeconfig := os.Getenv(KubeconfigEnv)
	if local != nil {
		kubeconfig = local.Kubeconfig()
	}
	kwok, err := testcluster.StartKwok(ctx, kubeconfig, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kwok.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := kwok.AddNodes(ctx, testcluster.FakeNodes("e2e-emptier", 2, testcluster.DefaultCapacity(), nil)...); err != nil {
		t.Fatal(err)
	}
}

// poolLandsWherePrepulled has the sandbox node's agent pull a new image by
// a PrepullJob and checks that a warm pool of it, which run runID's fleet
// has asrl-scheduler schedule, lands on that node where the stock
// scheduler would not put it.
func poolLandsWherePrepulled(t *testing.T, ctx context.Context, n *sandboxNode, runID string) {
	t.Helper()
	node := n.name
	img, _ := n.pushNewImage(t, ctx, "placement")
	clients, f := openFleet(t, ctx, runID, []tasks.Task{{ID: "placed", Image: img}}, func(cfg *config.Fleet) {
		cfg.Template.ExtraPodSpec = &corev1.PodSpec{SchedulerName: testscheduler.SchedulerName}
	})
	job := newJob(clients.Namespace, "warm-the-node", []string{img}, map[string]string{corev1.LabelHostname: node})
	if err := clients.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if e := waitForEntry(t, ctx, clients, job, node, func(e v1alpha1.NodePrepullStatus) bool { return e.Phase != v1alpha1.PrepullPulling }); e.Phase != v1alpha1.PrepullSucceeded {
		t.Fatalf("the PrepullJob did not pull %s: %+v", img, e)
	}
	waitForCache(t, ctx, clients, node, func(c *v1alpha1.NodeImageCache) bool {
		n, err := nodecache.NewNode(c)
		if err != nil {
			return false
		}
		_, ok := n.Image(img)
		return ok
	})

	// The stock scheduler's choice for a Pod of the image asking for a
	// CPU: a kwok node, where a CPU is a 32nd of it, not half.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: clients.Namespace, Name: "stock-choice"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Image: img, Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
	}}
	if err := clients.Client.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	if got, err := testscheduler.BoundTo(ctx, clients.Client, probe); err != nil {
		t.Fatal(err)
	} else if got == node {
		t.Fatalf("the stock scheduler put %s on the sandbox node %s already, not on an emptier one: this test shows nothing", probe.Name, node)
	}

	if err := f.Warm(ctx, []string{img}, replicas(2)); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := clients.Client.List(ctx, pods, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	var placed []string
	for _, p := range pods.Items {
		if p.Spec.SchedulerName == testscheduler.SchedulerName {
			placed = append(placed, p.Spec.NodeName)
		}
	}
	if len(placed) != 2 || slices.ContainsFunc(placed, func(n string) bool { return n != node }) {
		t.Errorf("the pool's Pods went to %v, want both on %s, which holds %s", placed, node, img)
	}
}
