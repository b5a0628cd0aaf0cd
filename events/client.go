package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/tracing"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Prefix is the subject prefix. Default DefaultPrefix ("foundryq").
	Prefix string
	// CancelTimeout bounds a cancel request when the caller's context has
	// no earlier deadline. Default 5s.
	CancelTimeout time.Duration
	// HeartbeatInterval is how often a Watch publishes a watcher heartbeat.
	// Default 1s.
	HeartbeatInterval time.Duration
	// TracerProvider makes the spans of Submit ("foundryq submit") and
	// Cancel ("foundryq cancel"), whose W3C trace context goes out in the
	// messages' headers. Default: the global provider (otel.SetTracerProvider),
	// a no-op one unless the program set one up; even then a span active in
	// the caller's context is carried on.
	TracerProvider trace.TracerProvider
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.CancelTimeout == 0 {
		c.CancelTimeout = 5 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	return c
}

func (c ClientConfig) validate() error {
	if c.CancelTimeout < 0 {
		return fmt.Errorf("events: client: CancelTimeout %s must be positive", c.CancelTimeout)
	}
	if c.HeartbeatInterval < 10*time.Millisecond {
		return fmt.Errorf("events: client: HeartbeatInterval %s must be at least 10ms", c.HeartbeatInterval)
	}
	return nil
}

// Client submits, cancels, watches and lists runs, and reads their state.
// It creates nothing on NATS: the workers provision the streams and the
// state bucket. Safe for concurrent use.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  Names
	cfg    ClientConfig
	tracer trace.Tracer
}

// NewClient returns a Client on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if nc == nil {
		return nil, errors.New("events: client: nil connection")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, err := NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("events: client: Prefix: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("events: client: %w", err)
	}
	return &Client{nc: nc, js: js, names: names, cfg: cfg, tracer: tracing.Tracer(cfg.TracerProvider)}, nil
}

// Names returns the subject and stream names the client uses.
func (c *Client) Names() Names { return c.names }

// SubmitResult says what became of a submitted run request.
type SubmitResult struct {
	RunID    string
	Stream   string // where the request was stored; empty when Existing
	Sequence uint64 // its stream sequence; 0 when Existing
	// Existing is true when the run id already belongs to a run with the
	// same request (a retry): nothing was published, and Status is that
	// run's status.
	Existing bool
	Status   RunStatus
}

// Submit validates req and publishes it on <prefix>.runs.<run_id> with
// Nats-Msg-Id = run id, returning once JetStream has stored it. A run id
// runs once, for one request:
//   - a bad request returns a *ValidationError and publishes nothing;
//   - if a worker has taken the run already, the same request again is a
//     retry: nothing is published and the result has Existing set and the
//     run's Status; a different request gives a *RunIDUsedError (errors.Is
//     ErrRunIDUsed) naming the run's status;
//   - a run id still waiting in the queue gives ErrAlreadyQueued.
//
// Submit never generates a run id: use NewRunID.
//
// The request's headers carry the W3C trace context of a "foundryq submit"
// span (a child of the span in ctx, if any): the worker's run span
// continues it.
func (c *Client) Submit(ctx context.Context, req RunRequest) (res SubmitResult, err error) {
	ctx, span := c.tracer.Start(ctx, "foundryq submit", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("foundryq.run_id", req.RunID), attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", c.names.RunSubject(req.RunID))))
	defer func() { endSpan(span, err) }()
	if err := req.Validate(); err != nil {
		return SubmitResult{}, err
	}
	digest := req.Digest()
	if res, done, err := c.existing(ctx, req.RunID, digest); done {
		return res, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("events: submit run %s: encode: %w", req.RunID, err)
	}
	msg := nats.NewMsg(c.names.RunSubject(req.RunID))
	msg.Data = data
	tracing.Inject(ctx, msg.Header)
	ack, err := c.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(req.RunID), jetstream.WithExpectStream(c.names.RunsStream()))
	if err != nil {
		if jserr.SubjectFull(err) { // the run id is still queued
			return SubmitResult{}, fmt.Errorf("events: submit run %s: %w", req.RunID, ErrAlreadyQueued)
		}
		return SubmitResult{}, fmt.Errorf("events: submit run %s: %w", req.RunID, err)
	}
	if ack.Duplicate {
		// Within the dedupe window JetStream kept the first publish. Either
		// a worker has taken it (its state says which request it was) or it
		// is still waiting in the queue.
		if res, done, err := c.existing(ctx, req.RunID, digest); done {
			return res, err
		}
		return SubmitResult{}, fmt.Errorf("events: submit run %s: %w", req.RunID, ErrAlreadyQueued)
	}
	return SubmitResult{RunID: req.RunID, Stream: ack.Stream, Sequence: ack.Sequence, Status: StatusQueued}, nil
}

// endSpan records err (if any) on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// existing looks the run id up in the state bucket. done is false when no
// worker has recorded the run (or the bucket cannot be read), so the
// request may be published.
func (c *Client) existing(ctx context.Context, runID, digest string) (res SubmitResult, done bool, err error) {
	st, _, err := c.State(ctx, runID)
	if err != nil {
		return SubmitResult{}, false, nil
	}
	if st.Digest != "" && st.Digest == digest {
		return SubmitResult{RunID: runID, Existing: true, Status: st.Status}, true, nil
	}
	return SubmitResult{}, true, fmt.Errorf("events: submit run %s: %w", runID, &RunIDUsedError{RunID: runID, Status: st.Status})
}

// Cancel cancels runID. It first stores the cancel durably on
// <prefix>.cancels.<run_id> (stream <PREFIX>_CANCELS; a cancel already on
// record stays as it is), then asks the workers (core NATS request on
// <prefix>.cancel.<run_id>) and returns their typed reply. If no worker is
// running (no responders), the stored cancel is applied by the worker that
// takes the run, and Cancel answers from the state bucket: already_finished
// if the run has ended, cancelling otherwise. A reply carrying an error
// gives the reply and an error wrapping ErrCancelFailed. reason is free
// text, at most MaxCancelReasonLen characters.
//
// The stored cancel and the request carry the W3C trace context of a
// "foundryq cancel" span (a child of the span in ctx, if any); the
// worker's spans for the cancel continue it and link to the run's trace.
func (c *Client) Cancel(ctx context.Context, runID, reason string) (_ CancelReply, err error) {
	ctx, span := c.tracer.Start(ctx, "foundryq cancel", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("foundryq.run_id", runID), attribute.String("messaging.system", "nats")))
	defer func() { endSpan(span, err) }()
	if !ValidRunID(runID) {
		return CancelReply{}, fmt.Errorf("events: cancel run %q: %w", runID, ErrBadRunID)
	}
	creq := CancelRequest{Reason: reason}
	if err := creq.Validate(); err != nil {
		return CancelReply{}, err
	}
	data, err := json.Marshal(creq)
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	if err := c.recordCancel(ctx, runID, data); err != nil {
		return CancelReply{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.CancelTimeout)
	defer cancel()
	rmsg := nats.NewMsg(c.names.CancelSubject(runID))
	rmsg.Data = data
	tracing.Inject(ctx, rmsg.Header)
	msg, err := c.nc.RequestMsgWithContext(rctx, rmsg)
	if errors.Is(err, nats.ErrNoResponders) {
		return c.noWorkerReply(ctx, runID), nil
	}
	if err != nil {
		return CancelReply{}, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	reply, err := DecodeCancelReply(msg.Data)
	if err != nil {
		return reply, fmt.Errorf("events: cancel run %s: %w", runID, err)
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("events: cancel run %s: %w: %s", runID, ErrCancelFailed, reply.Error)
	}
	return reply, nil
}

// recordCancel stores the cancel request durably. A cancel already on
// record for the run is kept (the stream refuses a second one).
func (c *Client) recordCancel(ctx context.Context, runID string, body []byte) error {
	msg := nats.NewMsg(c.names.CancelRecordSubject(runID))
	msg.Data = body
	tracing.Inject(ctx, msg.Header)
	_, err := c.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(c.names.CancelsStream()))
	if jserr.SubjectFull(err) {
		return nil // a cancel is on record already
	}
	if err != nil {
		return fmt.Errorf("events: cancel run %s: record the cancel in stream %s (has a worker provisioned it?): %w",
			runID, c.names.CancelsStream(), err)
	}
	return nil
}

// noWorkerReply answers a cancel that no worker heard: the cancel is on
// record and the next worker to take the run applies it.
func (c *Client) noWorkerReply(ctx context.Context, runID string) CancelReply {
	reply := CancelReply{RunID: runID, Result: CancelCancelling}
	if st, _, err := c.State(ctx, runID); err == nil && st.Finished() {
		reply.Result = CancelAlreadyFinished
		reply.Terminal = st.Terminal
		reply.UpstreamStatus = st.UpstreamStatus
	}
	return reply
}

// State returns the state record of runID and its revision: an error
// wrapping ErrStateNotFound if there is none (the run is unknown, or still
// queued), ErrStateCorrupt if it cannot be read.
func (c *Client) State(ctx context.Context, runID string) (RunState, uint64, error) {
	return ReadState(ctx, c.nc, c.names.Bucket(), runID)
}
