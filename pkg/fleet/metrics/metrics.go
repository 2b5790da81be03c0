// Package metrics exposes a run's progress as Prometheus series, named like
// agent-sandbox-rl's (asrl_*) so dashboards carry over. Labels are bounded:
// phase, cluster, strategy and status — never an image or a task id — so a
// sweep over thousands of images does not explode the series count.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are a run's collectors, on a registry of their own so that
// nothing is registered globally.
type Metrics struct {
	Registry *prometheus.Registry
	strategy string
	phase    *prometheus.HistogramVec
	task     *prometheus.HistogramVec
	run      *prometheus.HistogramVec
	claims   *prometheus.CounterVec
	tasks    *prometheus.CounterVec
	warm     *prometheus.GaugeVec

	// A session's (serve's) figures.
	acquires, execs             *prometheus.CounterVec
	acquireLatency, execLatency *prometheus.HistogramVec
	releases                    *prometheus.CounterVec
}

// New registers the collectors of a run with strategy.
func New(strategy string) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.05, 2, 16) // 50ms .. ~27m
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		strategy: strategy,
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "asrl_phase_latency_seconds", Help: "Duration of each occurrence of a run phase.", Buckets: buckets,
		}, []string{"phase", "cluster", "strategy"}),
		task: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "asrl_task_latency_seconds", Help: "Duration of a task from claim to release.", Buckets: buckets,
		}, []string{"cluster", "strategy", "status"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "asrl_run_latency_seconds", Help: "Wall time of a whole run.", Buckets: buckets,
		}, []string{"strategy", "status"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asrl_claims_total", Help: "Sandbox claims made, by outcome.",
		}, []string{"cluster", "strategy", "status"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asrl_tasks_total", Help: "Tasks finished, by outcome.",
		}, []string{"cluster", "strategy", "status"}),
		warm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "asrl_warm_replicas", Help: "Warm replicas the run holds now.",
		}, []string{"cluster"}),
	}
	m.acquires = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "asrl_session_acquires_total", Help: "Acquires a session served, by outcome and by how the sandbox was had: warm (Ready before it was asked for), cold, or reused (reset after an earlier lease).",
	}, []string{"status", "sandbox"})
	m.acquireLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "asrl_session_acquire_latency_seconds", Help: "How long a session's acquires took.", Buckets: buckets,
	}, []string{"status"})
	m.execs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "asrl_session_commands_total", Help: "Commands run in a session's sandboxes, by kind (exec, shell, process) and outcome (error: the sandbox's or the infrastructure's failure, not the command's exit code).",
	}, []string{"kind", "status"})
	m.execLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "asrl_session_command_latency_seconds", Help: "How long a session's commands ran, by kind (exec, shell).", Buckets: buckets,
	}, []string{"kind"})
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "asrl_session_releases_total", Help: "Sandboxes a session gave back, by outcome: released, expired (released as its client's lease ran out), reset (kept for reuse), quarantined, rotated.",
	}, []string{"outcome"})
	m.Registry.MustRegister(m.phase, m.task, m.run, m.claims, m.tasks, m.warm, m.acquires, m.acquireLatency, m.execs, m.execLatency, m.releases,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func status(ok bool) string {
	if ok {
		return "ok"
	}
	return "error"
}

// Phase observes one occurrence of a phase on cluster.
func (m *Metrics) Phase(phase, cluster string, d time.Duration) {
	m.phase.WithLabelValues(phase, cluster, m.strategy).Observe(d.Seconds())
}

// Claim counts a claim on cluster.
func (m *Metrics) Claim(cluster string, ok bool) {
	m.claims.WithLabelValues(cluster, m.strategy, status(ok)).Inc()
}

// Task counts a finished task and observes how long it held its sandbox.
func (m *Metrics) Task(cluster string, ok bool, d time.Duration) {
	m.tasks.WithLabelValues(cluster, m.strategy, status(ok)).Inc()
	m.task.WithLabelValues(cluster, m.strategy, status(ok)).Observe(d.Seconds())
}

// Warm adds n (or removes -n) warm replicas on cluster.
func (m *Metrics) Warm(cluster string, n int) {
	m.warm.WithLabelValues(cluster).Add(float64(n))
}

// Run observes a whole run's wall time.
func (m *Metrics) Run(ok bool, d time.Duration) {
	m.run.WithLabelValues(m.strategy, status(ok)).Observe(d.Seconds())
}

// SessionAcquire counts an acquire of a session and observes how long it
// took; sandbox is how it was had (warm, cold or reused), "" for a failed
// one.
func (m *Metrics) SessionAcquire(ok bool, sandbox string, d time.Duration) {
	m.acquires.WithLabelValues(status(ok), sandbox).Inc()
	m.acquireLatency.WithLabelValues(status(ok)).Observe(d.Seconds())
}

// SessionCommand counts a command run in a session's sandbox, of kind
// exec, shell or process, and observes how long it ran (d > 0).
func (m *Metrics) SessionCommand(kind string, ok bool, d time.Duration) {
	m.execs.WithLabelValues(kind, status(ok)).Inc()
	if d > 0 {
		m.execLatency.WithLabelValues(kind).Observe(d.Seconds())
	}
}

// SessionRelease counts a sandbox a session gave back, by outcome.
func (m *Metrics) SessionRelease(outcome string) {
	m.releases.WithLabelValues(outcome).Inc()
}

// SessionGauges has each scrape read a session's clients with a live
// lease, sandboxes held and pools.
func (m *Metrics) SessionGauges(clients, held, pools func() int) {
	for _, g := range []struct {
		name, help string
		value      func() int
	}{
		{"asrl_session_clients", "Clients of the session whose lease runs.", clients},
		{"asrl_session_sandboxes_held", "Sandboxes the session's clients hold.", held},
		{"asrl_session_pools", "Pools the session keeps warm or is warming.", pools},
	} {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help},
			func() float64 { return float64(g.value()) }))
	}
}

// Handler serves the registry in Prometheus's exposition format, for a
// server of the caller's (behind its own authentication) to mount.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Serve exposes the registry at /metrics on addr until ctx ends, and
// returns the address it listens on (addr may ask for port 0).
func (m *Metrics) Serve(ctx context.Context, addr string) (net.Addr, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = lis.Close()
		}
	}()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return lis.Addr(), nil
}
