package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
)

// maxCancelsInFlight bounds the cancel requests one worker answers at once.
const maxCancelsInFlight = 256

// subscribeCancels subscribes twice to the cancel subjects: once in the
// workers' queue group, to answer each request exactly once, and once on its
// own, so that the owner of a run hears every cancel for it at once,
// whichever worker answers.
func (w *Worker) subscribeCancels(ctx context.Context) (func(), error) {
	subject := w.names.CancelSubject("*")
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	slots := make(chan struct{}, maxCancelsInFlight)
	answer, err := w.nc.QueueSubscribe(subject, w.names.Consumer(), func(m *nats.Msg) {
		slots <- struct{}{}
		w.cancelWG.Add(1)
		go func() {
			defer w.cancelWG.Done()
			defer func() { <-slots }()
			w.onCancelRequest(cctx, m)
		}()
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("consumer: subscribe to %s: %w", subject, err)
	}
	notice, err := w.nc.Subscribe(subject, w.onCancelNotice)
	if err != nil {
		_ = answer.Unsubscribe()
		stop()
		return nil, fmt.Errorf("consumer: subscribe to %s: %w", subject, err)
	}
	return func() {
		_ = answer.Unsubscribe()
		_ = notice.Unsubscribe()
		w.cancelWG.Wait()
		stop()
	}, nil
}

// onCancelNotice stops the run if this worker owns it. The worker that
// answers the request records it; the owner acts at once.
func (w *Worker) onCancelNotice(m *nats.Msg) {
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	if !ok {
		return
	}
	if r := w.owned(runID); r != nil {
		r.log.Info().Msg("cancel requested")
		r.stop(ErrCancelRequested)
	}
}

// onCancelRequest answers one cancel request.
func (w *Worker) onCancelRequest(ctx context.Context, m *nats.Msg) {
	start := time.Now()
	reply := events.CancelReply{}
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	switch {
	case !ok:
		reply.Error = "subject " + m.Subject + " does not name a valid run id"
	default:
		reply.RunID = runID
		var req events.CancelRequest
		if len(m.Data) > 0 {
			if err := json.Unmarshal(m.Data, &req); err != nil {
				reply.Error = "invalid cancel request body: " + err.Error()
				break
			}
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		reply = w.answerCancel(actx, runID, req)
		cancel()
	}
	data, _ := json.Marshal(reply)
	if m.Reply != "" {
		if err := m.Respond(data); err != nil {
			w.log.Warn().Err(err).Str("run_id", runID).Msg("reply to cancel")
		}
	}
	result := string(reply.Result)
	if reply.Error != "" {
		result = "error"
	}
	w.m.cancelRequests.WithLabelValues(result).Inc()
	w.m.cancelReplySeconds.Observe(time.Since(start).Seconds())
	w.log.Info().Str("run_id", runID).Str("result", result).Str("reason", "requested").Str("error", reply.Error).Msg("cancel answered")
}

// answerCancel records a cancel request durably, then acts on it:
//   - unknown run: not_found;
//   - finished run: already_finished, with its terminal event type (or
//     cancelled again, if it was cancelled before it started);
//   - queued run (no worker owns it): the run is ended here as
//     run.cancelled, its job deleted, and the answer is cancelled;
//   - running run: the cancel is recorded, Foundry's cancel is called if the
//     response id is known (the owner calls it the moment the id arrives
//     otherwise), and the answer is cancelling.
func (w *Worker) answerCancel(ctx context.Context, runID string, req events.CancelRequest) events.CancelReply {
	reply := events.CancelReply{RunID: runID}
	// The job is looked up only when no worker owns the run.
	var job *jetstream.RawStreamMsg
	var jobErr error
	lookedUp := false
	findJob := func() (*jetstream.RawStreamMsg, error) {
		if !lookedUp {
			lookedUp = true
			job, jobErr = w.res.Runs.GetLastMsgForSubject(ctx, w.names.RunSubject(runID))
			if errors.Is(jobErr, jetstream.ErrMsgNotFound) {
				job, jobErr = nil, nil
			}
		}
		return job, jobErr
	}
	now := time.Now().UTC()
	var notFound, endHere bool
	st, err := w.states.Upsert(ctx, runID, func(s *events.RunState, exists bool) error {
		notFound, endHere = false, false
		if exists && s.Finished() {
			return errFinished
		}
		if exists && s.Status != events.StatusQueued {
			if s.Cancel != nil {
				return events.ErrSkipUpdate // recorded already
			}
			s.Cancel = &events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: now}
			return nil
		}
		queued, err := findJob()
		switch {
		case err != nil:
			return fmt.Errorf("look up the run's job: %w", err)
		case !exists && queued == nil:
			notFound = true
			return events.ErrSkipUpdate
		default:
			// Nobody owns the run. Claiming it as cancelled means no worker
			// will ever start it: a worker's claim sees it finished.
			endHere = true
			s.Status, s.Terminal, s.Owner, s.FinishedAt = events.StatusCancelled, events.TypeRunCancelled, w.cfg.WorkerID, &now
			if s.Cancel == nil {
				s.Cancel = &events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: now}
			}
			return nil
		}
	})
	switch {
	case errors.Is(err, errFinished):
		reply.Result = events.CancelAlreadyFinished
		if st.Terminal == events.TypeRunCancelled && st.ResponseID == "" {
			reply.Result = events.CancelCancelled // the answer it got the first time
		}
		reply.Terminal = st.Terminal
		reply.UpstreamStatus = st.UpstreamStatus
		return reply
	case err != nil:
		reply.Error = fmt.Sprintf("record cancel: %v", err)
		return reply
	case notFound:
		reply.Result = events.CancelNotFound
		return reply
	case endHere:
		if err := w.endQueued(ctx, runID, job); err != nil {
			reply.Error = err.Error()
			return reply
		}
		reply.Result = events.CancelCancelled
		return reply
	}
	reply.Result = events.CancelCancelling
	if st.ResponseID != "" {
		resp, err := w.up.Cancel(ctx, st.ResponseID)
		switch {
		case err == nil:
			reply.UpstreamStatus = resp.Status
		case errors.Is(err, foundry.ErrNotFound):
			reply.UpstreamStatus = "not_found"
		default:
			w.m.upstreamErrors.WithLabelValues("cancel").Inc()
			w.log.Warn().Err(err).Str("run_id", runID).Str("response_id", st.ResponseID).Msg("cancel upstream; the owner retries")
		}
	}
	return reply
}

// endQueued publishes run.cancelled for a run that was claimed as cancelled
// before any worker started it, and deletes its job.
func (w *Worker) endQueued(ctx context.Context, runID string, job *jetstream.RawStreamMsg) error {
	pos, err := w.tail(ctx, runID)
	if err != nil {
		return err
	}
	if !pos.Type.Terminal() {
		rel := newRelay(w.pub, w.res.Events, w.names, runID, pos, 0, w.m)
		rel.add(events.RunEvent{Type: events.TypeRunCancelled, Reason: events.ReasonRequested, Usage: &events.Usage{}}, -1)
		rel.close()
		rel.run(ctx, func(error) {})
		if err := rel.flush(ctx); err != nil {
			return fmt.Errorf("publish run.cancelled: %w", err)
		}
	}
	if job != nil {
		if err := w.res.Runs.DeleteMsg(ctx, job.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			// A worker that pulls it finds the run finished and acks it.
			w.log.Warn().Err(err).Str("run_id", runID).Msg("delete the cancelled job")
		}
	}
	w.m.runsCancelled.WithLabelValues(events.ReasonRequested).Inc()
	w.m.runsFinished.WithLabelValues(string(events.TypeRunCancelled)).Inc()
	return nil
}

// cancel stops a running run server-side: record the cancel, call
// Foundry's cancel as soon as the response id exists, stop relaying, confirm
// the upstream terminal status, and end the run as run.cancelled.
func (r *run) cancel(reason string, readerDone <-chan outcome, upStop context.CancelFunc) {
	r.log.Info().Str("reason", reason).Msg("cancelling the run upstream")
	if reason != events.ReasonRequested {
		r.recordCancel(reason) // a requested cancel is recorded by the worker that answered it
	}
	id := r.currentResponseID()
	if id == "" {
		// The create is in flight: Foundry's cancel needs the id it returns.
		wait := time.NewTimer(r.w.cfg.CancelConfirmTimeout)
		defer wait.Stop()
		select {
		case <-r.idReady:
			id = r.currentResponseID()
		case out := <-readerDone:
			if out.responseMissing {
				r.finishCancelled(reason, nil, false)
			} else {
				r.finishCancelled(reason, nil, true)
			}
			return
		case <-wait.C:
			upStop()
			<-readerDone
			if id = r.currentResponseID(); id == "" {
				r.log.Warn().Msg("no response id arrived in time; the run ends cancelled with unknown upstream state")
				r.finishCancelled(reason, nil, true)
				return
			}
			readerDone = nil
		}
	}
	ctx, cancel := context.WithTimeout(r.hard, r.w.cfg.CancelConfirmTimeout)
	defer cancel()
	resp, err := r.w.up.Cancel(ctx, id)
	if err != nil {
		r.w.m.upstreamErrors.WithLabelValues("cancel").Inc()
		r.log.Warn().Err(err).Str("response_id", id).Msg("cancel upstream")
	}
	if err == nil && isTerminalStatus(resp.Status) && resp.Status != "cancelled" && readerDone != nil {
		// Foundry finished the response before the cancel reached it: the
		// run ends as Foundry ended it, with every token relayed.
		r.log.Info().Str("upstream_status", resp.Status).Msg("the response had already ended upstream; relaying its end")
		select {
		case out := <-readerDone:
			if out.terminal != nil || out.cancelledUpstream != nil {
				r.conclude(out)
				return
			}
			readerDone = nil
		case <-ctx.Done():
		}
	}
	upStop()
	if readerDone != nil {
		<-readerDone
	}
	r.finishCancelled(reason, r.confirm(ctx, id, resp), true)
}

// confirm polls the response until Foundry reports a terminal status, within
// ctx, unless the cancel's reply already reported one. Cancel is best-effort
// upstream (a response has been seen to report cancelled and later
// completed): the audit reads it back once more later.
func (r *run) confirm(ctx context.Context, id string, last *foundry.Response) *foundry.Response {
	if last != nil && isTerminalStatus(last.Status) {
		return last // a later flip to completed is caught by the audit
	}
	backoff := 50 * time.Millisecond
	for {
		resp, err := r.w.up.Get(ctx, id)
		if err == nil {
			last = resp
			if isTerminalStatus(resp.Status) {
				return resp
			}
		}
		if ctx.Err() != nil {
			r.log.Warn().Str("response_id", id).Msg("Foundry did not confirm a terminal status in time")
			return last
		}
		sleep(ctx, backoff)
		backoff = min(backoff*2, time.Second)
	}
}

// recordCancel writes the cancel into the state bucket so that a new owner
// applies it too.
func (r *run) recordCancel(reason string) {
	_, err := r.w.states.Update(r.hard, r.id, func(s *events.RunState) error {
		if s.Finished() {
			return errFinished
		}
		if s.Cancel != nil {
			return events.ErrSkipUpdate // the first cancel stays on record
		}
		s.Cancel = &events.CancelRecord{Reason: reason, At: time.Now().UTC()}
		return nil
	})
	if err != nil && !errors.Is(err, errFinished) {
		r.log.Warn().Err(err).Msg("record the cancel in the state bucket")
	}
}

// finishCancelled ends the run as run.cancelled. resp is Foundry's last word
// on the response (nil if none); reached says whether the run may have
// reached Foundry at all.
func (r *run) finishCancelled(reason string, resp *foundry.Response, reached bool) {
	ev := events.RunEvent{Type: events.TypeRunCancelled, Reason: reason}
	var upstream string
	if resp != nil {
		ev.ResponseID = resp.ID
		upstream = resp.Status
		ev.UpstreamStatus = resp.Status
		ev.Usage = usageOf(resp.Usage)
		if resp.Status == "completed" {
			r.w.m.completedAfterCancl.Inc()
			r.log.Warn().Str("response_id", resp.ID).Msg("Foundry reports the response completed after the cancel; the run stays cancelled")
		}
	}
	if ev.Usage == nil {
		if reached {
			ev.UsageUnknown = true
		} else {
			ev.Usage = &events.Usage{}
		}
	}
	r.w.m.runsCancelled.WithLabelValues(reason).Inc()
	r.finish(ev, -1, upstream)
	if resp != nil && resp.Status == "cancelled" && r.w.cfg.CancelAuditDelay > 0 {
		r.w.audit(r.id, resp.ID)
	}
}

// audit reads a cancelled response back after CancelAuditDelay and records
// it if Foundry completed it after all. Audits pending at shutdown are
// dropped.
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
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := w.up.Get(ctx, responseID)
		if err != nil || resp.Status != "completed" {
			return
		}
		w.m.completedAfterCancl.Inc()
		w.log.Warn().Str("run_id", runID).Str("response_id", responseID).
			Msg("Foundry completed the response after reporting it cancelled; the run stays cancelled")
		if _, err := w.states.Update(ctx, runID, func(s *events.RunState) error {
			s.UpstreamStatus = resp.Status
			return nil
		}); err != nil {
			w.log.Warn().Err(err).Str("run_id", runID).Msg("record the upstream status")
		}
	}()
}
