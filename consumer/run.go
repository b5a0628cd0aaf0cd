package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/tracing"
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

	// ctx ends when something asks the run to stop; its cause says what
	// (ErrCancelRequested, ErrRunTimeout, ErrAbandoned, ErrShutdown,
	// ErrLostOwnership). Stopping is a decision the run makes, not an abort.
	ctx  context.Context
	stop context.CancelCauseFunc
	// hard bounds every NATS and Foundry call of the run; it ends only when
	// the run is aborted (shutdown timeout) or done.
	hard  context.Context
	abort context.CancelFunc

	rel       *relay
	relayDone chan struct{} // closed when the relay's goroutine returns
	lostOnce  sync.Once     // counts the loss of ownership once (countLost)

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

// handle owns one job until it ends.
func (w *Worker) handle(msg jetstream.Msg) {
	attempt := 1
	var submitted time.Time
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
		submitted = meta.Timestamp
		if attempt == 1 {
			w.m.queueSeconds.Observe(max(time.Since(submitted).Seconds(), 0))
		}
	}
	runID, ok := w.names.RunIDFromSubject(msg.Subject())
	r := w.newRun(msg, runID, attempt, submitted)
	defer r.span.End()
	defer r.abort()
	defer r.stop(nil)
	if !ok {
		r.logger().Warn().Str("subject", msg.Subject()).Msg("job on a subject that names no valid run id; dead-lettered")
		r.end(ending{dead: &deadNote{events.CodeInvalidRequest, "subject " + msg.Subject() + " does not name a valid run id"},
			job: term, reason: "invalid run id"})
		return
	}
	if other, ok := w.register(r); !ok {
		if sameJob(other.msg, msg) {
			// The lease of our delivery lapsed while we still run it;
			// the server gives the job out again. Ignore this delivery:
			// our run goes on and renews the lease.
			r.logger().Warn().Msg("job delivered again while this worker still owns the run; ignoring the new delivery")
			return
		}
		// A new job for the run id (a resubmit) while this worker is
		// still finishing the run it acked a moment ago: give it back for
		// a moment, to be judged against the run's state once ours is
		// gone. Ignoring it would hold it for a whole ack wait.
		r.logger().Info().Msg("new job for a run this worker is still finishing; retried shortly")
		r.end(retryAfter(w.cfg.RetryDelay))
		return
	}
	defer w.unregister(r)
	if w.isStopping() {
		// Fetched in the last poll before shutdown: give it back at once.
		r.logger().Info().Msg("job arrived during shutdown; handed back")
		r.end(retryAfter(0))
		return
	}
	r.execute()
}

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

func (r *run) execute() {
	w := r.w
	pos, err := w.tail(r.hard, r.id)
	if err != nil {
		r.retryLater("read the run's last event", err)
		return
	}
	req, decodeErr := events.DecodeRunMsg(r.msg.Subject(), r.msg.Data(), w.names)
	digest := rawDigest(r.msg.Data())
	if decodeErr == nil {
		digest = req.Digest()
	}

	st, err := r.claim(digest, w.runTimeout(req))
	switch {
	case errors.Is(err, errFinished):
		r.logger().Info().Str("status", string(st.Status)).Msg("run already finished; acking the job")
		r.repairEnd(st, pos)
		r.end(ending{job: ack})
		return
	case errors.Is(err, errReused):
		r.refuseReused(st)
		return
	case errors.Is(err, errNewerSchema):
		r.logger().Warn().Err(err).Msg("the run's state was written by a newer worker; leaving the run to it")
		r.end(retryAfter(10 * time.Second))
		return
	case errors.Is(err, events.ErrStateCorrupt):
		r.startRelay(pos)
		r.failCorrupt(err)
		return
	case err != nil:
		r.retryLater("claim the run in the state bucket", err)
		return
	}

	r.startRelay(pos)
	defer r.stopRelay()
	taken := r.logger().Info().Int("failures", st.Failures)
	if !r.submitted.IsZero() {
		taken = taken.Dur("since_submit", r.taken.Sub(r.submitted))
	}
	taken.Msg("run taken")

	switch {
	case decodeErr != nil:
		r.failInvalid(decodeErr)
		return
	case budgetSpent(st, w.maxFailures()):
		r.giveUp()
		return
	}
	if cancel := r.pendingCancel(st); cancel != nil {
		if st.ResponseID == "" && st.CreateStartedAt == nil {
			r.logger().Info().Str("reason", cancel.Reason).Msg("cancel recorded before the run started; Foundry is not called")
			r.finishCancelled(cancel.Reason, stopped{how: reachNone})
			return
		}
		r.stop(causeOf(cancel.Reason))
	}
	if st.ResponseID == "" && st.CreateStartedAt != nil && !r.findResponse(pos) {
		return
	}

	timers := r.armTimers(req)
	defer timers.stop()
	r.drive(req, pos)
}

// startRelay starts publishing this run's events after pos.
func (r *run) startRelay(pos position) {
	r.rel = r.w.newRelay(r.id, pos, r.w.cfg.EventInterval, *r.logger())
	r.rel.activity = &r.activity
	r.rel.onStoreFull = func() { r.stop(errStoreFull) }
	r.relayDone = make(chan struct{})
	go func() {
		defer close(r.relayDone)
		r.rel.run(r.hard, func(err error) {
			if errors.Is(err, ErrLostOwnership) {
				r.stop(ErrLostOwnership)
			} else if errors.Is(err, errPublishRefused) {
				r.logger().Error().Err(err).Msg("an event of the run was refused by NATS")
				r.stop(err)
			}
		})
	}()
}

func (r *run) stopRelay() {
	r.rel.close()
	<-r.relayDone
}

// drive runs the upstream reader and decides how the run ends. The reader
// runs on this goroutine; an interruption (a cancel, a shutdown, lost
// ownership, a refused publish: r.ctx ends) is handled on a goroutine
// started only when it happens, while the reader goes on. A run streaming
// undisturbed holds one goroutine here, not two.
func (r *run) drive(req events.RunRequest, pos position) {
	upCtx, upStopCause := context.WithCancelCause(r.hard)
	upStop := func() { upStopCause(nil) }
	defer upStop()
	r.upStop = upStopCause
	readerDone := make(chan outcome, 1)
	if r.ctx.Err() != nil {
		// Stopped before it reached Foundry this time (a cancel on record
		// for a response a previous owner started): nothing to read.
		if id := r.lastState().ResponseID; id != "" {
			r.setResponseID(id, time.Now())
			// Announced as a re-attach is: the publish fences out a
			// previous owner that may still be storing events.
			r.rel.add(events.RunEvent{Type: events.TypeRunStarted, ResponseID: id, Attempt: r.owner.attempt, Worker: r.w.cfg.WorkerID}, -1)
		}
		readerDone <- outcome{noResponse: r.currentResponseID() == "", upstreamSeq: -1}
		r.interrupt(readerDone, upStop)
		return
	}
	interrupted := make(chan struct{})
	stopWatch := context.AfterFunc(r.ctx, func() {
		defer close(interrupted)
		select {
		case out := <-readerDone: // the reader ended first after all
			r.conclude(out)
		default:
			r.interrupt(readerDone, upStop)
		}
	})
	out := r.read(upCtx, req, pos)
	if r.queued != nil {
		r.queued.Stop()
	}
	if stopWatch() {
		r.conclude(out)
		return
	}
	readerDone <- out
	<-interrupted
}

// interrupt ends a run whose context ended while its reader runs, as the
// cause says; readerDone delivers the reader's outcome once it stops.
func (r *run) interrupt(readerDone <-chan outcome, upStop context.CancelFunc) {
	switch cause := context.Cause(r.ctx); {
	case errors.Is(cause, ErrLostOwnership):
		upStop()
		r.lostOwnership(<-readerDone)
	case errors.Is(cause, ErrShutdown):
		r.handoff(readerDone, upStop)
	case errors.Is(cause, errPublishRefused):
		upStop()
		<-readerDone
		r.failAttempt(cause, "publish", false)
	case errors.Is(cause, errStoreFull):
		upStop()
		<-readerDone
		r.failStopped(events.CodeStoreFull, fmt.Sprintf("JetStream refused the run's events, its store full, for %s: "+
			"the response was cancelled upstream so that no output nobody can receive is billed", r.w.cfg.StoreFullTimeout))
	default:
		r.cancel(reasonOf(cause), readerDone, upStop)
	}
}

// conclude ends a run whose reader stopped on its own.
func (r *run) conclude(out outcome) {
	switch {
	case out.terminal != nil:
		r.end(endWith(*out.terminal, out.upstreamSeq, out.upstreamStatus))
	case out.cancelledUpstream != nil:
		reason, ok := r.cancelReason()
		if !ok {
			reason = events.ReasonRequested
			r.logger().Warn().Msg("Foundry reports the response cancelled, not by this run's cancel subject")
		}
		r.finishCancelled(reason, stopped{how: reachFinal, resp: out.cancelledUpstream})
	case out.lostOwnership:
		r.lostOwnership(out)
	case out.lost:
		r.endLost(out.err)
	case out.invalid:
		r.failInvalid(out.err)
	case errors.Is(out.err, errUpstreamStalled):
		r.failStopped(events.CodeUpstreamStalled, out.err.Error())
	case errors.Is(out.err, errUpstreamQueued):
		r.failStopped(events.CodeUpstreamQueued, out.err.Error())
	default:
		r.failUpstream(out)
	}
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
