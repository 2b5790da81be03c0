package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Metrics count admissions by kind and outcome and time them.
type Metrics struct {
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
}

// NewMetrics registers the webhook's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "asrl_webhook_admissions_total",
			Help: "Admission reviews answered, by kind (Pod, SandboxTemplate) and result (allowed, mutated, denied, errored).",
		}, []string{"kind", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "asrl_webhook_admission_duration_seconds",
			Help:    "Time to decide an admission review, by kind.",
			Buckets: []float64{.0001, .0002, .0005, .001, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25},
		}, []string{"kind"}),
	}
	reg.MustRegister(m.admissions, m.latency)
	return m
}

// timed answers an admission of kind with handle, which also names the
// outcome, and records both and the time it took.
func (m *Metrics) timed(kind string, handle func() (admission.Response, string)) admission.Response {
	start := time.Now()
	resp, result := handle()
	m.admissions.WithLabelValues(kind, result).Inc()
	m.latency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	return resp
}
