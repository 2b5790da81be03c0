package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/claim"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/resources"
)

// A claim whose sandbox has an image the kubelet rejects fails at once,
// not after the grace period or the ready timeout.
func TestClaimOnBadImageFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const runID = "e2e-bad-image"
	clients, tr := startRun(t, ctx, runID)
	ns := clients.Namespace
	tmpl, err := resources.Template(ns, runID, "docker.io/library/Busybox:UPPER:case", resources.PodSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pool := resources.WarmPool(tmpl, 1)
	for _, obj := range []client.Object{tmpl, pool} {
		if err := clients.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	claimer := &claim.Claimer{Client: clients.Client, Tracker: tr, Grace: claim.Grace{Backoff: time.Minute, Unschedulable: time.Minute}}
	start := time.Now()
	_, err = claimer.Acquire(ctx, pool, "bad-1")
	var claimErr *claim.Error
	if !errors.As(err, &claimErr) || claimErr.Reason != "InvalidImageName" || !claimErr.Terminal {
		t.Fatalf("Acquire = %v; want a terminal InvalidImageName claim error", err)
	}
	if took := time.Since(start); took >= claimer.Grace.Backoff {
		t.Errorf("failed after %s, not before the %s grace", took, claimer.Grace.Backoff)
	}
	t.Logf("failed fast in %s: %v", time.Since(start).Round(time.Millisecond), err)
}
