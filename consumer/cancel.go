package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/retry"
)

// How the owner stops its run's response: the owner side of a cancel (a
// request, the run's deadline, abandonment), and of the runs the worker
// gives up on upstream (a full store, a stalled or queued response).
//
// The owner stops relaying first: nothing Foundry generates after the owner
// learned of the cancel reaches the run's subject. Then it calls Foundry's
// cancel, one call at a time, with backoff, reading the response between
// calls, until Foundry reports a final status, or the response ends on its
// own, or Config.CancelConfirmTimeout (counted from when the cancel was
// recorded) passes. Only then is the terminal event published, with
// Foundry's last word: the run's state says cancelling meanwhile. A response
// that had already ended when the first cancel reached Foundry ends the run
// as it ended, with the rest of its text.

// cancelCallTimeout bounds one call of Foundry's cancel or one read of the
// response while the owner stops it.
const cancelCallTimeout = 10 * time.Second

// pendingCancel returns the cancel on record for the run: in its state, or
// else in the cancels stream (stored by a client while no worker answered),
// which it then writes into the state (a write that does not land now is
// made again when the run is cancelled).
func (r *run) pendingCancel(st events.RunState) *events.CancelRecord {
	if st.Cancel != nil {
		return st.Cancel
	}
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	defer cancel()
	m, err := r.w.res.Cancels.GetLastMsgForSubject(ctx, r.w.names.CancelRecordSubject(r.id))
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			r.logger().Warn().Err(err).Msg("read the cancels stream")
		}
		return nil
	}
	req, _ := events.DecodeCancelRequest(m.Data) // an unreadable body is a cancel without a note
	rec := events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: m.Time.UTC(), ID: m.Header.Get(events.HeaderCancelID)}
	r.mu.Lock()
	if r.cancelNote == "" {
		r.cancelNote, r.cancelID = req.Reason, rec.ID
	}
	r.mu.Unlock()
	r.recordCancel(ctx, rec)
	return &rec
}

// cancel stops a running run server-side and ends it as run.cancelled
// (stopResponse says how). However long the create takes, the run ends only
// once Foundry was asked to cancel.
//
// Its span "foundryq run cancel" is a child of the run's span, linked to
// the cancel request's span when the cancel came from one.
func (r *run) cancel(reason string, readerDone <-chan outcome, upStop context.CancelFunc) {
	r.mu.Lock()
	from := r.cancelFrom
	r.mu.Unlock()
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.String("foundryq.reason", reason))}
	if from.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: from}))
	}
	hard, span := r.w.tracer.Start(r.hard, "foundryq run cancel", opts...)
	defer span.End()
	r.logger().Info().Str("reason", reason).Msg("cancelling the run upstream")

	// Recorded while Foundry is called: a store that refuses writes must not
	// delay the upstream cancel. The first cancel on record stays.
	var recorded sync.WaitGroup
	recorded.Add(1)
	go func() {
		defer recorded.Done()
		ctx, cancel := context.WithTimeout(hard, 5*time.Second)
		defer cancel()
		r.recordCancel(ctx, r.heardCancel(reason))
	}()
	defer recorded.Wait()

	id := r.currentResponseID()
	if id == "" {
		select {
		case <-r.idReady:
			id = r.currentResponseID()
		case out := <-readerDone:
			recorded.Wait()
			r.endCancelledBeforeID(reason, out)
			return
		case <-r.hard.Done():
			return
		}
	}
	if r.isForeground() {
		// A foreground response cannot be cancelled (the service refuses):
		// closing its stream is what stops it. Foundry's word on it is
		// read back.
		upStop()
		if out := <-readerDone; out.ended() {
			recorded.Wait()
			r.endAfterRead(out) // the response ended before the reader stopped
			return
		}
		end := r.readForeground(hard, id)
		recorded.Wait()
		if end.aborted {
			return
		}
		r.endCancelled(reason, end)
		return
	}
	// Nothing Foundry generates from now on is relayed.
	upStop()
	if out := <-readerDone; out.ended() {
		recorded.Wait()
		r.endAfterRead(out) // the response ended before the reader stopped
		return
	}
	end := r.stopResponse(hard, id)
	recorded.Wait()
	switch {
	case end.handoff:
		r.endHandOff(handedOffCancelling)
	case end.aborted:
		return
	case end.endedFirst:
		// Foundry finished the response before the cancel reached it: the
		// run ends as Foundry ended it, with every token relayed.
		r.logger().Info().Str("upstream_status", end.resp.Status).Msg("the response had already ended upstream; relaying its end")
		r.endAfterRead(r.publishRest(hard, end.resp))
	default:
		r.endCancelled(reason, end)
	}
}

// cancelledBeforeID ends a cancelled run whose reader stopped before the
// response id was known.
func (r *run) endCancelledBeforeID(reason string, out outcome) {
	switch {
	case out.ended():
		r.endAfterRead(out)
	case out.noResponse:
		r.endCancelled(reason, stopped{how: reachNone})
	default:
		r.endCancelled(reason, stopped{how: reachUnknown})
	}
}

// recordCancel writes rec into the run's record (recordCancel: the first
// cancel stays; the run is cancelling from then on), so that a new owner
// applies it too. A write that does not land within ctx is logged: the
// upstream cancel does not wait for it.
func (r *run) recordCancel(ctx context.Context, rec events.CancelRecord) {
	st, err := r.w.states.Upsert(ctx, r.id, func(s *events.RunState, exists bool) error {
		return recordCancel(s, exists, rec)
	})
	if err == nil {
		r.setState(st)
	} else if !isDecision(err) {
		r.logger().Warn().Err(err).Msg("record the cancel in the state bucket; Foundry is asked all the same")
	}
}

// reach says how far a stopped run got upstream.
type reach int

const (
	reachNone        reach = iota // never reached Foundry
	reachUnknown                  // a create may have started a response whose id is unknown
	reachFinal                    // Foundry reported a final status (stopped.resp)
	reachUnconfirmed              // the response exists; Foundry confirmed no final status in time
	reachGone                     // Foundry no longer knows the response
)

// stopped is what stopping a response upstream came to.
type stopped struct {
	how  reach
	resp *foundry.Response // Foundry's last word, with reachFinal
	// endedFirst: the first answer already reported the response ended
	// otherwise than cancelled: it ended before the cancel reached Foundry.
	endedFirst bool
	err        error // the last upstream error, with reachUnconfirmed or reachGone
	handoff    bool  // the worker shuts down: the next owner goes on
	aborted    bool  // the run was aborted (shutdown timeout)
	foreground bool  // a foreground response, read back after its stream was closed
}

// upstreamStatus is what the run's record and terminal event say of the
// response after the stop.
func (s stopped) upstreamStatus() string {
	switch s.how {
	case reachFinal:
		return s.resp.Status
	case reachUnknown:
		return events.UpstreamUnknown
	case reachUnconfirmed:
		return events.UpstreamUnconfirmed
	case reachGone:
		return events.UpstreamNotFound
	}
	return ""
}

// stopResponse calls Foundry's cancel on the response, one call at a time,
// with backoff, reading the response between calls, until Foundry reports
// a final status, or the cancel bound (CancelConfirmTimeout from when the
// cancel was recorded) passes. It returns early when the run is aborted,
// and hands the run off when the worker shuts down: at once if the cancel
// is on record (the next owner goes on), or else once the hand-off's
// deadline passes (a cancel the store refused is known to no one else).
func (r *run) stopResponse(ctx context.Context, id string) stopped {
	r.w.m.cancelsPending.Inc()
	defer r.w.m.cancelsPending.Dec()
	deadline := r.cancelStarted().Add(r.w.cfg.CancelConfirmTimeout)
	if now := time.Now(); !deadline.After(now) {
		// One call at least, e.g. for a run handed over past its bound.
		deadline = now.Add(min(cancelCallTimeout, r.w.cfg.CancelConfirmTimeout))
	}
	b := retry.Backoff(200*time.Millisecond, 15*time.Second)
	accepted := false // Foundry took a cancel; the response is not final yet
	var lastErr error
	stopping, shutdownBound := r.w.stopping, false
	for try := 0; ; try++ {
		if !accepted {
			resp, err := r.callUpstream(ctx, deadline, func(c context.Context) (*foundry.Response, error) { return r.w.up.Cancel(c, id) })
			switch {
			case err == nil && resp.Terminal():
				return stopped{how: reachFinal, resp: resp, endedFirst: try == 0 && resp.Status != foundry.StatusCancelled}
			case err == nil:
				accepted = true
			case r.notYetVisible(err):
				// Not visible yet right after a streamed create: try again.
			case isNotFound(err):
				return stopped{how: reachGone, err: err}
			case !time.Now().Before(deadline) && lastErr != nil:
				// Cut short by the bound itself: the error before it says more.
			default:
				lastErr = err
				r.w.m.upstreamErrors.WithLabelValues("cancel").Inc()
				if try == 0 {
					r.logger().Warn().Err(err).Msg("Foundry's cancel failed; retrying until Foundry confirms it")
					r.noteCancelFailing(err)
				}
			}
		}
		// Watch the response meanwhile: it may have ended on its own.
		resp, err := r.callUpstream(ctx, deadline, func(c context.Context) (*foundry.Response, error) { return r.w.up.Get(c, id) })
		switch {
		case err == nil && resp.Terminal():
			return stopped{how: reachFinal, resp: resp}
		case err != nil && isNotFound(err) && !r.notYetVisible(err):
			return stopped{how: reachGone, err: err}
		case err != nil && lastErr == nil:
			lastErr = err
		}
		if !time.Now().Before(deadline) {
			if shutdownBound {
				return stopped{handoff: true}
			}
			if lastErr == nil {
				lastErr = errors.New("Foundry accepted the cancel but reported no final status")
			}
			return stopped{how: reachUnconfirmed, err: lastErr}
		}
		wait := time.NewTimer(min(retryDelay(lastErr, b.NextBackOff()), time.Until(deadline)))
		select {
		case <-wait.C:
		case <-stopping:
			wait.Stop()
			if r.lastState().Cancel != nil {
				return stopped{handoff: true}
			}
			stopping = nil
			if hd := r.w.handoffDeadline(); hd.Before(deadline) {
				deadline, shutdownBound = hd, true
			}
		case <-r.hard.Done():
			wait.Stop()
			return stopped{aborted: true}
		}
	}
}

// cancelAtHandOff takes a cancel heard that the run's record does not hold
// (the store refused it) upstream when the run is handed off at shutdown:
// the next owner would not know of it. It calls Foundry's cancel in the
// background until Foundry confirms or the hand-off's deadline passes,
// then records the cancel if the store has room by then; endHandOff waits
// for it before giving the job back. Once per run, and only once the
// response id is known (a hand-off waits for it).
func (r *run) cancelAtHandOff() {
	id := r.currentResponseID()
	if id == "" || r.isForeground() || r.lastState().Cancel != nil {
		return
	}
	r.mu.Lock()
	start := r.cancelHeard && !r.handOffCancelling && !r.handedOff
	if start {
		r.handOffCancelling = true
		r.handOffCancel.Add(1)
	}
	r.mu.Unlock()
	if !start {
		return
	}
	go func() {
		defer r.handOffCancel.Done()
		r.logger().Warn().Msg("the run is handed off with a cancel its record does not hold; cancelling its response upstream first")
		end := r.stopResponse(r.hard, id)
		switch {
		case end.how == reachFinal:
			r.logger().Info().Str("upstream_status", end.resp.Status).Msg("the response ended upstream before the hand-off")
		case !end.aborted:
			r.logger().Error().Err(end.err).Msg("Foundry did not confirm the cancel before the hand-off; it reaches the next owner only if recorded")
		}
		ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
		defer cancel()
		r.recordCancel(ctx, r.heardCancel(events.ReasonRequested))
	}()
}

// foregroundReadTimeout bounds how long the owner reads a foreground
// response back (GET) after closing its stream, for Foundry's final status.
const foregroundReadTimeout = 3 * time.Second

// readForeground reads a foreground response back after its stream was
// closed (which stops it: Foundry cannot cancel it) until Foundry reports a
// final status, for foregroundReadTimeout (CancelConfirmTimeout if
// shorter). A hosted agent's response stays in_progress for ever on GET
// (Azure/azure-sdk-for-python#46015): it ends unconfirmed, saying so.
func (r *run) readForeground(ctx context.Context, id string) stopped {
	start := time.Now()
	deadline := start.Add(min(foregroundReadTimeout, r.w.cfg.CancelConfirmTimeout))
	b := retry.Backoff(100*time.Millisecond, time.Second)
	var lastErr error
	for {
		resp, err := r.callUpstream(ctx, deadline, func(c context.Context) (*foundry.Response, error) { return r.w.up.Get(c, id) })
		switch {
		case err == nil && resp.Terminal():
			return stopped{how: reachFinal, resp: resp}
		case err != nil && isNotFound(err) && !r.notYetVisible(err):
			return stopped{how: reachGone, err: err}
		case err != nil && !time.Now().Before(deadline) && lastErr != nil:
			// Cut short by the bound itself: the answer before it says more.
		case err != nil:
			lastErr = err
		default:
			lastErr = fmt.Errorf("Foundry cannot cancel a foreground response; its stream was closed, and %s later Foundry still reported it %s",
				time.Since(start).Round(100*time.Millisecond), resp.Status)
		}
		if !time.Now().Before(deadline) {
			return stopped{how: reachUnconfirmed, err: lastErr, foreground: true}
		}
		wait := time.NewTimer(min(retryDelay(err, b.NextBackOff()), time.Until(deadline)))
		select {
		case <-wait.C:
		case <-r.w.stopping:
			// Nobody can follow a foreground response after this worker.
			wait.Stop()
			return stopped{how: reachUnconfirmed, err: lastErr, foreground: true}
		case <-r.hard.Done():
			wait.Stop()
			return stopped{aborted: true}
		}
	}
}

// callUpstream makes one call of stopResponse, bounded by cancelCallTimeout
// and by the cancel bound.
func (r *run) callUpstream(ctx context.Context, deadline time.Time, call func(context.Context) (*foundry.Response, error)) (*foundry.Response, error) {
	ctx, cancel := context.WithDeadline(ctx, minTime(deadline, time.Now().Add(cancelCallTimeout)))
	defer cancel()
	return call(ctx)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// cancelStarted is when the cancel bound starts: when the run's cancel was
// recorded (now if it was not), or when the response id became known, if
// later (time spent waiting for a slow create does not count).
func (r *run) cancelStarted() time.Time {
	start := time.Now()
	if c := r.lastState().Cancel; c != nil && !c.At.IsZero() {
		start = c.At
	}
	r.mu.Lock()
	seen := r.idSeenAt
	r.mu.Unlock()
	if seen.After(start) {
		start = seen
	}
	return start
}

// noteCancelFailing records the first error of Foundry's cancel in the
// run's record (cancelFailing), for whoever looks at a run that stays
// cancelling.
func (r *run) noteCancelFailing(err error) {
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	defer cancel()
	st, werr := r.w.states.Upsert(ctx, r.id, func(s *events.RunState, _ bool) error {
		return cancelFailing(s, r.owner, truncateText(err.Error()))
	})
	if werr == nil {
		r.setState(st)
	}
}

// endCancelled ends the run as run.cancelled with what stopping the
// response came to: Foundry's last word and usage; a response that ran on
// to its end is counted (completed_after_cancel) and logged.
func (r *run) endCancelled(reason string, s stopped) {
	ev := events.RunEvent{Type: events.TypeRunCancelled, Reason: reason, ResponseID: r.currentResponseID(), UpstreamStatus: s.upstreamStatus()}
	switch s.how {
	case reachNone:
		// This step's response was never created: a run past its first
		// step reports its last response, which has ended (endCancelledBetweenSteps).
		ev.Usage = &events.Usage{}
		if steps := r.lastState().Steps; len(steps) > 0 {
			last := steps[len(steps)-1]
			ev.ResponseID, ev.UpstreamStatus = last.ResponseID, last.Status
		}
	case reachFinal:
		ev.ResponseID = s.resp.ID
		ev.Usage = usageOf(s.resp.Usage)
		if ranOn(s.resp.Status) {
			r.w.m.completedAfterCancl.Inc()
			r.logger().Warn().Str("upstream_status", s.resp.Status).
				Msg("Foundry ran the response on to its end although it was cancelled; the run stays cancelled and reports it")
		}
	case reachUnconfirmed:
		if !s.foreground { // a hosted agent's cancel always ends so: no Foundry fault
			r.w.m.cancelsUnconfirmed.Inc()
		}
		ev.Error = &events.Error{Code: events.CodeCancelUnconfirmed, Message: truncateText(s.err.Error())}
		if s.foreground {
			r.logger().Warn().Err(s.err).Msg("Foundry reported no final status for the foreground response after its stream was closed; the run ends cancelled, unconfirmed")
		} else {
			r.logger().Error().Err(s.err).Dur("bound", r.w.cfg.CancelConfirmTimeout).
				Msg("Foundry confirmed no final status within the cancel bound; the run ends cancelled, unconfirmed")
		}
	}
	if ev.Usage == nil {
		ev.UsageUnknown = true
	}
	r.w.m.runsCancelled.WithLabelValues(reason).Inc()
	r.end(endWith(ev, -1, ev.UpstreamStatus))
	if ev.ResponseID != "" && (ev.UpstreamStatus == foundry.StatusCancelled || ev.UpstreamStatus == events.UpstreamUnconfirmed) && r.w.cfg.CancelAuditDelay > 0 {
		r.w.audit(r.id, ev.ResponseID)
	}
}

// ranOn reports a final status that means the response generated to its
// end.
func ranOn(status string) bool {
	return status == foundry.StatusCompleted || status == foundry.StatusIncomplete
}

// audit reads a cancelled response back after CancelAuditDelay and records
// what Foundry says of it if that is new: a response reported cancelled that
// completed after all, or one whose cancel was never confirmed. Audits
// pending at shutdown are dropped.
func (w *Worker) audit(runID, responseID string) {
	w.auditWG.Add(1)
	go func() {
		defer w.auditWG.Done()
		t := time.NewTimer(w.cfg.CancelAuditDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.stopping:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), cancelCallTimeout)
		defer cancel()
		resp, err := w.up.Get(ctx, responseID)
		if err != nil || !resp.Terminal() {
			return
		}
		st, err := w.states.Update(ctx, runID, func(s *events.RunState) error {
			return auditedUpstream(s, resp.Status)
		})
		if err != nil {
			w.log.Warn().Err(err).Str("run_id", runID).Msg("record the upstream status")
			return
		}
		if !ranOn(resp.Status) || st.UpstreamStatus != resp.Status {
			return
		}
		w.log.Warn().Str("run_id", runID).Str("response_id", responseID).Str("upstream_status", resp.Status).
			Msg("Foundry ran the response on after the run was cancelled; the run stays cancelled")
		// Counted once the record says so: whoever sees the count sees
		// the upstream status in the run's state.
		w.m.completedAfterCancl.Inc()
	}()
}

// ownCancel answers a cancel request for a run this worker owns and runs
// without reading the run's record first: the run stops at once, and the
// cancel is recorded by a compare-and-set on this worker's last write of
// the record (cancelTaken), so neither the reply nor run.cancelled waits
// behind a read from the bucket's leader, which under load queues behind
// every other request to it. ok is false when the run does not run here
// (not owned, not started, or waiting): the record decides (answerCancel).
func (w *Worker) ownCancel(ctx context.Context, runID string, req events.CancelRequest, m *nats.Msg) (reply events.CancelReply, after func(), ok bool) {
	r := w.owned(runID)
	if r == nil || !r.runsHere() {
		return events.CancelReply{}, nil, false
	}
	r.requestCancel(req.Reason, m.Header.Get(events.HeaderCancelID), trace.SpanContextFromContext(ctx))
	reply, after = w.cancelTaken(ctx, runID, req, m)
	return reply, after, true
}

// runsHere reports whether the run's record, as this owner last wrote or
// read it, says it runs (or is being cancelled): a cancel of it is the
// owner's to apply.
func (r *run) runsHere() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.Status == events.StatusRunning || r.state.Status == events.StatusCancelling
}
