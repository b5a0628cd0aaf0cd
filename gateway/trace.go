package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"

	"github.com/foundryq/foundryq/internal/tracing"
)

// traceContext is the request's context with the caller's W3C trace context
// (traceparent, tracestate, baggage headers), if any: the run request or
// cancel the gateway sends on NATS continues the caller's trace.
func traceContext(r *http.Request) context.Context {
	return tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}
