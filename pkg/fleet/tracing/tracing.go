// Package tracing exports the fleet's OpenTelemetry spans — run, window,
// warm, task, claim, process, release, teardown — over OTLP/gRPC when the
// standard OTEL_* environment asks for traces, and sets up nothing
// otherwise: the spans then go to OpenTelemetry's no-op provider.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/version"
)

// Tracer is the fleet's tracer, from the global provider.
func Tracer() trace.Tracer { return otel.Tracer("github.com/sandbox-fleet/sandbox-fleet") }

// The attributes that both run's and serve's spans carry.
const (
	RunID     = attribute.Key("sandbox_fleet.run_id")
	TaskID    = attribute.Key("sandbox_fleet.task.id")
	TaskImage = attribute.Key("sandbox_fleet.task.image")
	Cluster   = attribute.Key("sandbox_fleet.cluster")
	Node      = attribute.Key("sandbox_fleet.node")
	Sandbox   = attribute.Key("sandbox_fleet.sandbox")
	// Warm is true for a sandbox that was Ready when it was asked for, or
	// reset and reused.
	Warm = attribute.Key("sandbox_fleet.warm")
	// Outcome is what became of a sandbox given back: deleted, reused...
	Outcome = attribute.Key("sandbox_fleet.outcome")
)

// Propagator carries W3C trace context and baggage: what the fleet's
// spans send on, and what serve reads from its callers.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// End ends span, marking it failed with err when there is one.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Enabled reports whether the environment read by getenv asks for traces:
// an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), OTEL_SDK_DISABLED is not true and
// OTEL_TRACES_EXPORTER is unset or otlp. An error says what in it cannot
// be honoured.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exporter := getenv("OTEL_TRACES_EXPORTER"); exporter {
	case "none":
		return false, nil
	case "", "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: only otlp (or none) is supported", exporter)
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return false, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "grpc" {
		return false, fmt.Errorf("OTLP protocol %s: only grpc is supported; set OTEL_EXPORTER_OTLP_PROTOCOL=grpc", protocol)
	}
	return true, nil
}

// Start installs, when the environment asks for traces, an OTLP/gRPC
// exporter (configured by the OTEL_EXPORTER_OTLP_* variables) behind a
// batching provider as the global one, with service as the service name
// unless OTEL_SERVICE_NAME says otherwise, and W3C trace-context
// propagation. shutdown flushes what is left; it does nothing when
// nothing was installed.
func Start(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	on, err := Enabled(os.Getenv)
	if err != nil || !on {
		return none, err
	}
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return none, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(service), semconv.ServiceVersion(version.Get().GitVersion)))
	if err != nil {
		return none, err
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the above.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(Propagator)
	return func(ctx context.Context) error {
		if err := provider.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("tracing: flushing the spans: %w", err)
		}
		return nil
	}, nil
}
