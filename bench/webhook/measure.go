package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-fleet/sandbox-fleet/bench/internal/stats"
	"github.com/sandbox-fleet/sandbox-fleet/internal/testwebhook"
	"github.com/sandbox-fleet/sandbox-fleet/internal/webhook"
)

// diff turns the observations between two readings of the histogram into
// values, each at the upper bound of its bucket: quantiles read from them
// are upper bounds at the buckets' resolution.
func diff(after, before *dto.Histogram) []float64 {
	if after == nil {
		return nil
	}
	prev := map[float64]uint64{}
	if before != nil {
		for _, b := range before.GetBucket() {
			prev[b.GetUpperBound()] = b.GetCumulativeCount()
		}
	}
	var out []float64
	below := uint64(0)
	for _, b := range after.GetBucket() {
		cum := b.GetCumulativeCount() - prev[b.GetUpperBound()]
		for range cum - below {
			out = append(out, b.GetUpperBound())
		}
		below = cum
	}
	return out
}

// counters are the cumulative figures a trial is measured by.
type counters struct {
	// decisions is the webhook's decision-time histogram for Pods.
	decisions *dto.Histogram
	// callSum and calls are the API server's total time in calls to the
	// sandbox Pod webhook and their number.
	callSum, calls float64
	// apiCPU and webhookCPU are the CPU seconds each process has used.
	apiCPU, webhookCPU float64
}

func readCounters(ctx context.Context, kc kubernetes.Interface, server *testwebhook.Server) (counters, error) {
	var c counters
	families, err := apiServerMetrics(ctx, kc)
	if err != nil {
		return c, err
	}
	for _, m := range families["apiserver_admission_webhook_admission_duration_seconds"].GetMetric() {
		// The entries the webhook writes per policy for sandbox Pods.
		if pod, _ := webhook.IsPodEntry(label(m, "name")); pod {
			c.callSum += m.GetHistogram().GetSampleSum()
			c.calls += float64(m.GetHistogram().GetSampleCount())
		}
	}
	c.apiCPU = families["process_cpu_seconds_total"].GetMetric()[0].GetCounter().GetValue()

	body, err := server.Metrics(ctx)
	if err != nil {
		return c, err
	}
	if families, err = parseMetrics([]byte(body)); err != nil {
		return c, fmt.Errorf("the webhook's metrics: %w", err)
	}
	for _, m := range families["asrl_webhook_admission_duration_seconds"].GetMetric() {
		if label(m, "kind") == "Pod" {
			c.decisions = m.GetHistogram()
		}
	}
	c.webhookCPU = families["process_cpu_seconds_total"].GetMetric()[0].GetCounter().GetValue()
	return c, nil
}

// apiServerMetrics reads the API server's metrics.
func apiServerMetrics(ctx context.Context, kc kubernetes.Interface) (map[string]*dto.MetricFamily, error) {
	b, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	families, err := parseMetrics(b)
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	return families, nil
}

func parseMetrics(text []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	if len(families["process_cpu_seconds_total"].GetMetric()) == 0 {
		return nil, errors.New("no process_cpu_seconds_total")
	}
	return families, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// collectGarbage has the API server run a full garbage collection (its
// heap profile handler does, before it writes the profile), so that each
// trial starts from a collected heap: the API server collects every few
// seconds, and which trial a collection falls into would otherwise weigh
// more than the modes differ.
func collectGarbage(ctx context.Context, kc kubernetes.Interface) error {
	if _, err := kc.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		return fmt.Errorf("collecting the API server's garbage: %w", err)
	}
	return nil
}

// profileAPIServer writes 2 s of the API server's CPU profile to
// dir/name.pprof, for go tool pprof.
func profileAPIServer(ctx context.Context, kc kubernetes.Interface, dir, name string) error {
	b, err := kc.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "2").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("profiling the API server: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, strings.NewReplacer(" ", "-", ",", "", "+", "with").Replace(name)+".pprof"), b, 0o644)
}

// medianRatio is the median of the rounds' ratios of xs to ys.
func medianRatio(xs, ys []float64) float64 {
	ratios := make([]float64, len(xs))
	for i := range xs {
		ratios[i] = xs[i] / ys[i]
	}
	return stats.Percentile(ratios, 0.5)
}
