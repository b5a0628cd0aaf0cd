package consumer

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

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/retry"
	"github.com/foundryq/foundryq/internal/tracing"
)

// How a cancel reaches the server, and who calls Foundry's cancel.
//
// A client stores the cancel on <prefix>.cancels.<run_id> first, then sends a
// request on <prefix>.cancel.<run_id>. One worker answers it (queue group):
// it records the cancel in the run's state record, then tells the owner (a
// notice on the cancel subject, which every worker hears outside the group;
// directly if it owns the run itself), then replies. The reply therefore
// always describes a cancel that is on record, and an owner that took the
// run just before the record was written still hears it; a worker that
// takes a run reads the record and the cancels stream first. No cancel is
// lost.
//
// Both call Foundry's cancel: the answering worker when the record already
// names the response (so the response stops being billed at once, even while
// its owner is unresponsive, and the reply carries Foundry's status), and
// the owner when it learns of the cancel, or the moment the response id
// arrives if the create is still in flight, because only the owner can stop
// relaying, confirm the final status and end the run. Foundry's cancel is
// idempotent.

// maxCancelsInFlight bounds the cancel requests one worker answers at once.
const maxCancelsInFlight = 256

// subscribeCancels subscribes twice to the cancel subjects: once in the
// workers' queue group, to answer each request exactly once, and once on its
// own, so that the owner of a run hears every cancel for it at once,
// whichever worker answers.
func (w *Worker) subscribeCancels(ctx context.Context) (func(), error) {
	subject := w.names.CancelWildcard()
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	slots := make(chan struct{}, maxCancelsInFlight)
	answer, err := w.nc.QueueSubscribe(subject, w.names.WorkerQueueGroup(), func(m *nats.Msg) {
		if m.Header.Get(events.HeaderCancelNotice) != "" {
			return // a worker's notice to the owner, not a request
		}
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

// onCancelNotice stops the run if this worker owns it, when another worker
// has recorded a cancel for it. Requests themselves are left to the
// answering worker, so that a malformed cancel cancels nothing.
func (w *Worker) onCancelNotice(m *nats.Msg) {
	if m.Header.Get(events.HeaderCancelNotice) == "" {
		return
	}
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	if !ok {
		return
	}
	req, err := events.DecodeCancelRequest(m.Data)
	if err != nil {
		return
	}
	if r := w.owned(runID); r != nil {
		r.logger().Info().Msg("cancel requested")
		r.requestCancel(req.Reason, trace.SpanContextFromContext(tracing.Extract(context.Background(), m.Header)))
	}
}

// requestCancel stops the run for a cancel request heard directly; from is
// the span of the cancel's answer (if traced), linked from the run's cancel
// span.
func (r *run) requestCancel(note string, from trace.SpanContext) {
	r.mu.Lock()
	if r.cancelNote == "" {
		r.cancelNote = note
	}
	if !r.cancelFrom.IsValid() {
		r.cancelFrom = from
	}
	r.mu.Unlock()
	r.stop(ErrCancelRequested)
}

// onCancelRequest answers one cancel request.
//
// Its span "foundryq cancel answer" continues the trace context of the
// request and links to the run's trace.
func (w *Worker) onCancelRequest(ctx context.Context, m *nats.Msg) {
	start := time.Now()
	reply := events.CancelReply{}
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	ctx, span := w.tracer.Start(tracing.Extract(ctx, m.Header), "foundryq cancel answer", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("foundryq.run_id", runID), attribute.String("foundryq.worker", w.cfg.WorkerID)))
	defer span.End()
	if ok && span.IsRecording() {
		if sc := w.runSpan(ctx, runID); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	if !ok {
		reply.Error = "subject " + m.Subject + " does not name a valid run id"
	} else if req, err := events.DecodeCancelRequest(m.Data); err != nil {
		reply = events.CancelReply{RunID: runID, Error: "invalid cancel request: " + err.Error()}
	} else {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		reply = w.answerCancel(actx, runID, req, m.Data)
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
	span.SetAttributes(attribute.String("foundryq.cancel_result", result))
	if reply.Error != "" {
		span.SetStatus(codes.Error, reply.Error)
	}
	w.m.cancelRequests.WithLabelValues(result).Inc()
	w.m.cancelReplySeconds.Observe(time.Since(start).Seconds())
	w.log.Info().Str("run_id", runID).Str("result", result).Str("error", reply.Error).Msg("cancel answered")
}

// answerCancel decides what a cancel request does from the run's record
// (decideCancel) and does it. body is the request as received, passed on
// to the owner.
func (w *Worker) answerCancel(ctx context.Context, runID string, req events.CancelRequest, body []byte) events.CancelReply {
	for range 3 {
		st, exists, err := w.readState(ctx, runID)
		if err != nil {
			return events.CancelReply{RunID: runID, Error: err.Error()}
		}
		switch decideCancel(st, exists) {
		case cancelRefuse:
			return events.CancelReply{RunID: runID, Error: fmt.Sprintf("the run's record has schema %d, newer than this worker's %d", st.Schema, stateSchema)}
		case cancelReportFinished:
			return finishedReply(st)
		case cancelThroughRecord:
			return w.cancelTaken(ctx, runID, req, body)
		case cancelBeforeStart:
			reply, err := w.cancelNotTaken(ctx, runID, req, exists)
			if errors.Is(err, errClaimed) {
				continue // a worker took the run meanwhile
			}
			return reply
		}
	}
	return events.CancelReply{RunID: runID, Error: "the run changed hands while the cancel was answered; send it again"}
}

// finishedReply answers a cancel of a run that has ended.
func finishedReply(st events.RunState) events.CancelReply {
	reply := events.CancelReply{RunID: st.RunID, Result: events.CancelAlreadyFinished, Terminal: st.Terminal, UpstreamStatus: st.UpstreamStatus}
	if st.Terminal == events.TypeRunCancelled && st.ResponseID == "" && st.CreateStartedAt == nil {
		reply.Result = events.CancelCancelled // cancelled before it started: the answer it got the first time
	}
	return reply
}

// cancelTaken records a cancel for a run a worker has taken, tells the
// owner, and cancels the response upstream if its id is on record.
func (w *Worker) cancelTaken(ctx context.Context, runID string, req events.CancelRequest, body []byte) events.CancelReply {
	rec := events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: time.Now().UTC()}
	st, err := w.states.Upsert(ctx, runID, func(s *events.RunState, exists bool) error {
		return recordCancel(s, exists, rec)
	})
	switch {
	case errors.Is(err, errFinished):
		return finishedReply(st)
	case err != nil:
		return events.CancelReply{RunID: runID, Error: "record the cancel: " + err.Error()}
	}
	reply := events.CancelReply{RunID: runID, Result: events.CancelCancelling}
	if r := w.owned(runID); r != nil {
		r.logger().Info().Msg("cancel requested")
		r.requestCancel(req.Reason, trace.SpanContextFromContext(ctx))
	} else {
		w.noticeOwner(ctx, runID, body)
	}
	if st.ResponseID != "" {
		resp, err := w.up.Cancel(ctx, st.ResponseID)
		switch {
		case err == nil:
			reply.UpstreamStatus = resp.Status
		case st.CreateStartedAt != nil && foundry.NotYetVisible(err, time.Since(*st.CreateStartedAt)):
			// Not visible yet right after a streamed create: the owner retries.
		case isNotFound(err):
			reply.UpstreamStatus = "not_found"
		default:
			w.m.upstreamErrors.WithLabelValues("cancel").Inc()
			w.log.Warn().Err(err).Str("run_id", runID).Str("response_id", st.ResponseID).Msg("cancel upstream; the owner retries")
		}
	}
	return reply
}

// noticeOwner tells the run's owner about a cancel now on record: the owner
// may have taken the run after the request was first delivered.
// The notice carries the trace context of ctx.
func (w *Worker) noticeOwner(ctx context.Context, runID string, body []byte) {
	m := nats.NewMsg(w.names.CancelSubject(runID))
	m.Data = body
	m.Header.Set(events.HeaderCancelNotice, w.cfg.WorkerID)
	tracing.Inject(ctx, m.Header)
	if err := w.nc.PublishMsg(m); err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Msg("tell the owner about the cancel")
	}
}

// runSpan is the span a cancel's span links to: the run's own span if this
// worker owns the run, else the span its request was submitted under (from
// the job's headers), else none.
func (w *Worker) runSpan(ctx context.Context, runID string) trace.SpanContext {
	if r := w.owned(runID); r != nil {
		return r.span.SpanContext()
	}
	job, err := w.res.Runs.GetLastMsgForSubject(ctx, w.names.RunSubject(runID))
	if err != nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(tracing.Extract(context.Background(), job.Header))
}

// cancelNotTaken ends a run that no worker has taken: the record says
// cancelled first (a worker that pulls the job now finds it finished), then
// run.cancelled is published and the job deleted. Without a job or a record
// the run is unknown.
func (w *Worker) cancelNotTaken(ctx context.Context, runID string, req events.CancelRequest, exists bool) (events.CancelReply, error) {
	job, err := w.res.Runs.GetLastMsgForSubject(ctx, w.names.RunSubject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		job, err = nil, nil
	}
	if err != nil {
		return events.CancelReply{RunID: runID, Error: "look up the run's job: " + err.Error()}, nil
	}
	if job == nil && !exists {
		w.forgetCancel(ctx, runID)
		return events.CancelReply{RunID: runID, Result: events.CancelNotFound}, nil
	}
	digest := ""
	if job != nil {
		digest = rawDigest(job.Data)
		if r, err := events.DecodeRunRequest(job.Data); err == nil {
			digest = r.Digest()
		}
	}
	pos, err := w.tail(ctx, runID)
	if err != nil {
		return events.CancelReply{RunID: runID, Error: err.Error()}, nil
	}
	now := time.Now().UTC()
	rec := events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: now}
	end := events.RunEvent{RunID: runID, Seq: pos.Seq + 1, Type: events.TypeRunCancelled, Time: now,
		Reason: events.ReasonRequested, Usage: &events.Usage{}}
	st, err := w.states.Upsert(ctx, runID, func(s *events.RunState, exists bool) error {
		return cancelQueued(s, exists, w.cfg.WorkerID, digest, rec, end, now)
	})
	switch {
	case errors.Is(err, errClaimed):
		return events.CancelReply{}, err
	case errors.Is(err, errFinished):
		return finishedReply(st), nil
	case err != nil:
		return events.CancelReply{RunID: runID, Error: "record the cancel: " + err.Error()}, nil
	}
	if err := w.publishEnd(ctx, runID, pos, end, w.log.With().Str("run_id", runID).Logger()); err != nil {
		// The record says cancelled; the worker that pulls the job
		// publishes the event from it.
		w.log.Warn().Err(err).Str("run_id", runID).Msg("publish run.cancelled of a queued run")
	}
	if job != nil {
		if err := w.res.Runs.DeleteMsg(ctx, job.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			// A worker that pulls it finds the run finished and acks it.
			w.log.Warn().Err(err).Str("run_id", runID).Msg("delete the cancelled job")
		}
	}
	w.m.runsCancelled.WithLabelValues(events.ReasonRequested).Inc()
	var submitted time.Time
	if job != nil {
		submitted = job.Time
	}
	w.m.runEnded(end, submitted)
	return events.CancelReply{RunID: runID, Result: events.CancelCancelled}, nil
}

// forgetCancel drops the cancel record of a run id that names no run, so
// that a run submitted later under it is not cancelled by it.
func (w *Worker) forgetCancel(ctx context.Context, runID string) {
	m, err := w.res.Cancels.GetLastMsgForSubject(ctx, w.names.CancelRecordSubject(runID))
	if err == nil {
		err = w.res.Cancels.DeleteMsg(ctx, m.Sequence)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Warn().Err(err).Str("run_id", runID).Msg("drop the cancel record of an unknown run")
	}
}

// pendingCancel returns the cancel on record for the run: in its state, or
// else in the cancels stream (stored by a client while no worker answered),
// which it then writes into the state. A cancel heard directly counts too.
func (r *run) pendingCancel(st events.RunState) *events.CancelRecord {
	if st.Cancel != nil {
		return st.Cancel
	}
	m, err := r.w.res.Cancels.GetLastMsgForSubject(r.hard, r.w.names.CancelRecordSubject(r.id))
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			r.logger().Warn().Err(err).Msg("read the cancels stream")
		}
		return nil
	}
	req, _ := events.DecodeCancelRequest(m.Data) // an unreadable body is a cancel without a note
	rec := events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: m.Time.UTC()}
	if _, err := r.persist("record the cancel", func(s *events.RunState, exists bool) error {
		return recordCancel(s, exists, rec)
	}); err != nil && !errors.Is(err, errSkipUpdate) {
		r.logger().Warn().Err(err).Msg("record the stored cancel in the state bucket")
	}
	return &rec
}

// cancel stops a running run server-side: record the cancel, call Foundry's
// cancel as soon as the response id exists, stop relaying, confirm the
// upstream terminal status, and end the run as run.cancelled. However long
// the create takes, the run ends only once Foundry was asked to cancel.
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
	r.recordOwnCancel(reason)
	id := r.currentResponseID()
	if id == "" {
		select {
		case <-r.idReady:
			id = r.currentResponseID()
		case out := <-readerDone:
			r.cancelledBeforeID(reason, out)
			return
		case <-r.hard.Done():
			return
		}
	}
	if r.isForeground() {
		// A foreground response cannot be cancelled (the service refuses):
		// closing its stream is what stops it. Its final status is unknown.
		upStop()
		<-readerDone
		r.finishCancelled(reason, nil, reachUnknown)
		return
	}
	ctx, cancel := context.WithTimeout(hard, r.w.cfg.CancelConfirmTimeout)
	defer cancel()
	resp, err := r.cancelUpstream(ctx, id)
	if err == nil && resp.Terminal() && resp.Status != foundry.StatusCancelled {
		// Foundry finished the response before the cancel reached it: the
		// run ends as Foundry ended it, with every token relayed.
		r.logger().Info().Str("upstream_status", resp.Status).Msg("the response had already ended upstream; relaying its end")
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
	r.finishCancelled(reason, r.confirm(ctx, id, resp), reachConfirmed)
}

// cancelledBeforeID ends a cancelled run whose reader stopped before the
// response id was known.
func (r *run) cancelledBeforeID(reason string, out outcome) {
	switch {
	case out.terminal != nil || out.cancelledUpstream != nil || out.lostOwnership:
		r.conclude(out)
	case out.noResponse:
		r.finishCancelled(reason, nil, reachNone)
	default:
		r.finishCancelled(reason, nil, reachUnknown)
	}
}

// cancelUpstream calls Foundry's cancel, retrying transient errors and a
// response that is not yet visible, within ctx.
func (r *run) cancelUpstream(ctx context.Context, id string) (*foundry.Response, error) {
	b := retry.Backoff(100*time.Millisecond, 2*time.Second)
	for {
		resp, err := r.w.up.Cancel(ctx, id)
		if err == nil {
			return resp, nil
		}
		r.w.m.upstreamErrors.WithLabelValues("cancel").Inc()
		if ctx.Err() != nil || !(retryable(err) || r.notYetVisible(err)) {
			r.logger().Warn().Err(err).Str("response_id", id).Msg("cancel upstream")
			return nil, err
		}
		retry.Sleep(ctx, retryDelay(err, b.NextBackOff()))
	}
}

// recordOwnCancel writes the cancel that stopped the run into its record,
// so that a new owner applies it too (the first cancel stays).
func (r *run) recordOwnCancel(reason string) {
	r.mu.Lock()
	note := r.cancelNote
	r.mu.Unlock()
	rec := events.CancelRecord{Reason: reason, Note: note, At: time.Now().UTC()}
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	defer cancel()
	st, err := r.w.states.Upsert(ctx, r.id, func(s *events.RunState, exists bool) error {
		return recordCancel(s, exists, rec)
	})
	if err == nil {
		r.setState(st)
	} else if !isDecision(err) {
		r.logger().Warn().Err(err).Msg("record the cancel in the state bucket")
	}
}

// confirm polls the response until Foundry reports a terminal status, within
// ctx, unless the cancel's reply already reported one. Cancel is best-effort
// upstream (a response has been seen to report cancelled and later
// completed): the audit reads it back once more later.
func (r *run) confirm(ctx context.Context, id string, last *foundry.Response) *foundry.Response {
	if last.Terminal() {
		return last // a later flip to completed is caught by the audit
	}
	b := retry.Backoff(50*time.Millisecond, time.Second)
	for {
		resp, err := r.w.up.Get(ctx, id)
		if err == nil {
			last = resp
			if resp.Terminal() {
				return resp
			}
		}
		if ctx.Err() != nil {
			r.logger().Warn().Str("response_id", id).Msg("Foundry did not confirm a terminal status in time")
			return last
		}
		retry.Sleep(ctx, b.NextBackOff())
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
		if err != nil || resp.Status != foundry.StatusCompleted {
			return
		}
		w.log.Warn().Str("run_id", runID).Str("response_id", responseID).
			Msg("Foundry completed the response after reporting it cancelled; the run stays cancelled")
		if _, err := w.states.Update(ctx, runID, func(s *events.RunState) error {
			return auditedUpstream(s, resp.Status)
		}); err != nil {
			w.log.Warn().Err(err).Str("run_id", runID).Msg("record the upstream status")
		}
		// Counted once the record says so: whoever sees the count sees
		// the upstream status in the run's state.
		w.m.completedAfterCancl.Inc()
	}()
}
