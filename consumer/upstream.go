package consumer

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/foundry"
)

// observed wraps the worker's Provider: every Foundry call is timed
// (upstream_request_seconds by operation and status) and gets a client span
// "foundry <op>", a child of the run's (or the cancel's) span in ctx, whose
// trace context the foundry client sends with the request.
type observed struct {
	up     Provider
	m      *metrics
	tracer trace.Tracer
}

func (o observed) start(ctx context.Context, op, responseID string) (context.Context, trace.Span, time.Time) {
	attrs := []attribute.KeyValue{attribute.String("foundry.operation", op)}
	if responseID != "" {
		attrs = append(attrs, attribute.String("foundry.response_id", responseID))
	}
	ctx, span := o.tracer.Start(ctx, "foundry "+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, span, time.Now()
}

func (o observed) end(ctx context.Context, span trace.Span, op string, start time.Time, err error) {
	status := upstreamStatusOf(err)
	if err != nil && ctx.Err() != nil {
		status = "canceled" // the run stopped the call, whatever error it gave
	}
	o.m.upstreamSeconds.WithLabelValues(op, status).Observe(time.Since(start).Seconds())
	span.SetAttributes(attribute.String("foundry.status", status))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Create implements Provider.
func (o observed) Create(ctx context.Context, req foundry.CreateRequest) (*foundry.Stream, error) {
	ctx, span, start := o.start(ctx, "create", "")
	s, err := o.up.Create(ctx, req)
	o.end(ctx, span, "create", start, err)
	return s, err
}

// Resume implements Provider.
func (o observed) Resume(ctx context.Context, responseID string, after int64) (*foundry.Stream, error) {
	ctx, span, start := o.start(ctx, "resume", responseID)
	s, err := o.up.Resume(ctx, responseID, after)
	o.end(ctx, span, "resume", start, err)
	return s, err
}

// Get implements Provider.
func (o observed) Get(ctx context.Context, responseID string) (*foundry.Response, error) {
	ctx, span, start := o.start(ctx, "get", responseID)
	r, err := o.up.Get(ctx, responseID)
	o.end(ctx, span, "get", start, err)
	return r, err
}

// Cancel implements Provider.
func (o observed) Cancel(ctx context.Context, responseID string) (*foundry.Response, error) {
	ctx, span, start := o.start(ctx, "cancel", responseID)
	r, err := o.up.Cancel(ctx, responseID)
	o.end(ctx, span, "cancel", start, err)
	return r, err
}
