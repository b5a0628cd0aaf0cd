package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
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
	// CancelTimeout bounds a whole Cancel call (storing the cancel, the
	// requests to the workers, retries included, and the look-ups of the
	// run's record) when the caller's context has no earlier deadline.
	// Default DefaultCancelTimeout (5s).
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
		c.CancelTimeout = DefaultCancelTimeout
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
// req.FairnessKey and req.Priority are sent as the headers
// HeaderFairnessKey and HeaderPriority, not in the body: a worker from
// before them ignores the headers (and runs the request in its turn)
// where it would refuse the body fields.
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
	msg := nats.NewMsg(c.names.RunSubject(req.RunID))
	// The fairness key and the priority travel as headers, which workers
	// from before them ignore, rather than as body fields they refuse.
	if req.FairnessKey != "" {
		msg.Header.Set(HeaderFairnessKey, req.FairnessKey)
	}
	if req.Priority != "" {
		msg.Header.Set(HeaderPriority, string(req.Priority))
	}
	req.FairnessKey, req.Priority = "", ""
	data, err := json.Marshal(req)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("events: submit run %s: encode: %w", req.RunID, err)
	}
	msg.Data = data
	tracing.Inject(ctx, msg.Header)
	ack, err := c.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(req.RunID), jetstream.WithExpectStream(c.names.RunsStream()))
	if err != nil {
		if jserr.SubjectFull(err) { // the run id is still queued
			return SubmitResult{}, fmt.Errorf("events: submit run %s: %w", req.RunID, ErrAlreadyQueued)
		}
		if jserr.StoreFull(err) {
			return SubmitResult{}, fmt.Errorf("events: submit run %s: %w (%v); try again later", req.RunID, ErrQueueFull, err)
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

// DefaultCancelTimeout is ClientConfig.CancelTimeout's default: the bound
// on a whole Client.Cancel call (storing the cancel, the requests to the
// workers and the look-ups of the run's record).
const DefaultCancelTimeout = 5 * time.Second

// ErrCancelUndelivered is returned (wrapped) by Client.Cancel when the
// cancel could neither be stored (JetStream's store is full) nor delivered
// to a worker (none answered in time): nothing will cancel the run. Send
// the cancel again.
var ErrCancelUndelivered = errors.New("the cancel could not be stored nor delivered to a worker")

// Cancel cancels runID. It first stores the cancel durably on
// <prefix>.cancels.<run_id> (stream <PREFIX>_CANCELS; a cancel already on
// record stays as it is), then asks the workers (core NATS request on
// <prefix>.cancel.<run_id>) and returns their typed reply. The whole call
// is bounded by ClientConfig.CancelTimeout (default 5s), or by ctx if its
// deadline is earlier.
//
// The run's owner follows the stored cancel records, so once the cancel is
// stored it reaches the owner whatever becomes of the request:
//   - If no worker is running (no responders), the stored cancel is
//     applied by the worker that takes the run, and Cancel answers from the
//     state bucket: already_finished if the run has ended, cancelling
//     otherwise.
//   - If no reply comes within a slice of the timeout (the queue group
//     picked a worker that is cut off from NATS or frozen), Cancel reads the
//     run's record: already_finished if the run has ended, cancelling if it
//     is cancelling or has a cancel on record; otherwise it sends the
//     request again (another worker may answer) while time is left. In the
//     end, with the cancel stored but nobody confirming it, the result is
//     cancelling and no error: the outcome follows on the events subject.
//   - If JetStream refuses to store the cancel because its store (or the
//     cancels stream) is full, Cancel still sends the request, which
//     carries the cancel to the owner; a worker then answers cancelling
//     with Unrecorded set. If nobody answers either, the error wraps
//     ErrCancelUndelivered.
//
// A reply carrying an error gives the reply and an error wrapping
// ErrCancelFailed. reason is free text, at most MaxCancelReasonLen
// characters.
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
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CancelTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	total := time.Until(deadline)
	// Each request gets a slice of the time, so that a request the queue
	// group handed to a worker that never answers leaves time to look at
	// the record and to ask again; the last part of the time is kept for
	// that look.
	slice := max(total/3, 50*time.Millisecond)
	reserve := total / 10

	// One id for the stored record and the request: a worker that finds
	// the run already ended by this cancel answers cancelling.
	id := nuid.Next()
	stored, storeErr, err := c.recordCancel(ctx, runID, id, data)
	if err != nil {
		return CancelReply{}, err
	}
	attempts := 0
	var lastErr error
	for {
		if !stored && attempts > 0 {
			// The store may have room again: another try costs one publish.
			if ok, serr, err := c.recordCancel(ctx, runID, id, data); err == nil {
				stored = ok
				if serr != nil {
					storeErr = serr
				}
			}
		}
		attempts++
		end := time.Now().Add(slice)
		if last := deadline.Add(-reserve); last.Before(end) {
			end = last
		}
		rctx, rcancel := context.WithDeadline(ctx, end)
		rmsg := nats.NewMsg(c.names.CancelSubject(runID))
		rmsg.Data = data
		rmsg.Header.Set(HeaderCancelID, id)
		tracing.Inject(ctx, rmsg.Header)
		msg, rerr := c.nc.RequestMsgWithContext(rctx, rmsg)
		rcancel()
		switch {
		case rerr == nil:
			reply, err := DecodeCancelReply(msg.Data)
			if err != nil {
				return reply, fmt.Errorf("events: cancel run %s: %w", runID, err)
			}
			if reply.Error != "" {
				return reply, fmt.Errorf("events: cancel run %s: %w: %s", runID, ErrCancelFailed, reply.Error)
			}
			return reply, nil
		case errors.Is(rerr, nats.ErrNoResponders):
			if !stored {
				return CancelReply{}, fmt.Errorf("events: cancel run %s: %w: %w; no worker is running", runID, ErrCancelUndelivered, storeErr)
			}
			return c.noWorkerReply(ctx, runID, id), nil
		case errors.Is(rerr, context.DeadlineExceeded) || errors.Is(rerr, nats.ErrTimeout):
			// Nobody answered in time: perhaps the worker the request went
			// to is cut off or frozen. The record may say enough.
			if reply, ok := c.recordedReply(ctx, runID, id); ok {
				return reply, nil
			}
			lastErr = rerr
		default:
			// Not a silence another worker might break (the connection
			// closed, the caller gave up): no retry.
			lastErr = rerr
		}
		span.AddEvent("cancel request unanswered", trace.WithAttributes(attribute.Int("attempt", attempts),
			attribute.String("error", lastErr.Error())))
		retry := errors.Is(rerr, context.DeadlineExceeded) || errors.Is(rerr, nats.ErrTimeout)
		if !retry || ctx.Err() != nil || time.Until(deadline) <= reserve {
			break
		}
	}
	if stored {
		// On record: the owner follows the stored cancel records, and the
		// next worker to take the run applies it.
		return CancelReply{RunID: runID, Result: CancelCancelling}, nil
	}
	return CancelReply{}, fmt.Errorf("events: cancel run %s: %w: %w; no worker answered in %d attempts (%w)",
		runID, ErrCancelUndelivered, storeErr, attempts, lastErr)
}

// recordCancel stores the cancel request durably. A cancel already on
// record for the run is kept (the stream refuses a second one): stored is
// true then too. A write refused because JetStream's store or the stream is
// full gives stored false and that refusal as storeErr, not an error: the
// cancel request still carries the cancel to the run's owner.
func (c *Client) recordCancel(ctx context.Context, runID, id string, body []byte) (stored bool, storeErr, err error) {
	msg := nats.NewMsg(c.names.CancelRecordSubject(runID))
	msg.Data = body
	msg.Header.Set(HeaderCancelID, id)
	tracing.Inject(ctx, msg.Header)
	_, err = c.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(c.names.CancelsStream()))
	switch {
	case err == nil:
		return true, nil, nil
	case jserr.StoreFull(err):
		return false, fmt.Errorf("stream %s refused to store it: %w", c.names.CancelsStream(), err), nil
	case jserr.SubjectFull(err):
		return true, nil, nil // a cancel is on record already
	}
	return false, nil, fmt.Errorf("events: cancel run %s: record the cancel in stream %s (has a worker provisioned it?): %w",
		runID, c.names.CancelsStream(), err)
}

// recordedReply answers a cancel request nobody answered from the run's
// record, when it says enough: already_finished if the run has ended,
// cancelling if a worker has recorded a cancel. ok is false otherwise (or
// if the record cannot be read).
func (c *Client) recordedReply(ctx context.Context, runID, cancelID string) (CancelReply, bool) {
	st, _, err := c.State(ctx, runID)
	switch {
	case err != nil:
		return CancelReply{}, false
	case st.Finished():
		return FinishedReply(st, cancelID), true
	case st.Status == StatusCancelling || st.Cancel != nil:
		return CancelReply{RunID: runID, Result: CancelCancelling, UpstreamStatus: st.UpstreamStatus}, true
	}
	return CancelReply{}, false
}

// noWorkerReply answers a cancel that no worker heard: the cancel is on
// record and the next worker to take the run applies it.
func (c *Client) noWorkerReply(ctx context.Context, runID, cancelID string) CancelReply {
	if st, _, err := c.State(ctx, runID); err == nil && st.Finished() {
		return FinishedReply(st, cancelID)
	}
	return CancelReply{RunID: runID, Result: CancelCancelling}
}

// State returns the state record of runID and its revision: an error
// wrapping ErrStateNotFound if there is none (the run is unknown, or still
// queued), ErrStateCorrupt if it cannot be read.
func (c *Client) State(ctx context.Context, runID string) (RunState, uint64, error) {
	return ReadState(ctx, c.nc, c.names.Bucket(), runID)
}

// Exists reports whether run runID exists: a worker has recorded it, or
// its request waits in the queue (the runs stream's info, filtered to the
// run's subject, then the queue stream's, to its lane subjects: the
// request itself is not read). A run submitted a moment
// ago may be in neither for as long as the publish takes.
func (c *Client) Exists(ctx context.Context, runID string) (bool, error) {
	if _, _, err := c.State(ctx, runID); err == nil {
		return true, nil
	} else if !errors.Is(err, ErrStateNotFound) {
		return false, err
	}
	s, err := c.js.Stream(ctx, c.names.RunsStream())
	if err != nil {
		return false, fmt.Errorf("events: look for run %s in the queue: %w", runID, err)
	}
	subject := c.names.RunSubject(runID)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return false, fmt.Errorf("events: look for run %s in the queue: %w", runID, err)
	}
	if info.State.Subjects[subject] > 0 {
		return true, nil
	}
	return c.inLane(ctx, runID)
}

// inLane reports whether run runID's request waits in its lane on the
// queue stream (docs/scheduling.md), by the stream's info filtered to the
// run's lane subjects; false if there is no queue stream (workers before
// lanes).
func (c *Client) inLane(ctx context.Context, runID string) (bool, error) {
	s, err := c.js.Stream(ctx, c.names.QueueStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("events: look for run %s in the queue: %w", runID, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(c.names.LaneSubject("*", "*", runID)))
	if err != nil {
		return false, fmt.Errorf("events: look for run %s in the queue: %w", runID, err)
	}
	return len(info.State.Subjects) > 0, nil
}
