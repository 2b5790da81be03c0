// Command otlptree receives OTLP/gRPC traces on loopback and prints each
// trace as a tree of spans once its root span has come, for a person to
// see what kubectl sandbox-fleet traces without running a collector:
//
//	go run ./hack/otlptree &
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 kubectl sandbox-fleet run ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-fleet/sandbox-fleet/internal/otlptree"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4317", "loopback address to receive OTLP/gRPC on")
	keep := flag.Int("keep", 3, "siblings of one name shown before the rest are counted")
	attrs := flag.String("attributes", "sandbox_fleet.run_id,sandbox_fleet.strategy,sandbox_fleet.window,sandbox_fleet.images,sandbox_fleet.task.id,sandbox_fleet.node,sandbox_fleet.warm,sandbox_fleet.verdict,sandbox_fleet.outcome",
		"span attributes to print, comma-separated")
	flag.Parse()
	r, err := otlptree.Start(*addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "otlptree: %v\n", err)
		os.Exit(2)
	}
	defer r.Stop()
	fmt.Fprintf(os.Stderr, "receiving OTLP/gRPC at %s; set OTEL_EXPORTER_OTLP_ENDPOINT=%s\n", *addr, r.Endpoint())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	printed := map[string]bool{}
	for ctx.Err() == nil {
		spans := r.Spans()
		for _, root := range otlptree.Children(spans)[""] {
			if root.Parent != "" || printed[root.TraceID] {
				continue
			}
			printed[root.TraceID] = true
			var trace []otlptree.Span
			for _, s := range spans {
				if s.TraceID == root.TraceID {
					trace = append(trace, s)
				}
			}
			if err := otlptree.Write(os.Stdout, trace, strings.Split(*attrs, ","), *keep); err != nil {
				fmt.Fprintf(os.Stderr, "otlptree: %v\n", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
