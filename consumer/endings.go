package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// Ways a run ends: each builds an ending for end (run.go).

// deadNote is what a dead letter says.
type deadNote struct{ code, message string }

// endWith is the ending of a run whose terminal event is ev.
func endWith(ev events.RunEvent, upstreamSeq int64, upstreamStatus string) ending {
	return ending{event: &ev, upstreamSeq: upstreamSeq, upstreamStatus: upstreamStatus, job: ack}
}

// retryAfter gives the job back for another delivery after delay.
func retryAfter(delay time.Duration) ending { return ending{job: nak, delay: delay} }

// logEnd logs the run's end at info, with what an operator asks first (how
// it ended, how long it took, what it cost), and records it on the span.
func (r *run) logEnd(ev events.RunEvent, upstreamStatus string) {
	l := r.logger().Info().Str("type", string(ev.Type)).Dur("took", ev.Time.Sub(r.taken))
	if !r.submitted.IsZero() {
		l = l.Dur("since_submit", ev.Time.Sub(r.submitted))
	}
	if ev.Status != "" {
		l = l.Str("status", ev.Status)
	}
	if ev.Reason != "" {
		l = l.Str("reason", ev.Reason)
	}
	if upstreamStatus != "" {
		l = l.Str("upstream_status", upstreamStatus)
	}
	if ev.Error != nil {
		l = l.Str("code", ev.Error.Code)
		if ev.Error.RequestID != "" {
			l = l.Str("request_id", ev.Error.RequestID)
		}
	}
	if u := ev.Usage; u != nil {
		l = l.Int64("input_tokens", u.InputTokens).Int64("output_tokens", u.OutputTokens)
	}
	l.Msg("run ended")
	r.span.SetAttributes(attribute.String("foundryq.outcome", string(ev.Type)))
	if ev.Error != nil {
		r.span.SetStatus(codes.Error, ev.Error.Code)
	}
}

// Ends without the job. Two ways end a run whose job no worker holds, so
// that there is no job to settle:
//
//   - a run no worker has taken, cancelled (cancelNotTaken, answer.go): its
//     job waits in the queue, unfetched, and is deleted once the end is
//     recorded and published (a worker that fetches it meanwhile finds the
//     run finished and acks it);
//   - a waiting run past its deadline or its input deadline (endWaiting,
//     ask.go): its job was acked when the run paused.
//
// Both hand one joblessEnding to endJobless, which stores the terminal
// event in the background (publishEndLater) if it cannot now. Every other
// end is a run's ending handed to run.end, which settles the job
// (run.settle, the one place that acks, naks or terms one).
// lifecycle_doc_test.go checks both.

// joblessEnding is the end of a run whose job no worker holds.
type joblessEnding struct {
	runID string
	pos   position // the run's last stored event: the terminal event follows it
	// record writes the end into the run's record (a lifecycle
	// transition whose End is the terminal event); its error ends nothing.
	record    func() (events.RunState, error)
	what      string    // the terminal event, for the log if it cannot be published
	submitted time.Time // when the run was submitted, if known
}

// endJobless ends a run whose job no worker holds: the end is recorded,
// then the terminal event the record holds is published and the end
// counted. It returns the record and whether the event was stored, or the
// error of the record's write. An event not stored now (NATS unavailable,
// the store or the run's subject full) is tried again in the background
// until it is, or the worker stops; the caller leaves (or queues) a job
// for the run, whose delivery repairs the end if this worker cannot.
func (w *Worker) endJobless(ctx context.Context, e joblessEnding) (st events.RunState, stored bool, err error) {
	st, err = e.record()
	if err != nil {
		return st, false, err
	}
	log := w.log.With().Str("run_id", e.runID).Logger()
	stored = true
	if err := w.publishEnd(ctx, e.runID, e.pos, *st.End, log); err != nil {
		stored = false
		log.Warn().Err(err).Msg("publish " + e.what + "; tried again")
		w.background(func() { w.publishEndLater(e, *st.End, log) })
	}
	w.m.runEnded(*st.End, e.submitted)
	if st.Usage != nil {
		w.countKeyTokens(st, st.Usage.TotalTokens)
	}
	return st, stored, nil
}

// publishEndLater stores a jobless run's terminal event end (endJobless),
// trying again with backoff until it is stored, another worker stored an
// event on the run's subject since (its own repair: the fence refuses this
// one), or the worker stops.
func (w *Worker) publishEndLater(e joblessEnding, end events.RunEvent, log zerolog.Logger) {
	ctx, cancel := w.untilStopping()
	defer cancel()
	b := retry.Backoff(time.Second, 30*time.Second)
	for retry.Sleep(ctx, b.NextBackOff()) {
		pctx, cancel := context.WithTimeout(ctx, cancelCallTimeout)
		err := w.publishEnd(pctx, e.runID, e.pos, end, log)
		cancel()
		switch {
		case err == nil:
			log.Info().Msg("published " + e.what)
			return
		case errors.Is(err, ErrLostOwnership):
			return
		}
	}
}

// recorded is what a run's record holds and its events may lack: the
// worker that ended or paused the run stopped between the two writes.
type recorded struct {
	st     events.RunState
	pos    position // the run's last stored event
	paused bool     // the run waits (input.required), else it has ended
}

// repair publishes what the record holds and the events lack (run.end
// does, before it settles the job).
func (r *run) repair(rec recorded) {
	if rec.paused {
		r.repairPause(rec.st, rec.pos)
		return
	}
	r.repairEnd(rec.st, rec.pos)
}

// repairEnd publishes the terminal event a finished record names when the
// events subject does not have it yet (the worker that ended the run failed
// between the two writes).
func (r *run) repairEnd(st events.RunState, pos position) {
	switch {
	case pos.Type.Terminal():
		return
	case st.End == nil:
		// Written before records kept their end: the terminal event was
		// stored first.
		return
	case st.End.Seq <= pos.Seq:
		// A zombie owner stored an event after the end was recorded: the
		// end moves behind it, so that the run still ends with its one
		// terminal event.
		moved, err := r.w.states.Update(r.hard, r.id, func(s *events.RunState) error {
			return renumberEnd(s, st.End.Seq, pos.Seq+1)
		})
		if err != nil {
			r.logger().Error().Err(err).Msg("move the recorded end behind the stored events; the job will be delivered again")
			return
		}
		r.logger().Warn().Uint64("end_seq", st.End.Seq).Uint64("stored_seq", pos.Seq).
			Msg("an event was stored after the run's end was recorded; the end follows it")
		st = moved
	case st.End.Seq != pos.Seq+1:
		r.logger().Error().Uint64("end_seq", st.End.Seq).Uint64("stored_seq", pos.Seq).
			Msg("the state record's end does not follow the stored events; not repaired")
		return
	}
	if err := r.w.publishEnd(r.hard, r.id, pos, *st.End, *r.logger()); err != nil {
		r.logger().Error().Err(err).Msg("publish the terminal event from the state record")
		return
	}
	r.logger().Warn().Str("type", string(st.End.Type)).Msg("terminal event was missing; published from the state record")
}

// failUpstream ends or retries a run whose upstream work failed.
func (r *run) endUpstreamError(out outcome) {
	r.w.m.upstreamErrors.WithLabelValues(out.op).Inc()
	switch {
	case out.op == opState:
		// NATS, not Foundry, failed: not the run's fault.
		r.logger().Warn().Err(out.err).Msg("the state bucket could not be written; the job will be retried")
		r.end(ending{release: true, job: nak, delay: r.w.cfg.RetryDelay})
	case out.rateLimited:
		// Not a failed attempt: the service asked to wait (the worker's
		// create limiter holds back the other creates meanwhile).
		delay := retryDelay(out.err, r.w.cfg.RetryDelay)
		r.logger().Info().Dur("retry_in", delay).Msg("create refused for rate limits; the job will be retried")
		r.end(ending{release: true, job: nak, delay: delay})
	case out.streamLost:
		r.logger().Error().Err(out.err).Msg("foreground response lost; the run fails")
		r.endFailed(events.CodeStreamLost, out.err.Error(), true, false)
	case retryable(out.err) && !(out.noResponse && neverSent(out.err)):
		r.endAttempt(out.err, out.op, true)
	default:
		code, message := upstreamFailure(out.err)
		requestID := foundry.RequestIDOf(out.err)
		r.logger().Error().Err(out.err).Str("op", out.op).Str("request_id", requestID).Msg("upstream error; the run fails")
		r.cancelAbandoned()
		e := r.endingFailed(code, message, false, out.noResponse)
		e.event.Error.RequestID = requestID
		r.end(e)
	}
}

// upstreamFailure is the code and message of a run whose upstream call
// failed for good: a prompt Azure's content filter refused is
// content_filter, with the categories that filtered it; an authentication
// failure auth_error; a deployment Azure does not know
// deployment_not_found; a host name that does not resolve
// upstream_unreachable; a certificate that cannot be verified
// upstream_tls_error; anything else upstream_error.
func upstreamFailure(err error) (code, message string) {
	var apiErr *foundry.APIError
	if errors.As(err, &apiErr) {
		inner, cats := "", ""
		if apiErr.Inner != nil {
			inner, cats = apiErr.Inner.Code, foundry.FilterSummary(apiErr.Inner.ContentFilter)
		}
		if contentFiltered(apiErr.Code, inner) {
			if cats != "" {
				return events.CodeContentFilter, apiErr.Message + " (filtered: " + cats + ")"
			}
			return events.CodeContentFilter, apiErr.Message
		}
	}
	switch {
	case errors.Is(err, foundry.ErrAuth):
		return events.CodeAuthError, err.Error()
	case errors.Is(err, foundry.ErrDeploymentNotFound):
		return events.CodeDeploymentNotFound, err.Error()
	case errors.Is(err, foundry.ErrHostNotFound):
		return events.CodeUpstreamUnreachable, "the Foundry endpoint's host name does not resolve; nothing was sent (check --foundry-endpoint): " + err.Error()
	case errors.Is(err, foundry.ErrTLSVerification):
		return events.CodeUpstreamTLS, "the Foundry endpoint's TLS certificate could not be verified; nothing was sent: " + err.Error()
	}
	return events.CodeUpstreamError, err.Error()
}

// failAttempt counts a failed attempt: the job is retried after a delay
// (the one the service asked for, or RetryDelay × failures), unless this
// was the last permitted attempt, which ends the run.
func (r *run) endAttempt(cause error, op string, upstream bool) {
	st := r.lastState()
	why := cause.Error()
	if st.Failures+1 >= r.w.maxFailures() {
		r.logger().Error().Err(cause).Str("op", op).Int("failures", st.Failures+1).Msg("last permitted attempt failed; the run fails")
		r.cancelAbandoned()
		code := events.CodeAttemptsExhausted
		if !upstream {
			code = events.CodeInternal
		}
		r.endFailed(code, fmt.Sprintf("gave up after %d failed attempts; last: %s", st.Failures+1, why), true, true)
		return
	}
	r.logger().Warn().Err(cause).Str("op", op).Int("failures", st.Failures+1).Msg("attempt failed; the job will be retried")
	r.end(ending{flush: true, release: true, failure: why, job: nak, delay: retryDelay(cause, r.w.cfg.RetryDelay*time.Duration(st.Failures+1))})
}

// giveUp ends a run whose failed attempts are used up (workers that
// vanished count too).
func (r *run) endBudgetSpent() {
	st := r.lastState()
	r.logger().Error().Int("failures", st.Failures).Str("last_error", st.LastError).Msg("failed attempts used up; the run fails")
	if st.ResponseID != "" {
		r.setResponseID(st.ResponseID, time.Now())
		r.cancelAbandoned()
	}
	r.endFailed(events.CodeAttemptsExhausted, fmt.Sprintf("gave up after %d failed attempts; last: %s", st.Failures, st.LastError), true, true)
}

// failInvalid ends a run whose request can never run.
func (r *run) endInvalid(err error) {
	r.logger().Warn().Err(err).Msg("invalid run request; dead-lettered")
	e := r.endingFailed(events.CodeInvalidRequest, err.Error(), false, true)
	e.job, e.reason = term, "invalid request"
	r.end(e)
}

// endLost ends a run whose create may have started a response whose id
// never arrived: it must not be created again (a second, billed response),
// and Foundry cannot be searched by metadata, so the run ends. A requested
// cancel ends it as run.cancelled with upstream status "unknown".
func (r *run) endLost(cause error) {
	if reason, ok := r.cancelReason(); ok {
		r.logger().Warn().Err(cause).Msg("cancelled while the response id was unknown; Foundry's status is unknown")
		r.endCancelled(reason, stopped{how: reachUnknown})
		return
	}
	msg := fmt.Sprintf("a response may have been started upstream but its id never arrived; it was not created again. "+
		"Look for the response with metadata.run_id=%s to reconcile", r.id)
	if cause != nil {
		msg += " (" + cause.Error() + ")"
	}
	r.logger().Error().Err(cause).Msg("upstream response lost; the run fails")
	r.endFailed(events.CodeUpstreamLost, msg, false, true)
}

// cancelReason reports whether the run is being cancelled (a cancel on
// record, or a cancel, deadline or abandonment that stopped it), and why.
func (r *run) cancelReason() (string, bool) {
	if c := r.lastState().Cancel; c != nil {
		return c.Reason, true
	}
	cause := context.Cause(r.ctx)
	switch {
	case cause == nil, errors.Is(cause, ErrShutdown), errors.Is(cause, ErrLostOwnership), errors.Is(cause, errPublishRefused):
		return "", false
	}
	return reasonOf(cause), true
}

// endFailed ends the run as run.failed with the worker's own code, saying
// whether a new run of the same request may succeed; with dead, the request
// is copied to the dead-letter stream first.
func (r *run) endFailed(code, message string, retryable, dead bool) {
	r.end(r.endingFailed(code, message, retryable, dead))
}

// failed is the ending of failRun.
func (r *run) endingFailed(code, message string, retryable, dead bool) ending {
	e := endWith(failedWith(r.currentResponseID(), code, retryable, message), -1, "")
	if dead {
		e.dead = &deadNote{code, message}
	}
	return e
}

// refuseReused dead-letters a request under a run id that belongs to a run
// with a different request; nothing is appended to that run's subject.
func (r *run) endReused(st events.RunState) {
	msg := fmt.Sprintf("run id %s already belongs to a run with a different request (status %s); the request was not run", r.id, st.Status)
	r.logger().Warn().Str("status", string(st.Status)).Msg("run id reused by a different request; dead-lettered")
	r.end(ending{dead: &deadNote{events.CodeDuplicateRunID, msg}, job: term, reason: "run id reused"})
}

// failCorrupt ends a run whose state record cannot be read: the record is
// replaced by one that says the run failed, then the terminal event follows.
func (r *run) endCorrupt(cause error) {
	var rev uint64
	if _, got, err := r.w.states.Get(r.hard, r.id); errors.Is(err, events.ErrStateCorrupt) {
		rev = got
	}
	r.logger().Error().Err(cause).Msg("the run's state record is unreadable; the run fails")
	msg := "the run's state record could not be read: " + cause.Error()
	e := endWith(failedWith("", events.CodeStateUnreadable, false, msg), -1, "")
	e.dead = &deadNote{events.CodeStateUnreadable, msg}
	e.record = func(end events.RunEvent) error {
		return r.w.states.Replace(r.hard, failCorrupt(r.id, r.owner, end, end.Time), rev)
	}
	r.end(e)
}

// cancelAbandoned cancels the run's response upstream when nobody will
// follow it any more, so that it does not run on, billed and unread.
func (r *run) cancelAbandoned() {
	id := r.currentResponseID()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(r.hard, 10*time.Second)
	defer cancel()
	if _, err := r.w.up.Cancel(ctx, id); err != nil {
		r.logger().Warn().Err(err).Str("response_id", id).Msg("cancel the abandoned upstream response")
	}
}

// cancelUnreachable cancels a response whose id this run could not save:
// the run is being aborted, so it cannot use its own context.
func (r *run) cancelUnreachable(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.logger().Warn().Str("response_id", id).Msg("the response id could not be saved; cancelling the response")
	if _, err := r.w.up.Cancel(ctx, id); err != nil {
		r.logger().Warn().Err(err).Str("response_id", id).Msg("cancel the unreachable upstream response")
	}
}

// lostOwnership stops a run that another worker owns now, without ack. If
// the run's record does not name the response this run started, nobody will
// follow that response: it is cancelled.
func (r *run) lostOwnership(out outcome) {
	r.countLost()
	r.logger().Warn().Err(out.err).Msg("another worker owns the run now; stopping without ack")
	mine := r.currentResponseID()
	if mine == "" {
		return
	}
	st, _, err := r.w.states.Get(r.hard, r.id)
	if err != nil || st.ResponseID == mine {
		return // the new owner follows it (or the record cannot tell: leave it)
	}
	r.logger().Warn().Str("response_id", mine).Msg("the run's record names another response; cancelling ours")
	r.cancelAbandoned()
}

// countLost counts the run's loss of ownership, once however many steps
// of the run notice it.
func (r *run) countLost() {
	r.lostOnce.Do(r.w.m.lostOwnership.Inc)
}

// endGivenUp ends the run run.failed with code after stopping its
// response upstream (stopResponse), because the worker gives it up: its
// events cannot be stored, or Foundry stalled it. The record keeps
// Foundry's last word on the response.
func (r *run) endGivenUp(code, message string) {
	r.w.m.runsStalled.WithLabelValues(code).Inc()
	r.logger().Error().Str("code", code).Msg(message + "; stopping the response upstream")
	var end stopped
	if id := r.currentResponseID(); id != "" && !r.isForeground() {
		if end = r.stopResponse(r.hard, id); end.aborted {
			return
		} else if end.handoff {
			r.endHandOff(handedOffCancelling)
			return
		}
	}
	r.end(endWith(failedWith(r.currentResponseID(), code, true, message), -1, end.upstreamStatus()))
}

// handoff stops a run at shutdown so that another worker re-attaches at
// once. A create in flight is read until its response id arrives (the next
// owner re-attaches to it instead of starting a second, billed response), at
// most until shortly before the shutdown timeout; without an id by then the
// run ends as endLost does.
func (r *run) handoff(readerDone <-chan outcome, upStop context.CancelFunc) {
	if r.isForeground() {
		r.endForeground(readerDone, upStop)
		return
	}
	if r.currentResponseID() == "" && r.wasCreateSent() {
		wait := time.NewTimer(time.Until(r.w.handoffDeadline()))
		defer wait.Stop()
		select {
		case <-r.idReady:
		case out := <-readerDone:
			r.endAtShutdown(out)
			return
		case <-wait.C:
			upStop()
			out := <-readerDone
			if r.currentResponseID() == "" {
				if out.terminal == nil && !out.noResponse {
					r.endLost(errors.New("shutdown before the response id arrived"))
					return
				}
			}
			r.endAtShutdown(out)
			return
		}
	}
	upStop()
	r.endAtShutdown(<-readerDone)
}

// endForeground stops a foreground response's run at shutdown: it cannot be
// handed off (no other worker can re-attach to it), so it is relayed until
// shortly before the shutdown timeout; if it has not ended by then its
// stream is closed, which stops a foreground response, and the run fails
// stream_lost.
func (r *run) endForeground(readerDone <-chan outcome, upStop context.CancelFunc) {
	wait := time.NewTimer(time.Until(r.w.handoffDeadline()))
	defer wait.Stop()
	select {
	case out := <-readerDone:
		r.endAfterRead(out)
	case <-wait.C:
		upStop()
		<-readerDone
		r.endFailed(events.CodeStreamLost, "the worker shut down before the response ended; a response that runs in the foreground "+
			"(hosted agents ignore background) cannot be handed to another worker, and closing its stream stopped it", true, false)
	}
}

// endAtShutdown ends a run the reader finished during shutdown, or
// releases it for another worker.
func (r *run) endAtShutdown(out outcome) {
	switch {
	case out.terminal != nil || out.cancelledUpstream != nil || out.lostOwnership || out.lost:
		r.endAfterRead(out)
		return
	}
	r.endHandOff("run handed off")
}

// handedOffCancelling is logged when a run is handed off at shutdown while
// its response is being cancelled: the next owner goes on calling Foundry
// within the same bound if the cancel is on record (stopResponse).
const handedOffCancelling = "run handed off while its cancel is being confirmed"

// endHandOff gives the run to another worker at once (flush, release, nak),
// at shutdown; note is logged. A cancel heard that the record does not
// hold goes upstream first (cancelAtHandOff), even if heard meanwhile.
func (r *run) endHandOff(note string) {
	r.cancelAtHandOff()
	r.end(ending{flush: true, release: true, handoff: true, job: nak})
	r.w.m.handoffs.Inc()
	r.logger().Info().Msg(note)
}

// release gives the run back in its record (releaseRun), its job due again
// after delay. A release that does not land is counted as a vanished owner
// by the next claim.
func (r *run) release(failure string, delay time.Duration) {
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	defer cancel()
	var retryAt time.Time
	if delay > 0 {
		retryAt = time.Now().Add(delay).UTC()
	}
	_, err := r.w.states.Upsert(ctx, r.id, func(s *events.RunState, _ bool) error {
		return releaseRun(s, r.owner, failure, retryAt, r.w.maxFailures())
	})
	if err != nil && !isDecision(err) {
		r.logger().Warn().Err(err).Msg("release the run in the state bucket")
	}
}

// retryLater gives the job back before it was claimed, after a NATS
// failure: it does not count as a failed attempt. The delay grows with the
// deliveries, up to 30s.
func (r *run) endRetryLater(what string, err error) {
	r.logger().Warn().Err(err).Msg(what + "; the job will be retried")
	if jserr.MissingResource(err) {
		r.w.resourcesMissing()
	}
	r.end(retryAfter(min(r.w.cfg.RetryDelay*time.Duration(r.owner.attempt), 30*time.Second)))
}

// maxTextLen bounds error and tool texts in events: an event must stay far
// below NATS's max payload.
const maxTextLen = 4 << 10

func truncateText(s string) string {
	if head, cut := cutText(s, maxTextLen); cut {
		return head + "…"
	}
	return s
}
