package consumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/tracing"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// run is one job owned by this worker, from the moment it was pulled until
// its terminal event is stored and the job acked (or it is handed off).
type run struct {
	w     *Worker
	msg   jetstream.Msg
	id    string
	owner owner
	// log is the run's logger: run_id, attempt and worker, and response_id
	// once known (setResponseID). Read it with logger().
	log atomic.Pointer[zerolog.Logger]
	// span is the run's "foundryq run" span; ctx and hard carry it.
	span trace.Span

	taken     time.Time    // when this worker took the job
	submitted time.Time    // when the run request was stored (zero if unknown)
	activity  atomic.Int64 // unix nanos of the last event stored (or taken)
	// createAt is when this run sent its create (zero if it did not), and
	// firstText whether the response's first text arrived; the reader's
	// own (read, create, relayStream).
	createAt  time.Time
	firstText bool
	// upStop stops the reader with a cause (errUpstreamQueued); set by
	// drive before the reader starts. queued times a response that Foundry
	// keeps queued; the reader's own.
	upStop  context.CancelCauseFunc
	queued  *time.Timer
	stalled bool // the record says the stream went silent (stalled_at)
	// req is the run's request once decoded (execute).
	req events.RunRequest

	// ctx ends when something asks the run to stop; its cause says what
	// (ErrCancelRequested, ErrRunTimeout, ErrAbandoned, ErrShutdown,
	// ErrLostOwnership). Stopping is a decision the run makes, not an abort.
	ctx  context.Context
	stop context.CancelCauseFunc
	// hard bounds every NATS and Foundry call of the run; it ends only when
	// the run is aborted (shutdown timeout) or done.
	hard  context.Context
	abort context.CancelFunc

	rel      *relay
	lostOnce sync.Once // counts the loss of ownership once (countLost)

	mu         sync.Mutex
	state      events.RunState   // the record as this run last wrote or read it
	cancelNote string            // the requester's text of a cancel heard directly
	cancelID   string            // the client's id of that cancel (events.HeaderCancelID)
	cancelFrom trace.SpanContext // the span of that cancel's answer, if traced
	responseID string
	idSeenAt   time.Time     // when the response id was first known to this run
	idReady    chan struct{} // closed once the Foundry response id is known
	createSent bool          // the create was (or is being) sent upstream
	foreground bool          // Foundry runs the response in the foreground: no resume, no cancel
	slot       *slot         // the concurrency slot the run holds (caps.go)
	spent      *spent        // the tokens it took from its deployment's budget (budget.go)

	// cancelHeard: a cancel request reached the run (requestCancel). At
	// shutdown, such a cancel that the record does not hold is taken
	// upstream before the run is handed off (cancelAtHandOff):
	// handOffCancelling once that started, handOffCancel until it ends;
	// handedOff once the run is past the point where one may start.
	cancelHeard       bool
	handOffCancelling bool
	handedOff         bool
	handOffCancel     sync.WaitGroup
}

// newRun makes the run of a job. Its span continues the trace context in
// the job's headers; the caller ends it (r.span.End).
func (w *Worker) newRun(msg jetstream.Msg, runID string, attempt int, submitted time.Time) *run {
	base, span := w.tracer.Start(tracing.Extract(context.Background(), msg.Headers()), "foundryq run",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("foundryq.run_id", runID), attribute.Int("foundryq.attempt", attempt),
			attribute.String("foundryq.worker", w.cfg.WorkerID)))
	ctx, stop := context.WithCancelCause(base)
	hard, abort := context.WithCancel(base)
	r := &run{
		w:         w,
		msg:       msg,
		id:        runID,
		owner:     owner{worker: w.cfg.WorkerID, attempt: attempt},
		span:      span,
		taken:     time.Now(),
		submitted: submitted,
		ctx:       ctx,
		stop:      stop,
		hard:      hard,
		abort:     abort,
		idReady:   make(chan struct{}),
	}
	log := w.log.With().Str("run_id", runID).Int("attempt", attempt).Logger()
	r.log.Store(&log)
	r.activity.Store(r.taken.UnixNano())
	return r
}

// logger returns the run's logger.
func (r *run) logger() *zerolog.Logger { return r.log.Load() }

// lastActivity is when the run last stored an event, or was taken.
func (r *run) lastActivity() time.Time { return time.Unix(0, r.activity.Load()) }

// sameJob reports whether a and b are deliveries of the same stored job
// (the same stream sequence), rather than two jobs for one run id.
func sameJob(a, b jetstream.Msg) bool {
	ma, errA := a.Metadata()
	mb, errB := b.Metadata()
	if errA != nil || errB != nil {
		return true // cannot tell: keep the old behaviour, ignore it
	}
	return ma.Sequence.Stream == mb.Sequence.Stream
}

// startRelay starts publishing this run's events after pos.
func (r *run) startRelay(pos position) {
	r.rel = r.w.newRelay(r.id, pos, r.w.cfg.EventInterval, *r.logger())
	r.rel.activity = &r.activity
	r.rel.onStoreFull = func() { r.stop(errStoreFull) }
	r.rel.start(r.hard, func(err error) {
		if errors.Is(err, ErrLostOwnership) {
			r.stop(ErrLostOwnership)
		} else if errors.Is(err, errPublishRefused) {
			r.logger().Error().Err(err).Msg("an event of the run was refused by NATS")
			r.stop(err)
		}
	})
}

func (r *run) stopRelay() {
	r.rel.close()
	<-r.rel.done
}

func (r *run) currentResponseID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.responseID
}

// setResponseID makes the response id known to this run at once (a cancel
// waiting for it goes ahead); saving it durably is saveResponseID's job.
// seenAt is when the response was created, as far as the run knows.
func (r *run) setResponseID(id string, seenAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.responseID != "" {
		return
	}
	r.responseID = id
	r.idSeenAt = seenAt
	close(r.idReady)
	log := r.logger().With().Str("response_id", id).Logger()
	r.log.Store(&log)
	r.span.SetAttributes(attribute.String("foundry.response_id", id))
}

// notYetVisible reports an upstream 404 for a response this run learned of
// less than foundry.NotFoundGrace ago: Azure has been measured answering 404
// for up to about 33 s after a streamed create, so such a 404 means "not
// yet", not "gone".
func (r *run) notYetVisible(err error) bool {
	r.mu.Lock()
	seen := r.idSeenAt
	r.mu.Unlock()
	return !seen.IsZero() && foundry.NotYetVisible(err, time.Since(seen))
}

func (r *run) setForeground() {
	r.mu.Lock()
	r.foreground = true
	r.mu.Unlock()
}

func (r *run) isForeground() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.foreground
}

func (r *run) markCreateSent() {
	r.mu.Lock()
	r.createSent = true
	r.mu.Unlock()
}

func (r *run) wasCreateSent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.createSent
}

func reasonOf(cause error) string {
	switch {
	case errors.Is(cause, ErrRunTimeout):
		return events.ReasonTimeout
	case errors.Is(cause, ErrAbandoned):
		return events.ReasonAbandoned
	default:
		return events.ReasonRequested
	}
}

// isCancelCause reports whether a run stopped for cause is cancelled
// (interrupt hands it to cancel): a cause made by causeOf.
func isCancelCause(cause error) bool {
	return errors.Is(cause, ErrRunTimeout) || errors.Is(cause, ErrAbandoned) || errors.Is(cause, ErrCancelRequested)
}

func causeOf(reason string) error {
	switch reason {
	case events.ReasonTimeout:
		return ErrRunTimeout
	case events.ReasonAbandoned:
		return ErrAbandoned
	default:
		return ErrCancelRequested
	}
}
