package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The webhook's metrics, served with controller-runtime's at /metrics.
// They are registered once per process, however many servers run in it.
var (
	admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "asrl_webhook_admissions_total",
		Help: "Admission reviews answered, by kind (Pod, SandboxTemplate) and result (allowed, mutated, denied, errored).",
	}, []string{"kind", "result"})
	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "asrl_webhook_admission_duration_seconds",
		Help:    "Time to decide an admission review, by kind.",
		Buckets: []float64{.0001, .0002, .0005, .001, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25},
	}, []string{"kind"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(admissions, admissionDuration)
}

// timed answers an admission of kind with handle, which also names the
// outcome, and records both and the time it took.
func timed(kind string, handle func() (admission.Response, string)) admission.Response {
	start := time.Now()
	resp, result := handle()
	admissions.WithLabelValues(kind, result).Inc()
	admissionDuration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	return resp
}
