package serve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandbox-fleet/sandbox-fleet/internal/serve"
	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
)

// Metrics on loopback are plain HTTP for the machine's own scraper; off
// loopback they need TLS (and are then served to tokens allowed /metrics,
// TestServeInTheCluster).
func TestServeMetricsOffLoopbackNeedsTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := metrics.New("sliding")
	addr, scheme, err := serve.ServeMetrics(ctx, m, "127.0.0.1:0", serve.Access{}, nil)
	if err != nil || scheme != "http" || addr == nil {
		t.Errorf("metrics on loopback: %v %s %v", addr, scheme, err)
	}
	if _, _, err := serve.ServeMetrics(ctx, m, "0.0.0.0:0", serve.Access{}, nil); err == nil || !strings.Contains(err.Error(), "--tls-cert-file") {
		t.Errorf("metrics on every interface without TLS: %v, want refused naming --tls-cert-file", err)
	}
}
