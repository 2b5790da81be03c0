package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/config"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tasks"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/verdict"
)

// A pool whose sandboxes have an image the kubelet rejects fails at once,
// not after the grace period or the ready timeout.
func TestBadImageFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const image = "docker.io/library/Busybox:UPPER:case"
	_, f := openFleet(t, ctx, "e2e-bad-image", []tasks.Task{{ID: "bad-1", Image: image}}, func(cfg *config.Fleet) {
		cfg.ClaimGrace.Duration = time.Minute
		cfg.ReadyTimeout.Duration = 2 * time.Minute
	})
	start := time.Now()
	err := f.Warm(ctx, []string{image}, replicas(1))
	var warmErr verdict.WarmError
	if !errors.As(err, &warmErr) || verdict.Reason(err) != verdict.Start || !strings.Contains(err.Error(), "InvalidImageName") {
		t.Fatalf("Warm = %v; want a warm error of reason start, for InvalidImageName", err)
	}
	if took := time.Since(start); took >= f.Config().ClaimGrace.Duration {
		t.Errorf("failed after %s, not before the %s grace", took, f.Config().ClaimGrace.Duration)
	}
	t.Logf("failed fast in %s: %v", time.Since(start).Round(time.Millisecond), err)
}
