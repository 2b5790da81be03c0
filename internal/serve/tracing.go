package serve

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandbox-fleet/sandbox-fleet/pkg/fleet/tracing"
)

// traced gives every call a server span named after its procedure
// ("sandboxfleet.fleet.v1.FleetService/Acquire"), a child of the trace
// the client sent in its W3C traceparent header, if any. Handlers add
// what they know (task, node, sandbox) to it. With tracing off the spans
// are OpenTelemetry's no-ops.
type traced struct{}

func (traced) start(ctx context.Context, spec connect.Spec, header propagation.HeaderCarrier) (context.Context, trace.Span) {
	ctx = tracing.Propagator.Extract(ctx, header)
	procedure := strings.TrimPrefix(spec.Procedure, "/")
	service, method, _ := strings.Cut(procedure, "/")
	return tracing.Tracer().Start(ctx, procedure, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "connect_rpc"), attribute.String("rpc.service", service), attribute.String("rpc.method", method)))
}

func end(span trace.Span, err error) {
	if err != nil {
		var cerr *connect.Error
		if errors.As(err, &cerr) {
			span.SetAttributes(attribute.String("rpc.connect_rpc.error_code", cerr.Code().String()))
		}
	}
	tracing.End(span, err)
}

func (t traced) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, span := t.start(ctx, req.Spec(), propagation.HeaderCarrier(req.Header()))
		resp, err := next(ctx, req)
		end(span, err)
		return resp, err
	}
}

func (traced) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t traced) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, span := t.start(ctx, conn.Spec(), propagation.HeaderCarrier(conn.RequestHeader()))
		err := next(ctx, conn)
		end(span, err)
		return err
	}
}

// annotate adds attrs to the call's span.
func annotate(ctx context.Context, attrs ...attribute.KeyValue) {
	trace.SpanFromContext(ctx).SetAttributes(attrs...)
}
