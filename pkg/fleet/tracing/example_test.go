package tracing_test

import (
	"fmt"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
)

// Traces are on when the environment names an OTLP endpoint, as the
// OpenTelemetry SDKs read it.
func ExampleEnabled() {
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
	} {
		on, err := tracing.Enabled(func(k string) string { return env[k] })
		fmt.Println(on, err)
	}
	// Output:
	// false <nil>
	// true <nil>
	// false <nil>
	// false OTLP protocol http/protobuf: only grpc is supported; set OTEL_EXPORTER_OTLP_PROTOCOL=grpc
}
