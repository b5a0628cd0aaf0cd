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
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/tracing"
)

// How a cancel reaches the run's owner: the worker side of a cancel request.
//
// A client stores the cancel on <prefix>.cancels.<run_id> first, then sends
// a request on <prefix>.cancel.<run_id>. Three paths carry it to the owner,
// so that none depends on one queue member:
//
//   - The stored record: every worker subscribes to <prefix>.cancels.*
//     (a JetStream publish reaches core subscribers too, even one the
//     store refuses), and the owner of the run stops it at once. After a
//     reconnect each worker re-reads the records of the runs it owns.
//   - The request: one worker answers it (queue group). It records the
//     cancel in the run's state record (status cancelling), tells the owner
//     (a notice on <prefix>.notice.<run_id>, which every worker hears and
//     only workers may publish; directly if it owns the run itself), and
//     replies "cancelling"
//     at once: it never waits for Foundry. A worker that takes a run reads
//     its record and the cancels stream first.
//   - The notice is a request: an owner answers it. If no owner does within
//     ownerAnswerTimeout (dead, frozen or cut off) while the record names a
//     response, the answering worker calls Foundry's cancel once itself, so
//     that the response stops being billed before the run's lease lapses;
//     the next owner then confirms it and ends the run.
//
// Only the owner ends the run. It calls Foundry's cancel, one call at a
// time, until Foundry confirms it (cancel.go).

// maxCancelsInFlight bounds the cancel requests one worker answers at once.
const maxCancelsInFlight = 256

// answerTimeout bounds the NATS calls of one answer (the record, the job,
// the run's tail). They take milliseconds; the bound is for a JetStream
// that does not answer, e.g. during a leader election. No Foundry call is
// made before the reply.
const answerTimeout = 10 * time.Second

// ownerAnswerTimeout is how long the worker that answered a cancel waits
// for the run's owner to acknowledge the notice before it calls Foundry's
// cancel itself.
const ownerAnswerTimeout = time.Second

// subscribeCancels subscribes to the cancel subject (in the workers' queue
// group, to answer each request once), to the notice subject (to hear the
// notices for the runs it owns) and to the stored cancel records.
func (w *Worker) subscribeCancels(ctx context.Context) (func(), error) {
	subject := w.names.CancelWildcard()
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	slots := make(chan struct{}, maxCancelsInFlight)
	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, s := range []struct {
		subject, queue string
		handle         nats.MsgHandler
	}{
		{subject, w.names.WorkerQueueGroup(), func(m *nats.Msg) {
			if m.Header.Get(events.HeaderCancelNotice) != "" {
				// An older worker's notice (they sent them here), or a
				// client's forgery: not a request, and not trusted.
				return
			}
			slots <- struct{}{}
			w.cancelWG.Add(1)
			go func() {
				defer w.cancelWG.Done()
				defer func() { <-slots }()
				w.onCancelRequest(cctx, m)
			}()
		}},
		{w.names.NoticeWildcard(), "", w.onCancelNotice},
		{w.names.CancelRecordsWildcard(), "", w.onCancelRecord},
	} {
		sub, err := w.nc.QueueSubscribe(s.subject, s.queue, s.handle)
		if err != nil {
			unsubscribe()
			stop()
			return nil, fmt.Errorf("consumer: subscribe to %s: %w", s.subject, err)
		}
		subs = append(subs, sub)
	}
	return func() {
		unsubscribe()
		w.cancelWG.Wait()
		stop()
	}, nil
}

// onCancelNotice stops the run if this worker owns it, when another worker
// has recorded a cancel for it, and acknowledges the notice. It hears the
// notice subject only, which clients may not publish: a notice on the
// cancel subject (an older worker's, or a forgery) is not followed; the
// stored record carries such a cancel to the owner all the same.
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
	r := w.owned(runID)
	if r != nil && r.requestCancel(req.Reason, m.Header.Get(events.HeaderCancelID), trace.SpanContextFromContext(tracing.Extract(context.Background(), m.Header))) {
		if m.Reply != "" {
			_ = m.Respond([]byte(w.cfg.WorkerID))
		}
	}
}

// onCancelRecord stops the run if this worker owns it, when a client has
// stored a cancel for it: however the cancel request was routed (to a
// worker cut off from NATS, or frozen), the owner hears it at once.
func (w *Worker) onCancelRecord(m *nats.Msg) {
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	if !ok {
		return
	}
	r := w.owned(runID)
	if r == nil {
		return
	}
	req, err := events.DecodeCancelRequest(m.Data)
	if err != nil {
		return // a malformed record cancels nothing here; the record's reader decides
	}
	r.requestCancel(req.Reason, m.Header.Get(events.HeaderCancelID), trace.SpanContextFromContext(tracing.Extract(context.Background(), m.Header)))
}

// recheckCancels re-reads the stored cancel records of the runs this worker
// owns: after a disconnect, a record stored meanwhile was not heard.
func (w *Worker) recheckCancels() {
	for _, r := range w.ownedRuns() {
		if r.ctx.Err() != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
		m, err := w.res.Cancels.GetLastMsgForSubject(ctx, w.names.CancelRecordSubject(r.id))
		cancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				r.logger().Warn().Err(err).Msg("re-read the run's cancel record after a reconnect")
			}
			continue
		}
		req, _ := events.DecodeCancelRequest(m.Data) // an unreadable body is a cancel without a note
		r.requestCancel(req.Reason, m.Header.Get(events.HeaderCancelID), trace.SpanContext{})
	}
}

// requestCancel stops the run for a cancel request heard directly, with
// the requester's note and the client's id of the cancel; from is the span
// of the cancel's answer (if traced), linked from the run's cancel span.
// Repeated requests are one cancel. It reports false when the run was
// handed off already (at shutdown): the cancel is no longer this worker's
// to apply.
func (r *run) requestCancel(note, id string, from trace.SpanContext) bool {
	r.mu.Lock()
	if r.handedOff {
		r.mu.Unlock()
		return false
	}
	r.cancelHeard = true
	if r.cancelNote == "" {
		r.cancelNote = note
	}
	if r.cancelID == "" {
		r.cancelID = id
	}
	if !r.cancelFrom.IsValid() {
		r.cancelFrom = from
	}
	r.mu.Unlock()
	if r.ctx.Err() == nil {
		r.logger().Info().Msg("cancel requested")
	}
	r.stop(ErrCancelRequested)
	if errors.Is(context.Cause(r.ctx), ErrShutdown) {
		// Heard while the run is handed off: its stop stays a hand-off.
		r.cancelAtHandOff()
	}
	return true
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
	var after func() // what is left to do once the reply is out
	if !ok {
		reply.Error = "subject " + m.Subject + " does not name a valid run id"
	} else if req, err := events.DecodeCancelRequest(m.Data); err != nil {
		reply = events.CancelReply{RunID: runID, Error: "invalid cancel request: " + err.Error()}
	} else {
		actx, cancel := context.WithTimeout(ctx, answerTimeout)
		reply, after = w.answerCancel(actx, runID, req, m)
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
	w.log.Info().Str("run_id", runID).Str("result", result).Str("error", reply.Error).Bool("unrecorded", reply.Unrecorded).Msg("cancel answered")
	if after != nil {
		after()
	}
}

// answerCancel decides what a cancel request does from the run's record
// (decideCancel) and does it; after, if not nil, is done once the reply is
// out. m is the request as received, passed on to the owner.
func (w *Worker) answerCancel(ctx context.Context, runID string, req events.CancelRequest, m *nats.Msg) (events.CancelReply, func()) {
	id := m.Header.Get(events.HeaderCancelID)
	if reply, after, ok := w.ownCancel(ctx, runID, req, m); ok {
		return reply, after
	}
	for range 3 {
		st, exists, err := w.readState(ctx, runID)
		if err != nil {
			if jserr.Unavailable(err) {
				// The record cannot be read now: the cancel still goes to
				// the owner, which applies it upstream and records it.
				return w.cancelUnrecorded(ctx, runID, req, m, err)
			}
			return events.CancelReply{RunID: runID, Error: err.Error()}, nil
		}
		switch decideCancel(st, exists) {
		case cancelRefuse:
			return events.CancelReply{RunID: runID, Error: fmt.Sprintf("the run's record has schema %d, newer than this worker's %d", st.Schema, stateSchema)}, nil
		case cancelReportFinished:
			return finishedReply(st, id), nil
		case cancelThroughRecord:
			return w.cancelTaken(ctx, runID, req, m)
		case cancelBeforeStart:
			reply, err := w.cancelNotTaken(ctx, runID, req, id, exists)
			if errors.Is(err, errClaimed) {
				continue // a worker took the run meanwhile
			}
			return reply, nil
		}
	}
	return events.CancelReply{RunID: runID, Error: "the run changed hands while the cancel was answered; send it again"}, nil
}

// finishedReply answers a cancel (the client's id, if it sent one) of a
// run that has ended (events.FinishedReply).
func finishedReply(st events.RunState, id string) events.CancelReply {
	return events.FinishedReply(st, id)
}

// cancelTaken records a cancel for a run a worker has taken and tells the
// owner; it replies before Foundry is called. If the record could not be
// written because the store is full, the owner is told all the same and
// the reply says unrecorded.
func (w *Worker) cancelTaken(ctx context.Context, runID string, req events.CancelRequest, m *nats.Msg) (events.CancelReply, func()) {
	id := m.Header.Get(events.HeaderCancelID)
	rec := events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: time.Now().UTC(), ID: id}
	st, err := w.states.Upsert(ctx, runID, func(s *events.RunState, exists bool) error {
		return recordCancel(s, exists, rec)
	})
	switch {
	case errors.Is(err, errFinished):
		return finishedReply(st, id), nil
	case errors.Is(err, errStillWaiting):
		// It paused since the record was read: nobody owns it, so the
		// cancel ends it here.
		reply, err := w.cancelNotTaken(ctx, runID, req, id, true)
		if err != nil {
			return events.CancelReply{RunID: runID, Error: "the run changed hands while the cancel was answered; send it again"}, nil
		}
		return reply, nil
	case err != nil && (jserr.StoreFull(err) || jserr.Unavailable(err)):
		return w.cancelUnrecorded(ctx, runID, req, m, err)
	case err != nil:
		return events.CancelReply{RunID: runID, Error: "record the cancel: " + err.Error()}, nil
	}
	reply := events.CancelReply{RunID: runID, Result: events.CancelCancelling}
	if r := w.owned(runID); r != nil {
		r.requestCancel(req.Reason, id, trace.SpanContextFromContext(ctx))
		return reply, nil
	}
	sc := trace.SpanContextFromContext(ctx)
	return reply, func() { w.noticeOwner(runID, m, sc, st.ResponseID) }
}

// cancelUnrecorded carries a cancel that could not be recorded (the store
// refuses writes, or the record cannot be read) to the run's owner, which
// cancels upstream first and records the cancel when it can.
func (w *Worker) cancelUnrecorded(ctx context.Context, runID string, req events.CancelRequest, m *nats.Msg, cause error) (events.CancelReply, func()) {
	w.log.Warn().Err(cause).Str("run_id", runID).Msg("the cancel could not be recorded; telling the owner all the same")
	reply := events.CancelReply{RunID: runID, Result: events.CancelCancelling, Unrecorded: true}
	responseID := ""
	if r := w.owned(runID); r != nil {
		if r.requestCancel(req.Reason, m.Header.Get(events.HeaderCancelID), trace.SpanContextFromContext(ctx)) {
			return reply, nil
		}
		// Handed off by this worker at shutdown: a next owner may hear
		// the notice, or else this worker calls Foundry's cancel itself.
		responseID = r.currentResponseID()
	}
	sc := trace.SpanContextFromContext(ctx)
	return reply, func() { w.noticeOwner(runID, m, sc, responseID) }
}

// noticeOwner tells the run's owner about a cancel (a request on the notice
// subject with the notice header, carrying the trace context of sc). If no
// owner acknowledges it within ownerAnswerTimeout and the record names a
// response, this worker calls Foundry's cancel once itself: the owner is
// dead, frozen or cut off, and the response must not bill on until the
// run's lease lapses. Calls for one run are not repeated while one is in
// flight.
func (w *Worker) noticeOwner(runID string, req *nats.Msg, sc trace.SpanContext, responseID string) {
	m := nats.NewMsg(w.names.NoticeSubject(runID))
	m.Data = req.Data
	m.Header.Set(events.HeaderCancelNotice, w.cfg.WorkerID)
	if id := req.Header.Get(events.HeaderCancelID); id != "" {
		m.Header.Set(events.HeaderCancelID, id)
	}
	tracing.Inject(trace.ContextWithSpanContext(context.Background(), sc), m.Header)
	ctx, cancel := context.WithTimeout(context.Background(), ownerAnswerTimeout)
	_, err := w.nc.RequestMsgWithContext(ctx, m)
	cancel()
	if err == nil || responseID == "" || w.isStopping() {
		return
	}
	if !w.cancelling.start(runID) {
		return
	}
	defer w.cancelling.done(runID)
	w.log.Warn().Str("run_id", runID).Str("response_id", responseID).
		Msg("no owner acknowledged the cancel; cancelling the response upstream from here")
	cctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if _, err := w.up.Cancel(cctx, responseID); err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Str("response_id", responseID).Msg("cancel upstream for an unresponsive owner; the next owner retries")
	}
}

// runSpan is the span a cancel's span links to: the run's own span if this
// worker owns the run or the run has stored an event (each carries the run
// span's context; the run may have ended or moved before the request is
// answered, since the owner also hears the cancel from the stored record),
// else the span its request was submitted under (from the job's headers),
// else none.
func (w *Worker) runSpan(ctx context.Context, runID string) trace.SpanContext {
	if r := w.owned(runID); r != nil {
		return r.span.SpanContext()
	}
	if sc := lastSpan(ctx, w.res.Events, w.names.EventSubject(runID)); sc.IsValid() {
		return sc
	}
	return lastSpan(ctx, w.res.Runs, w.names.RunSubject(runID))
}

// lastSpan is the trace context of the last message on subject in stream,
// or none.
func lastSpan(ctx context.Context, stream jetstream.Stream, subject string) trace.SpanContext {
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(tracing.Extract(context.Background(), m.Header))
}

// cancelNotTaken ends a run that no worker has taken (endJobless): the
// record says cancelled first (a worker that pulls the job now finds it
// finished), then run.cancelled is published and the job deleted. Without
// a job or a record the run is unknown.
func (w *Worker) cancelNotTaken(ctx context.Context, runID string, req events.CancelRequest, id string, exists bool) (events.CancelReply, error) {
	job, jobStream, err := w.queuedJob(ctx, runID) // the intake or its lane
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		job, err = nil, nil
	}
	if err != nil {
		return w.notTakenUnrecorded(runID, "look up the run's job", err), nil
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
		return w.notTakenUnrecorded(runID, "read the run's last event", err), nil
	}
	now := time.Now().UTC()
	rec := events.CancelRecord{Reason: events.ReasonRequested, Note: req.Reason, At: now, ID: id}
	end := events.RunEvent{RunID: runID, Seq: pos.Seq + 1, Type: events.TypeRunCancelled, Time: now,
		Reason: events.ReasonRequested, Usage: &events.Usage{}}
	var submitted time.Time
	if job != nil {
		submitted = job.Time
	}
	st, stored, err := w.endJobless(ctx, joblessEnding{
		runID: runID, pos: pos, submitted: submitted,
		what: "run.cancelled of a queued run",
		record: func() (events.RunState, error) {
			return w.states.Upsert(ctx, runID, func(s *events.RunState, exists bool) error {
				return cancelQueued(s, exists, w.cfg.WorkerID, digest, rec, waitingEnd(s, end), now)
			})
		},
	})
	switch {
	case errors.Is(err, errClaimed):
		return events.CancelReply{}, err
	case errors.Is(err, errFinished):
		return finishedReply(st, id), nil
	case err != nil:
		return w.notTakenUnrecorded(runID, "record the cancel", err), nil
	}
	if job != nil && stored {
		// The job is deleted, not settled: no worker fetched it. While
		// the event is not stored the job stays: the worker that pulls it
		// finds the run finished and publishes the event from the record.
		if err := jobStream.DeleteMsg(ctx, job.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			// A worker that pulls it finds the run finished and acks it.
			w.log.Warn().Err(err).Str("run_id", runID).Msg("delete the cancelled job")
		}
	}
	w.m.runsCancelled.WithLabelValues(events.ReasonRequested).Inc()
	return events.CancelReply{RunID: runID, Result: events.CancelCancelled, UpstreamStatus: st.End.UpstreamStatus}, nil
}

// notTakenUnrecorded answers a cancel of a run no worker has taken when
// the worker could not act on it (what failed, with err): if JetStream is
// slow or full, the cancel the client stored on the cancels stream is
// applied by the worker that takes the run, and the reply says cancelling,
// unrecorded; any other failure is the reply's error.
func (w *Worker) notTakenUnrecorded(runID, what string, err error) events.CancelReply {
	if !jserr.Unavailable(err) && !jserr.StoreFull(err) {
		return events.CancelReply{RunID: runID, Error: what + ": " + err.Error()}
	}
	w.log.Warn().Err(err).Str("run_id", runID).Msg(what + " for a cancel of a queued run; its stored cancel is applied when the run is taken")
	return events.CancelReply{RunID: runID, Result: events.CancelCancelling, Unrecorded: true}
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
