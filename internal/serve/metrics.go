package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/metrics"
)

// ServeMetrics exposes m at /metrics on addr until ctx ends, and returns
// the address it listens on and its URL scheme. On loopback it is plain
// HTTP, as for a trainer's own machine. Anywhere else — serve in a Pod,
// scraped by Prometheus — it is TLS with a's certificate, and served only
// to bearer tokens the API server authenticates and authorises for
// nonResourceURL /metrics (get), as kube-rbac-proxy and the webhook's
// metrics do; cfg is how serve reaches the API server to ask.
func ServeMetrics(ctx context.Context, m *metrics.Metrics, addr string, a Access, cfg *rest.Config) (net.Addr, string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", addr, err)
	}
	if loopback(host) {
		maddr, err := m.Serve(ctx, addr)
		return maddr, "http", err
	}
	if a.CertFile == "" {
		return nil, "", fmt.Errorf("%s is off loopback: give --tls-cert-file and --tls-key-file, over which the metrics are served to tokens allowed /metrics, or a loopback address", addr)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", err
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, httpClient)
	if err != nil {
		return nil, "", err
	}
	guarded, err := filter(klog.FromContext(ctx), m.Handler())
	if err != nil {
		return nil, "", err
	}
	cert, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile)
	if err != nil {
		return nil, "", fmt.Errorf("the metrics' TLS certificate: %w", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("serving metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", guarded)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}}
	go func() {
		if err := srv.ServeTLS(lis, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving metrics failed", "address", addr)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return lis.Addr(), "https", nil
}
