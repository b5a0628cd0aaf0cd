package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
)

// run is one job owned by this worker, from the moment it was pulled until
// its terminal event is stored and the job acked (or it is handed off).
type run struct {
	w       *Worker
	msg     jetstream.Msg
	id      string
	attempt int
	log     zerolog.Logger

	// ctx ends when something asks the run to stop; its cause says what
	// (ErrCancelRequested, ErrRunTimeout, ErrAbandoned, ErrShutdown,
	// ErrLostOwnership). Stopping is a decision the run makes, not an abort.
	ctx  context.Context
	stop context.CancelCauseFunc
	// hard bounds every NATS and Foundry call of the run; it ends only when
	// the run is aborted (shutdown timeout) or done.
	hard  context.Context
	abort context.CancelFunc

	rel *relay

	mu         sync.Mutex
	responseID string
	idReady    chan struct{} // closed once the Foundry response id is known and saved
}

func (w *Worker) newRun(msg jetstream.Msg, runID string, attempt int) *run {
	ctx, stop := context.WithCancelCause(context.Background())
	hard, abort := context.WithCancel(context.Background())
	return &run{
		w:       w,
		msg:     msg,
		id:      runID,
		attempt: attempt,
		log:     w.log.With().Str("run_id", runID).Int("attempt", attempt).Logger(),
		ctx:     ctx,
		stop:    stop,
		hard:    hard,
		abort:   abort,
		idReady: make(chan struct{}),
	}
}

// handle owns one job until it ends.
func (w *Worker) handle(msg jetstream.Msg) {
	attempt := 1
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
	}
	runID, ok := w.names.RunIDFromSubject(msg.Subject())
	if !ok {
		w.log.Warn().Str("subject", msg.Subject()).Msg("job on a subject that names no valid run id; dead-lettered")
		w.deadLetter(context.Background(), msg, "", "invalid_request", "subject "+msg.Subject()+" does not name a valid run id")
		_ = msg.TermWithReason("invalid run id")
		return
	}
	r := w.newRun(msg, runID, attempt)
	defer r.abort()
	defer r.stop(nil)
	if !w.register(r) {
		r.log.Warn().Msg("job delivered again while this worker still owns the run; ignoring the new delivery")
		return
	}
	defer w.unregister(r)
	r.execute()
}

func (r *run) execute() {
	w := r.w
	pos, err := w.tail(r.hard, r.id)
	if err != nil {
		r.log.Error().Err(err).Msg("read the run's last event; retrying later")
		r.retryLater()
		return
	}
	if pos.Type.Terminal() {
		// The terminal event is stored but the job was not acked (a crash
		// between the two). Finish the bookkeeping.
		r.log.Info().Str("terminal", string(pos.Type)).Msg("run already ended; acking")
		r.markFinished(pos.Type, "")
		r.ack()
		return
	}

	req, decodeErr := events.DecodeRunMsg(r.msg.Subject(), r.msg.Data(), w.names)

	st, err := r.claim()
	if errors.Is(err, errFinished) {
		r.log.Info().Msg("run already finished; acking the resubmitted job")
		r.ack()
		return
	}
	if err != nil {
		r.log.Error().Err(err).Msg("claim the run in the state bucket; retrying later")
		r.retryLater()
		return
	}

	r.rel = newRelay(w.pub, w.res.Events, w.names, r.id, pos, w.cfg.EventInterval, w.m)
	var relWG sync.WaitGroup
	relWG.Add(1)
	go func() {
		defer relWG.Done()
		r.rel.run(r.hard, func(err error) {
			if errors.Is(err, ErrLostOwnership) {
				r.stop(ErrLostOwnership)
			}
		})
	}()
	defer func() {
		r.rel.close()
		relWG.Wait()
	}()

	if decodeErr != nil {
		r.failInvalid(decodeErr)
		return
	}
	if st.Cancel != nil && st.ResponseID == "" {
		r.log.Info().Str("reason", st.Cancel.Reason).Msg("cancel recorded before the run started; Foundry is not called")
		r.finishCancelled(st.Cancel.Reason, nil, false)
		return
	}
	if st.Cancel != nil {
		r.stop(causeOf(st.Cancel.Reason))
	}

	timers := r.armTimers(req, st)
	defer timers.stop()
	r.drive(req, st, pos)
}

// drive runs the upstream reader and decides how the run ends.
func (r *run) drive(req events.RunRequest, st events.RunState, pos position) {
	upCtx, upStop := context.WithCancel(r.hard)
	defer upStop()
	readerDone := make(chan outcome, 1)
	go func() { readerDone <- r.read(upCtx, req, st, pos) }()

	var out outcome
	var ended bool
	select {
	case out = <-readerDone:
		ended = true
	case <-r.ctx.Done():
		select {
		case out = <-readerDone:
			ended = true
		default:
		}
	}
	if ended {
		r.conclude(out)
		return
	}
	switch cause := context.Cause(r.ctx); {
	case errors.Is(cause, ErrLostOwnership):
		upStop()
		<-readerDone
		r.w.m.lostOwnership.Inc()
		r.log.Warn().Msg("another worker owns the run now; stopping without ack")
	case errors.Is(cause, ErrShutdown):
		r.handoff(readerDone, upStop)
	default:
		r.cancel(reasonOf(cause), readerDone, upStop)
	}
}

// conclude ends a run whose reader stopped on its own.
func (r *run) conclude(out outcome) {
	switch {
	case out.terminal != nil:
		r.finish(*out.terminal, out.upstreamSeq, out.upstreamStatus)
	case out.cancelledUpstream != nil:
		r.log.Warn().Msg("Foundry reports the response cancelled, not by this run's cancel subject")
		r.finishCancelled(events.ReasonRequested, out.cancelledUpstream, true)
	default:
		r.failUpstream(out)
	}
}

// failUpstream ends or retries a run whose upstream work failed.
func (r *run) failUpstream(out outcome) {
	r.w.m.upstreamErrors.WithLabelValues(out.op).Inc()
	retryable := retryable(out.err)
	if retryable && r.attempt < r.w.maxDeliver {
		r.log.Warn().Err(out.err).Str("op", out.op).Msg("upstream error; the job will be retried")
		if err := r.rel.flush(r.hard); err != nil {
			return
		}
		_ = r.msg.NakWithDelay(r.w.cfg.RetryDelay * time.Duration(r.attempt))
		return
	}
	r.log.Error().Err(out.err).Str("op", out.op).Msg("upstream error; the run fails")
	if id := r.currentResponseID(); id != "" {
		// Nobody will follow this response any more: stop it so it does not
		// run on, billed and unread.
		ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
		if _, err := r.w.up.Cancel(ctx, id); err != nil {
			r.log.Warn().Err(err).Msg("cancel the abandoned upstream response")
		}
		cancel()
	}
	ev := events.RunEvent{Type: events.TypeRunFailed, Error: &events.Error{Code: "upstream_error", Message: out.err.Error()}}
	if out.responseMissing {
		r.w.deadLetter(r.hard, r.msg, r.id, "upstream_error", out.err.Error())
	}
	r.finish(ev, -1, "")
}

// failInvalid ends a run whose request can never run.
func (r *run) failInvalid(err error) {
	r.log.Warn().Err(err).Msg("invalid run request; dead-lettered")
	r.w.deadLetter(r.hard, r.msg, r.id, "invalid_request", err.Error())
	ev := events.RunEvent{Type: events.TypeRunFailed, Error: &events.Error{Code: "invalid_request", Message: err.Error()}}
	r.rel.add(ev, -1)
	if err := r.rel.flush(r.hard); err != nil {
		r.log.Error().Err(err).Msg("store run.failed")
		return
	}
	r.markFinished(events.TypeRunFailed, "")
	_ = r.msg.TermWithReason("invalid request")
	r.w.m.runsFinished.WithLabelValues(string(events.TypeRunFailed)).Inc()
}

// handoff stops a run at shutdown so another worker re-attaches at once.
func (r *run) handoff(readerDone <-chan outcome, upStop context.CancelFunc) {
	// A create in flight must yield its response id first: the next owner
	// re-attaches to it instead of starting a second, billed response.
	if r.currentResponseID() == "" {
		select {
		case <-r.idReady:
		case out := <-readerDone:
			if out.terminal != nil || out.cancelledUpstream != nil {
				r.conclude(out)
				return
			}
			r.handedOff()
			return
		case <-r.hard.Done():
		}
	}
	upStop()
	out := <-readerDone
	if out.terminal != nil {
		r.conclude(out)
		return
	}
	r.handedOff()
}

func (r *run) handedOff() {
	if err := r.rel.flush(r.hard); err != nil {
		r.log.Warn().Err(err).Msg("flush events before hand-off")
	}
	if err := r.msg.Nak(); err != nil {
		r.log.Warn().Err(err).Msg("nak for hand-off")
	}
	r.w.m.handoffs.Inc()
	r.log.Info().Msg("run handed off")
}

// finish stores the terminal event, records the end in the state bucket and
// acks the job.
func (r *run) finish(ev events.RunEvent, upstreamSeq int64, upstreamStatus string) {
	r.rel.add(ev, upstreamSeq)
	if err := r.rel.flush(r.hard); err != nil {
		r.log.Error().Err(err).Str("type", string(ev.Type)).Msg("store the terminal event; the job will be redelivered")
		return
	}
	r.markFinished(ev.Type, upstreamStatus)
	r.ack()
	r.w.m.runsFinished.WithLabelValues(string(ev.Type)).Inc()
	r.log.Info().Str("type", string(ev.Type)).Msg("run ended")
}

// markFinished records the terminal state. The event stream is the source of
// truth; a failure here is logged and repaired by the next delivery.
func (r *run) markFinished(t events.EventType, upstreamStatus string) {
	now := time.Now().UTC()
	_, err := r.w.states.Upsert(r.hard, r.id, func(s *events.RunState, exists bool) error {
		if !exists {
			s.Owner, s.Attempt = r.w.cfg.WorkerID, r.attempt
		}
		s.Status = statusOf(t)
		s.Terminal = t
		if upstreamStatus != "" {
			s.UpstreamStatus = upstreamStatus
		}
		s.FinishedAt = &now
		return nil
	})
	if err != nil {
		r.log.Error().Err(err).Msg("record the run's end in the state bucket")
	}
}

func (r *run) ack() {
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	defer cancel()
	if err := r.msg.DoubleAck(ctx); err != nil {
		r.log.Warn().Err(err).Msg("ack the job")
	}
}

// retryLater gives the job back for a later attempt.
func (r *run) retryLater() {
	_ = r.msg.NakWithDelay(r.w.cfg.RetryDelay)
}

var errFinished = errors.New("run already finished")

// claim records this worker as the run's owner.
func (r *run) claim() (events.RunState, error) {
	now := time.Now().UTC()
	return r.w.states.Upsert(r.hard, r.id, func(s *events.RunState, _ bool) error {
		if s.Finished() {
			return errFinished
		}
		s.Status = events.StatusRunning
		s.Owner = r.w.cfg.WorkerID
		s.Attempt = r.attempt
		if s.StartedAt == nil {
			s.StartedAt = &now
		}
		return nil
	})
}

// saveResponseID makes the Foundry response id known: at once to this run
// (a cancel waiting for it goes ahead), then durably in the state bucket
// before anything else is relayed, so that a new owner or another worker
// answering a cancel can reach the response.
func (r *run) saveResponseID(id string) {
	r.mu.Lock()
	r.responseID = id
	r.mu.Unlock()
	close(r.idReady)
	_, err := r.w.states.Update(r.hard, r.id, func(s *events.RunState) error {
		s.ResponseID = id
		return nil
	})
	if err != nil {
		r.log.Error().Err(err).Str("response_id", id).Msg("save the response id in the state bucket")
	}
}

func (r *run) currentResponseID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.responseID
}

// runTimers are the deadline and the watcher-heartbeat timer of a run.
type runTimers struct {
	deadline *time.Timer
	beat     *time.Timer
	sub      *nats.Subscription
}

func (t runTimers) stop() {
	if t.deadline != nil {
		t.deadline.Stop()
	}
	if t.beat != nil {
		t.beat.Stop()
	}
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
}

// armTimers starts the run deadline (counted from the run's first start, so
// a new owner does not extend it) and, with cancel_on_disconnect_seconds, the
// watcher-heartbeat timer.
func (r *run) armTimers(req events.RunRequest, st events.RunState) runTimers {
	var t runTimers
	timeout := r.w.cfg.DefaultTimeout
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	if timeout > 0 {
		start := time.Now()
		if st.StartedAt != nil {
			start = *st.StartedAt
		}
		t.deadline = time.AfterFunc(time.Until(start.Add(timeout)), func() { r.stop(ErrRunTimeout) })
	}
	if req.CancelOnDisconnectSeconds > 0 {
		d := time.Duration(req.CancelOnDisconnectSeconds) * time.Second
		beat := time.AfterFunc(d, func() { r.stop(ErrAbandoned) })
		t.beat = beat
		sub, err := r.w.nc.Subscribe(r.w.names.WatchSubject(r.id), func(*nats.Msg) { beat.Reset(d) })
		if err != nil {
			r.log.Warn().Err(err).Msg("subscribe to watcher heartbeats")
		}
		t.sub = sub
	}
	return t
}

func statusOf(t events.EventType) events.RunStatus {
	switch t {
	case events.TypeRunCompleted:
		return events.StatusCompleted
	case events.TypeRunCancelled:
		return events.StatusCancelled
	default:
		return events.StatusFailed
	}
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
