package tracker_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/labels"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

// A template, a warm pool of 3 and a claim, built and followed by the
// project's own code, on kwok nodes driven by the real Agent Sandbox
// controller.
func TestClaimFromWarmPoolBecomesReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	const runID = "run-a"
	tr, err := tracker.Start(ctx, clients.Config, ns, runID)
	if err != nil {
		t.Fatal(err)
	}

	template := resources.Template(ns, runID, "docker.io/library/busybox:1.36", resources.PodSpec{})
	pool := resources.WarmPool(template, 3)
	for _, obj := range []client.Object{template, pool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	if _, err := tr.WaitPoolReady(ctx, pool.Name, 3); err != nil {
		t.Fatal(err)
	}

	claim := resources.Claim(pool, "task-1")
	if err := clients.Client.Create(ctx, claim); err != nil {
		t.Fatalf("creating the claim: %v", err)
	}
	claim, err = tr.WaitClaimReady(ctx, claim.Name)
	if err != nil {
		t.Fatal(err)
	}
	sandboxName := claim.Status.SandboxStatus.Name
	if _, err := netip.ParseAddr(claim.Status.SandboxStatus.PodIPs[0]); err != nil {
		t.Errorf("claim %s pod IP %q: %v", claim.Name, claim.Status.SandboxStatus.PodIPs[0], err)
	}

	// The claim adopted a warm sandbox of the pool, whose pod runs on a kwok
	// node and carries the run's labels.
	sandbox := &sandboxv1beta1.Sandbox{}
	if err := clients.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: sandboxName}, sandbox); err != nil {
		t.Fatalf("reading sandbox %s: %v", sandboxName, err)
	}
	pods := &corev1.PodList{}
	if err := clients.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels.ForRun(runID))); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) < 3 {
		t.Fatalf("run %s has %d pods, want at least the pool's 3", runID, len(pods.Items))
	}
	var claimed *corev1.Pod
	for i, p := range pods.Items {
		if metav1.IsControlledBy(&p, sandbox) {
			claimed = &pods.Items[i]
		}
	}
	if claimed == nil {
		t.Fatalf("no pod of run %s is owned by sandbox %s", runID, sandboxName)
	}
	if claimed.Spec.NodeName == "" || claimed.Status.PodIP != claim.Status.SandboxStatus.PodIPs[0] {
		t.Errorf("pod %s: node %q IP %q; want scheduled with the claim's IP %s",
			claimed.Name, claimed.Spec.NodeName, claimed.Status.PodIP, claim.Status.SandboxStatus.PodIPs[0])
	}
}

// Another run's objects in the same namespace are invisible to a tracker.
func TestTrackerSeesOnlyItsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	other := resources.Template(ns, "run-other", "busybox:1.36", resources.PodSpec{})
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
	// The cache is synced, so a visible pool would satisfy a wait for 0 ready
	// sandboxes at once.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := tr.WaitPoolReady(short, otherPool.Name, 0); err == nil {
		t.Fatalf("tracker of run-mine saw warm pool %s of run-other", otherPool.Name)
	}
}
