// Package otlptree is an OTLP/gRPC trace receiver on loopback — the OTLP
// protocol's own TraceService, as any collector serves it — that keeps
// the spans it is sent and prints them as trees. Tests assert a run's span
// tree with it, and hack/otlptree shows a person one.
package otlptree

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is a received span: its name, ids, times and attributes, with the
// service that sent it.
type Span struct {
	Name, Service       string
	TraceID, ID, Parent string
	Start, End          time.Time
	Attributes          map[string]string
	Failed              bool
}

// Receiver keeps the spans sent to it.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	server   *grpc.Server
	listener net.Listener

	mu    sync.Mutex
	spans []Span
}

// Start serves OTLP/gRPC on addr, which must be a loopback address
// ("127.0.0.1:0" picks a port).
func Start(addr string) (*Receiver, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		return nil, fmt.Errorf("address %q: the receiver listens on a loopback address only", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Receiver{server: grpc.NewServer(), listener: l}
	collectortrace.RegisterTraceServiceServer(r.server, r)
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// Endpoint is the receiver's address as OTEL_EXPORTER_OTLP_ENDPOINT takes
// it.
func (r *Receiver) Endpoint() string { return "http://" + r.listener.Addr().String() }

// Stop stops serving.
func (r *Receiver) Stop() { r.server.Stop() }

// Export keeps the spans of req.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attributes(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Name: s.GetName(), Service: service,
					TraceID: hex.EncodeToString(s.GetTraceId()), ID: hex.EncodeToString(s.GetSpanId()), Parent: hex.EncodeToString(s.GetParentSpanId()),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attributes: attributes(s.GetAttributes()), Failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

func attributes(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_ArrayValue:
			var items []string
			for _, item := range v.ArrayValue.GetValues() {
				items = append(items, item.GetStringValue())
			}
			out[kv.GetKey()] = strings.Join(items, ",")
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = fmt.Sprint(v.BoolValue)
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.StringValue
		}
	}
	return out
}

// Children maps each span's id to its children, in start order; the
// roots are under "".
func Children(spans []Span) map[string][]Span {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.ID] = true
	}
	children := map[string][]Span{}
	for _, s := range spans {
		parent := s.Parent
		if !ids[parent] {
			parent = ""
		}
		children[parent] = append(children[parent], s)
	}
	for _, c := range children {
		slices.SortStableFunc(c, func(a, b Span) int { return cmp.Compare(a.Start.UnixNano(), b.Start.UnixNano()) })
	}
	return children
}

// Write prints spans as trees, a span a line: its name, duration and the
// attributes named in keys (without their sandbox_fleet. prefix), indented
// under its parent. Runs of more than keep siblings of one name show the
// first keep and how many more.
func Write(w io.Writer, spans []Span, keys []string, keep int) error {
	children := Children(spans)
	var write func(s Span, depth int) error
	write = func(s Span, depth int) error {
		var attrs []string
		for _, k := range keys {
			if v, ok := s.Attributes[k]; ok && v != "" {
				attrs = append(attrs, strings.TrimPrefix(k, "sandbox_fleet.")+"="+v)
			}
		}
		line := fmt.Sprintf("%s%s %s", strings.Repeat("  ", depth), s.Name, s.End.Sub(s.Start).Round(time.Millisecond))
		if len(attrs) > 0 {
			line += " " + strings.Join(attrs, " ")
		}
		if s.Failed {
			line += " (failed)"
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
		shown := map[string]int{}
		for _, c := range children[s.ID] {
			shown[c.Name]++
			if shown[c.Name] > keep {
				continue
			}
			if err := write(c, depth+1); err != nil {
				return err
			}
		}
		for _, name := range slices.Sorted(maps.Keys(shown)) {
			if n := shown[name]; n > keep {
				if _, err := fmt.Fprintf(w, "%s... %d more %s spans\n", strings.Repeat("  ", depth+1), n-keep, name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, root := range children[""] {
		if err := write(root, 0); err != nil {
			return err
		}
	}
	return nil
}
