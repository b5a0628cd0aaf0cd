package consumer

// A run's life, top to bottom: handle takes a job, execute claims the run
// and decides whether it goes upstream, drive reads Foundry (read.go) while
// watching for an interruption, interrupt stops the run for its cause
// (cancel.go for a cancel, deadline or abandonment; endings.go for a
// hand-off or a lost ownership), endAfterRead decides how a reader's
// outcome ends the run, and end makes the run leave the worker: its end
// recorded, its terminal event published, its job settled.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// handle owns one job until it ends. Its frame stays small: the run's
// goroutine parks under it while the run streams (read).
func (w *Worker) handle(msg jetstream.Msg) {
	r, lane, valid := w.jobRun(msg)
	defer r.span.End()
	defer r.abort()
	defer r.stop(nil)
	if !w.admit(r, valid) {
		return
	}
	defer w.unregister(r)
	owned := w.m.keyRunsActive.WithLabelValues(lane...)
	owned.Inc()
	defer owned.Dec()
	if w.isStopping() {
		// Fetched in the last poll before shutdown: give it back at once.
		r.logger().Info().Msg("job arrived during shutdown; handed back")
		r.end(retryAfter(0))
		return
	}
	r.execute()
}

// jobRun makes the run of a job, and names its lane; valid is false when
// the job's subject names no valid run id.
func (w *Worker) jobRun(msg jetstream.Msg) (r *run, lane []string, valid bool) {
	lane = w.laneLabels(w.jobLane(msg))
	attempt := 1
	var submitted time.Time
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
		submitted = meta.Timestamp
		if attempt == 1 {
			w.m.queueSeconds.WithLabelValues(lane...).Observe(max(time.Since(submitted).Seconds(), 0))
		}
	}
	runID, valid := w.names.RunIDFromSubject(msg.Subject())
	return w.newRun(msg, runID, attempt, submitted), lane, valid
}

// admit registers the run as this worker's; false when the job names no
// valid run (valid) or the worker already runs the run, and the job is
// settled.
func (w *Worker) admit(r *run, valid bool) bool {
	if !valid {
		r.logger().Warn().Str("subject", r.msg.Subject()).Msg("job on a subject that names no valid run id; dead-lettered")
		r.end(ending{dead: &deadNote{events.CodeInvalidRequest, "subject " + r.msg.Subject() + " does not name a valid run id"},
			job: term, reason: "invalid run id"})
		return false
	}
	other, ok := w.register(r)
	if ok {
		return true
	}
	if sameJob(other.msg, r.msg) {
		// The lease of our delivery lapsed while we still run it;
		// the server gives the job out again. Ignore this delivery:
		// our run goes on and renews the lease.
		r.logger().Warn().Msg("job delivered again while this worker still owns the run; ignoring the new delivery")
		return false
	}
	// A new job for the run id (a resubmit) while this worker is
	// still finishing the run it acked a moment ago: give it back for
	// a moment, to be judged against the run's state once ours is
	// gone. Ignoring it would hold it for a whole ack wait.
	r.logger().Info().Msg("new job for a run this worker is still finishing; retried shortly")
	r.end(retryAfter(w.cfg.RetryDelay))
	return false
}

// jobLane is the lane of a job: named by its subject in the queue, or,
// for a job taken first in, first out (FIFO), read from its request.
func (w *Worker) jobLane(msg jetstream.Msg) events.Fairness {
	if j, ok := msg.(laneJob); ok {
		if f, _, ok := w.names.LaneOfSubject(j.Msg.Subject()); ok {
			return f
		}
	}
	return w.laneOf(msg)
}

// execute runs the job's run: take, then drive. Its frame stays small:
// the run's goroutine parks under it while the run streams (read).
func (r *run) execute() {
	pos, got := r.take()
	if got >= holdsLimits {
		defer r.releaseLimits()
		defer r.countKeyTokens()
	}
	if got >= relaying {
		defer r.stopRelay()
	}
	if got < streaming {
		return
	}
	timers := r.armTimers()
	defer timers.stop()
	r.drive(pos)
}

// stage is how far take got, and so what execute releases at the end.
type stage int

const (
	notTaken    stage = iota // the run ended, or waits for a fleet-wide limit: nothing held
	holdsLimits              // the run holds its limits and ended
	relaying                 // and its relay runs
	streaming                // and it goes on upstream (drive)
)

// take claims the run in its record and starts its relay, or ends the run
// when it cannot or need not go on upstream; pos is its subject's tail.
func (r *run) take() (pos position, got stage) {
	w := r.w
	pos, err := w.tail(r.hard, r.id)
	if err != nil {
		r.endRetryLater("read the run's last event", err)
		return pos, notTaken
	}
	req, decodeErr := events.DecodeRunMsg(r.msg.Subject(), r.msg.Data(), w.names)
	digest := rawDigest(r.msg.Data())
	var fair events.Fairness
	if decodeErr == nil {
		digest = req.Digest()
		fair, decodeErr = events.FairnessOf(req, r.msg.Headers())
	}
	if decodeErr != nil {
		var handedBack bool
		if handedBack, decodeErr = r.handBackNewer(decodeErr); handedBack {
			return pos, notTaken
		}
	}

	r.req = req
	answered := r.stepAnswered()
	if decodeErr == nil && r.gate(req, digest, fair, answered) {
		return pos, notTaken // waits for a fleet-wide limit (caps.go)
	}
	st, err := r.claim(digest, fair, w.runTimeout(req), answered)
	switch {
	case errors.Is(err, errStillWaiting) && r.wakesStep(st) && r.owner.attempt < wakeLooks:
		// The waker read every answer; this read did not (a replica
		// behind, a read that failed). Dropped, the wake would not be
		// queued again: a second one within the dedupe window is not.
		r.logger().Info().Msg("the run's answers are not all readable yet; its wake looks again")
		r.end(ending{repair: &recorded{st: st, pos: pos, paused: true}, job: nak, delay: time.Duration(r.owner.attempt) * time.Second})
		return pos, holdsLimits
	case errors.Is(err, errStillWaiting):
		r.logger().Info().Msg("the run waits for answers; its job is done until they are in")
		r.end(ending{repair: &recorded{st: st, pos: pos, paused: true}, job: ack})
		r.w.wakeIfAnswered(r.hard, r.id)
		return pos, holdsLimits
	case errors.Is(err, errFinished):
		r.logger().Info().Str("status", string(st.Status)).Msg("run already finished; acking the job")
		r.end(ending{repair: &recorded{st: st, pos: pos}, job: ack})
		return pos, holdsLimits
	case errors.Is(err, errReused):
		r.endReused(st)
		return pos, holdsLimits
	case errors.Is(err, errNewerSchema):
		r.logger().Warn().Err(err).Msg("the run's state was written by a newer worker; leaving the run to it")
		r.end(retryAfter(10 * time.Second))
		return pos, holdsLimits
	case errors.Is(err, events.ErrStateCorrupt):
		r.startRelay(pos)
		r.endCorrupt(err)
		return pos, holdsLimits
	case err != nil:
		r.endRetryLater("claim the run in the state bucket", err)
		return pos, holdsLimits
	}

	r.startRelay(pos)
	note := r.logger().Info().Int("failures", st.Failures)
	if !r.submitted.IsZero() {
		note = note.Dur("since_submit", r.taken.Sub(r.submitted))
	}
	note.Msg("run taken")

	switch {
	case decodeErr != nil:
		r.endInvalid(decodeErr)
		return pos, relaying
	case budgetSpent(st, w.maxFailures()):
		r.endBudgetSpent()
		return pos, relaying
	}
	if cancel := r.pendingCancel(st); cancel != nil {
		if st.ResponseID == "" && st.CreateStartedAt == nil {
			// Before the run's first response, or between two steps (the
			// last response has ended): nothing runs upstream.
			r.logger().Info().Str("reason", cancel.Reason).Int("steps", len(st.Steps)).
				Msg("cancel recorded before the run's next response was created; Foundry is not called")
			r.endCancelled(cancel.Reason, stopped{how: reachNone})
			return pos, relaying
		}
		r.stop(causeOf(cancel.Reason))
	}
	if st.ResponseID == "" && st.CreateStartedAt != nil && !r.findResponse(pos) {
		return pos, relaying
	}
	return pos, streaming
}

// handBackNewer gives back the job of a request whose only fault is
// fields this worker does not know (a newer worker's, in a rolling
// upgrade), before the run is claimed, for up to NewerFieldsGrace after
// its submit; it reports whether it did. Past the grace, the error it
// returns says so and the run fails as invalid.
func (r *run) handBackNewer(decodeErr error) (bool, error) {
	if !errors.Is(decodeErr, events.ErrUnknownField) {
		return false, decodeErr
	}
	fields := events.NewerFields(r.msg.Subject(), r.msg.Data(), r.w.names)
	if fields == nil {
		return false, decodeErr
	}
	grace := r.w.cfg.NewerFieldsGrace
	if grace < 0 {
		return false, decodeErr
	}
	if !r.submitted.IsZero() && time.Since(r.submitted) >= grace {
		return false, fmt.Errorf("%w (no worker that knows %s took the request within %s of its submit)",
			decodeErr, strings.Join(fields, ", "), grace)
	}
	r.logger().Warn().Strs("fields", fields).Dur("retry_in", r.w.cfg.NewerFieldsRetry).
		Msg("the request has fields this worker does not know; handed back for a newer worker")
	r.end(retryAfter(r.w.cfg.NewerFieldsRetry))
	return true, nil
}

// drive runs the upstream reader and decides how the run ends. The reader
// runs on this goroutine; an interruption (a cancel, a shutdown, lost
// ownership, a refused publish: r.ctx ends) is handled on a goroutine
// started only when it happens, while the reader goes on. A run streaming
// undisturbed holds one goroutine here, not two.
//
// Its frame stays small: the run's goroutine parks under it while the run
// streams (read).
func (r *run) drive(pos position) {
	upCtx, upStopCause := context.WithCancelCause(r.hard)
	upStop := func() { upStopCause(nil) }
	defer upStop()
	r.upStop = upStopCause
	readerDone := make(chan outcome, 1)
	if r.ctx.Err() != nil {
		r.stoppedBeforeRead(readerDone, upStop)
		return
	}
	interrupted := make(chan struct{})
	stopWatch := context.AfterFunc(r.ctx, func() {
		defer close(interrupted)
		if h := r.w.cfg.stopWatchHook; h != nil {
			h(readerDone)
		}
		select {
		case out := <-readerDone:
			if out.ended() { // the reader ended first after all
				r.endAfterRead(out)
				return
			}
			// Cut short by the stop itself (a wait on r.ctx in the
			// reader saw it first): the stop decides. Taken for the
			// reader's end, a deadline was once counted as a failed
			// attempt, and the response ran on uncancelled.
			readerDone <- out
		default:
		}
		r.interrupt(readerDone, upStop)
	})
	out := r.read(upCtx, pos)
	if r.queued != nil {
		r.queued.Stop()
	}
	if stopWatch() {
		if r.ctx.Err() == nil {
			r.endAfterRead(out)
			return
		}
		// The run was stopped as the reader ended, before the watch
		// fired (a context reports Err before its AfterFuncs start): the
		// stop decides, as if the watch had fired. Taken for an upstream
		// error, a deadline once counted as a failed attempt, delivery
		// after delivery, until the run ended attempts_exhausted.
		readerDone <- out
		r.interrupt(readerDone, upStop)
		return
	}
	readerDone <- out
	<-interrupted
}

// stoppedBeforeRead ends a run stopped before it reached Foundry this time
// (a cancel on record for a response a previous owner started): nothing
// is read.
func (r *run) stoppedBeforeRead(readerDone chan outcome, upStop context.CancelFunc) {
	if id := r.lastState().ResponseID; id != "" {
		r.reattached(id, time.Now())
	}
	readerDone <- outcome{noResponse: r.currentResponseID() == "", upstreamSeq: -1}
	r.interrupt(readerDone, upStop)
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
		r.endAttempt(cause, "publish", false)
	case errors.Is(cause, errStoreFull):
		upStop()
		<-readerDone
		r.endGivenUp(events.CodeStoreFull, fmt.Sprintf("JetStream refused the run's events, its store full, for %s: "+
			"the response was cancelled upstream so that no output nobody can receive is billed", r.w.cfg.StoreFullTimeout))
	default:
		r.cancel(reasonOf(cause), readerDone, upStop)
	}
}

// endAfterRead ends a run whose reader stopped on its own.
func (r *run) endAfterRead(out outcome) {
	switch {
	case out.terminal != nil && out.terminal.Type == events.TypeInputRequired:
		r.pause(*out.terminal, out.upstreamSeq, r.req)
	case out.terminal != nil:
		r.end(endWith(*out.terminal, out.upstreamSeq, out.upstreamStatus))
	case out.cancelledUpstream != nil:
		reason, ok := r.cancelReason()
		if !ok {
			reason = events.ReasonRequested
			r.logger().Warn().Msg("Foundry reports the response cancelled, not by this run's cancel subject")
		}
		r.endCancelled(reason, stopped{how: reachFinal, resp: out.cancelledUpstream})
	case out.lostOwnership:
		r.lostOwnership(out)
	case out.lost:
		r.endLost(out.err)
	case out.invalid:
		r.endInvalid(out.err)
	case errors.Is(out.err, errUpstreamStalled):
		r.endGivenUp(events.CodeUpstreamStalled, out.err.Error())
	case errors.Is(out.err, errUpstreamQueued):
		r.endGivenUp(events.CodeUpstreamQueued, out.err.Error())
	default:
		r.endUpstreamError(out)
	}
}

// How a run leaves this worker. Every path builds one ending and hands it
// to end, which copies the request to the dead letters if asked, repairs
// what a previous owner recorded but did not publish, records the run's end
// and publishes its terminal event, gives the run back in its record, and
// settles the job: settle is the only place that acks, naks or terms a job.
// A run whose job no worker holds ends through endJobless (endings.go).

// settlement is what becomes of the job.
type settlement int

const (
	leave settlement = iota // nothing: another worker owns the run now, or the run was aborted; the lease lapses
	ack                     // done: its terminal event is stored (or it was stored before)
	nak                     // deliver it again, after ending.delay
	term                    // never deliver it again (ending.reason)
)

// ending is one way a run leaves this worker.
type ending struct {
	// dead, when set, copies the request to the dead-letter stream first.
	dead *deadNote
	// repair, when set, publishes what the run's record holds and its
	// events lack: the terminal event of a run that ended, input.required
	// of a run that waits.
	repair *recorded
	// event, when set, is the run's terminal event: every queued event is
	// stored, the end is recorded in the state bucket (finishRun, or
	// record), then the event is stored with the seq the record names, and
	// only then is the job settled. A failure between two steps leaves the
	// job, and its next delivery repairs the run (repairEnd).
	event          *events.RunEvent
	upstreamSeq    int64  // the Foundry sequence number the event came from, -1 if none
	upstreamStatus string // Foundry's last word, for the record
	// record writes the end into the state bucket instead of finishRun
	// (a record that cannot be read is replaced).
	record func(end events.RunEvent) error
	// flush stores the queued events before the job is given back.
	flush bool
	// release gives the run back in its record (releaseRun), with failure
	// saying why the attempt failed ("" for a hand-off).
	release bool
	failure string
	// handoff: at shutdown; a cancel being taken upstream
	// (cancelAtHandOff) ends before the job is given back.
	handoff bool
	job     settlement
	delay   time.Duration // with nak
	reason  string        // with term
}

// end makes the run leave this worker as e says.
func (r *run) end(e ending) {
	if e.dead != nil {
		r.w.deadLetter(r.hard, r.msg, r.id, e.dead.code, e.dead.message)
	}
	if e.repair != nil {
		r.repair(*e.repair)
	}
	if e.event != nil {
		ev, ok := r.storeEnd(e)
		if !ok {
			return
		}
		r.settle(e)
		r.w.m.runEnded(ev, r.submitted)
		r.logEnd(ev, e.upstreamStatus)
		return
	}
	if e.flush {
		if err := r.rel.flush(r.hard); err != nil {
			r.logger().Warn().Err(err).Msg("store the run's events before giving it back")
		}
	}
	if e.release {
		r.release(e.failure, e.delay)
	}
	if e.handoff {
		r.mu.Lock()
		r.handedOff = true
		r.mu.Unlock()
		r.handOffCancel.Wait()
	}
	r.settle(e)
}

// storeEnd stores the queued events, records the end, then stores the
// terminal event; it reports whether all three landed.
func (r *run) storeEnd(e ending) (events.RunEvent, bool) {
	ev := *e.event
	if err := r.rel.flush(r.hard); err != nil {
		if errors.Is(err, ErrLostOwnership) {
			r.countLost()
		}
		r.logger().Error().Err(err).Msg("store the run's events before its end; the job will be delivered again")
		return ev, false
	}
	ev.RunID = r.id
	ev.Seq = r.rel.nextSeq()
	ev.Time = time.Now().UTC()
	ev.Usage = withSteps(r.lastState().Steps, ev.Usage)
	record := e.record
	if record == nil {
		record = func(end events.RunEvent) error {
			_, err := r.persist("record the run's end", func(s *events.RunState, _ bool) error {
				return finishRun(s, r.owner, end, e.upstreamStatus, end.Time)
			})
			return err
		}
	}
	if err := record(ev); err != nil {
		if isDecision(err) {
			if errors.Is(err, errNotOwner) {
				r.countLost()
			}
			r.logger().Warn().Err(err).Str("type", string(ev.Type)).Msg("the run's record refuses this end; stopping without ack")
		} else {
			r.logger().Error().Err(err).Msg("record the run's end; the job will be delivered again")
		}
		return ev, false
	}
	r.rel.add(ev, e.upstreamSeq)
	if err := r.rel.flush(r.hard); err != nil {
		if errors.Is(err, ErrLostOwnership) {
			r.countLost()
		}
		r.logger().Error().Err(err).Str("type", string(ev.Type)).Msg("store the terminal event; the next delivery publishes it from the state record")
		return ev, false
	}
	return ev, true
}

// settle acks, naks or terms the job, as e says: the one place that does.
func (r *run) settle(e ending) {
	var err error
	switch e.job {
	case ack:
		ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
		err = r.msg.DoubleAck(ctx)
		cancel()
	case nak:
		err = r.msg.NakWithDelay(e.delay)
	case term:
		err = r.msg.TermWithReason(e.reason)
	case leave:
		return
	}
	if err != nil {
		r.logger().Warn().Err(err).Int("settlement", int(e.job)).Msg("settle the job")
	}
}
