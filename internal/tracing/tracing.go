// Package tracing carries OpenTelemetry trace context across NATS messages
// and sets up the tracer provider that the standard OTEL_* environment
// describes.
//
// Trace context travels as a W3C traceparent (and tracestate, baggage) in
// message headers: a run request's headers carry the submitter's span, the
// worker's run span continues it, and every event the worker stores, every
// Foundry call it makes and every cancel carries the run's trace on.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of foundryq's spans.
const Name = "github.com/foundryq/foundryq"

// Propagator is the W3C trace context and baggage propagator foundryq uses
// on NATS headers and Foundry requests, whatever the global one is.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// HeaderCarrier adapts NATS message headers to propagation.TextMapCarrier.
// Keys are used as given (NATS headers are case-sensitive): "traceparent",
// "tracestate", "baggage".
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set sets key to value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the trace context of ctx into h (nothing when ctx carries
// no span). h must not be nil.
func Inject(ctx context.Context, h nats.Header) {
	Propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote trace context found in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, HeaderCarrier(h))
}

// Tracer returns foundryq's tracer from tp, or from the global tracer
// provider when tp is nil (a no-op one unless the program set one up).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Name)
}
