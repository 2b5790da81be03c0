package claim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	extensionsv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/internal/testcluster"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracker"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/kube"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) { testcluster.Main(m, &cluster) }

func setup(t *testing.T, ctx context.Context, runID string) (*kube.Clients, *claim.Claimer) {
	t.Helper()
	ns := cluster.NewNamespace(t)
	clients, err := cluster.Clients(ns)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracker.Start(ctx, clients.Config, ns, runID)
	if err != nil {
		t.Fatal(err)
	}
	return clients, &claim.Claimer{Client: clients.Client, Tracker: tr, Grace: 2 * time.Second}
}

func createPool(t *testing.T, ctx context.Context, c client.Client, tmpl *extensionsv1beta1.SandboxTemplate, replicas int32) *extensionsv1beta1.SandboxWarmPool {
	t.Helper()
	pool := resources.WarmPool(tmpl, replicas)
	for _, obj := range []client.Object{tmpl, pool} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

func TestAcquireAndRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, claimer := setup(t, ctx, "acquire")
	pool := createPool(t, ctx, clients.Client, resources.Template(clients.Namespace, "acquire", "busybox:1.36", resources.PodSpec{}), 2)
	if _, err := claimer.Tracker.WaitPoolReady(ctx, pool.Name, 2); err != nil {
		t.Fatal(err)
	}
	h, err := claimer.Acquire(ctx, pool, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.Claim == "" || h.Sandbox == "" || h.Pod == "" || h.PodIP == "" || h.Node == "" || h.TaskID != "task-1" {
		t.Errorf("handle %+v is incomplete", h)
	}
	if err := claimer.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	err = clients.Client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Claim}, &extensionsv1beta1.SandboxClaim{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("claim %s after release: %v", h.Claim, err)
	}
}

// A Pod that cannot be scheduled may become schedulable, so the claim waits
// out the grace period, then gives up and deletes itself.
func TestUnschedulableFailsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, claimer := setup(t, ctx, "unschedulable")
	tmpl := resources.Template(clients.Namespace, "unschedulable", "busybox:1.36", resources.PodSpec{})
	tmpl.Spec.PodTemplate.Spec.NodeSelector = map[string]string{"no-such-label": "anywhere"}
	pool := createPool(t, ctx, clients.Client, tmpl, 1)

	start := time.Now()
	_, err := claimer.Acquire(ctx, pool, "task-1")
	var claimErr *claim.Error
	if !errors.As(err, &claimErr) || claimErr.Reason != "Unschedulable" || claimErr.Terminal {
		t.Fatalf("Acquire = %v; want an Unschedulable claim error", err)
	}
	if took := time.Since(start); took < claimer.Grace {
		t.Errorf("gave up after %s, before the %s grace", took, claimer.Grace)
	}
	claims := &extensionsv1beta1.SandboxClaimList{}
	if err := clients.Client.List(ctx, claims, client.InNamespace(clients.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			t.Errorf("claim %s was left behind", c.Name)
		}
	}
}
