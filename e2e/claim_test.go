package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/fleet/resources"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// A claim whose sandbox has an image the kubelet rejects fails at once,
// not after the grace period or the ready timeout.
func TestClaimOnBadImageFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const runID = "e2e-bad-image"
	clients, tr := startRun(t, ctx, runID)
	pool := createPool(t, ctx, clients, runID, "docker.io/library/Busybox:UPPER:case", resources.PodSpec{}, 1)
	c := claimer(clients, tr)
	start := time.Now()
	_, err := c.Acquire(ctx, pool, "bad-1", nil)
	var claimErr *verdict.StartError
	if !errors.As(err, &claimErr) || claimErr.Reason != "InvalidImageName" || !claimErr.Terminal {
		t.Fatalf("Acquire = %v; want a terminal InvalidImageName claim error", err)
	}
	if took := time.Since(start); took >= c.Grace.Backoff {
		t.Errorf("failed after %s, not before the %s grace", took, c.Grace.Backoff)
	}
	t.Logf("failed fast in %s: %v", time.Since(start).Round(time.Millisecond), err)
}
