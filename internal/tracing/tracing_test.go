package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestInjectExtract round-trips a span's context through NATS headers under
// the W3C key "traceparent".
func TestInjectExtract(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := Tracer(tp).Start(context.Background(), "send")
	defer span.End()

	h := nats.Header{}
	Inject(ctx, h)
	sc := span.SpanContext()
	if got, want := h.Get("traceparent"), "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01"; got != want {
		t.Fatalf("traceparent %q, want %q", got, want)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %+v, want the remote %+v", got, sc)
	}

	empty := nats.Header{}
	Inject(context.Background(), empty)
	if len(empty) != 0 {
		t.Fatalf("a context without a span injected %v", empty)
	}
	if sc := trace.SpanContextFromContext(Extract(context.Background(), nil)); sc.IsValid() {
		t.Fatal("extracted a span context from no headers")
	}
}
