package consumer

// Runs that ask. A response that stops on approval requests or function
// calls pauses its run (pause), once the calls whose tools are served over
// NATS are answered (tools.go): the pause is recorded (status waiting, the
// step kept in the record), input.required is published, the run's request
// is kept on the inputs stream, and the job is acked: a waiting run holds
// no goroutine, connection or timer. Answers arrive as requests on
// <prefix>.input.<run_id> (onInput, any worker): each is stored once on the
// inputs stream (the first answer to an item stays), and once every item of
// the pause has one, the kept request is published again as the run's job
// (wake). The worker that takes it starts the next step (claimStep): a new
// response with previous_response_id and the answers. A cancel or a passed
// deadline ends a waiting run from the worker that sees it (answer.go,
// deadlines.go), with no upstream call: its last response has ended.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
)

// HeaderStep, on a job, names the step it continues (wake): the worker
// then looks for the pause's answers before it claims the run.
const headerStep = "Foundryq-Step"

// pause ends a step whose response stopped on items (ev, the
// input.required event): the function calls whose tools are served over
// NATS are called first (callTools); with every item answered the run goes
// on at once (continueRun), else it waits for its caller's answers to the
// rest, as described above.
func (r *run) pause(ev events.RunEvent, upstreamSeq int64, req events.RunRequest) {
	asked, ok := r.callTools(ev)
	switch {
	case !ok:
		return
	case len(asked) == 0:
		r.continueRun(ev)
		return
	}
	if err := r.w.keepRequest(r.hard, r.id, r.msg); err != nil {
		r.endRetryLater("keep the request of a run that waits for answers", err)
		return
	}
	step := events.Step{ResponseID: ev.ResponseID, Status: ev.Status, Usage: ev.Usage}
	inputTimeout := time.Duration(req.InputTimeoutSeconds) * time.Second
	if _, err := r.persist("record the pause", func(s *events.RunState, _ bool) error {
		return pauseRun(s, r.owner, step, ev.Items, inputTimeout, req.TimeoutSeconds == 0, time.Now().UTC())
	}); err != nil {
		r.endStepRefused(err, ev)
		return
	}
	required := ev
	required.Items = asked // the items the worker's tools answered are not asked
	r.rel.add(required, upstreamSeq)
	if err := r.rel.flush(r.hard); err != nil {
		// The record says waiting: the next delivery of the job finds it
		// so and publishes input.required again (repairPause).
		r.logger().Warn().Err(err).Msg("publish input.required; the job will be delivered again")
		return
	}
	r.logger().Info().Int("items", len(asked)).Msg("run waits for its caller's answers")
	r.w.m.runsPaused.Inc()
	r.end(ending{job: ack})
	// An answer stored before the ack could not wake the run (its job was
	// still there): look once more now that it is gone.
	r.w.wakeIfAnswered(r.hard, r.id)
}

// endCancelledBetweenSteps ends a run cancelled while none of its
// responses runs: its last one (responseID, with Foundry's final status
// and usage, which the earlier steps' usage is added to) has ended, and
// Foundry is not called.
func (r *run) endCancelledBetweenSteps(reason, responseID, status string, usage *events.Usage) {
	r.logger().Info().Str("reason", reason).Msg("cancel of a run between two steps; no response runs, Foundry is not called")
	if usage == nil {
		usage = &events.Usage{}
	}
	ev := events.RunEvent{Type: events.TypeRunCancelled, Reason: reason, ResponseID: responseID, UpstreamStatus: status, Usage: usage}
	r.w.m.runsCancelled.WithLabelValues(reason).Inc()
	r.end(endWith(ev, -1, status))
}

// mustCancelReason is the reason of the cancel on record, "requested" if
// it cannot be told.
func (r *run) mustCancelReason() string {
	if reason, ok := r.cancelReason(); ok {
		return reason
	}
	return events.ReasonRequested
}

// keepRequest stores the run's request on the inputs stream for the steps
// that follow (once: the first copy stays).
func (w *Worker) keepRequest(ctx context.Context, runID string, job jetstream.Msg) error {
	m := nats.NewMsg(w.names.ParkedRequestSubject(runID))
	m.Data = job.Data()
	for k, v := range job.Headers() {
		if !strings.HasPrefix(k, "Nats-") {
			m.Header[k] = v
		}
	}
	_, err := w.js.PublishMsg(ctx, m, jetstream.WithExpectStream(w.names.InputsStream()))
	if err != nil && !jserr.SubjectFull(err) {
		return err
	}
	return nil
}

// answered reports whether every item of a waiting run's pause has a
// stored answer.
func (w *Worker) answered(ctx context.Context, runID string, items []events.InputItem) (bool, error) {
	open, err := w.unanswered(ctx, runID, items, 1)
	return err == nil && len(open) == 0 && len(items) > 0, err
}

// unanswered lists the items of run runID that have no stored answer, in
// their order, stopping at most (0: no bound).
func (w *Worker) unanswered(ctx context.Context, runID string, items []events.InputItem, most int) ([]events.InputItem, error) {
	var open []events.InputItem
	for _, it := range items {
		_, err := w.res.Inputs.GetLastMsgForSubject(ctx, w.names.InputRecordSubject(runID, it.ID))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			if open = append(open, it); len(open) == most {
				return open, nil
			}
		case err != nil:
			return nil, err
		}
	}
	return open, nil
}

// wakeIfAnswered publishes a waiting run's kept request as its job again if
// every item of its pause is answered. A job already there (or one
// published for the same step within the dedupe window) is not repeated.
func (w *Worker) wakeIfAnswered(ctx context.Context, runID string) {
	st, exists, err := w.readState(ctx, runID)
	if err != nil || !exists || st.Status != events.StatusWaiting {
		return
	}
	if ok, err := w.answered(ctx, runID, st.Asked); err != nil || !ok {
		return
	}
	next := strconv.Itoa(st.Step + 1)
	if w.queueKept(ctx, runID, runID+".step."+next, next, "wake a run whose answers are in; the next answer or a repeat wakes it") {
		w.log.Info().Str("run_id", runID).Str("step", next).Msg("every answer is in; the run's next step is queued")
	}
}

// queueKept publishes a waiting run's kept request as its job again, with
// msgID (a job published with the same id within the dedupe window is not
// repeated) and, unless "", the step it continues (headerStep). It reports
// whether the job is queued; if not, failed is logged.
func (w *Worker) queueKept(ctx context.Context, runID, msgID, step, failed string) bool {
	kept, err := w.res.Inputs.GetLastMsgForSubject(ctx, w.names.ParkedRequestSubject(runID))
	if err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Msg("read the kept request of a waiting run: " + failed)
		return false
	}
	m := nats.NewMsg(w.names.RunSubject(runID))
	m.Data = kept.Data
	for k, v := range kept.Header {
		m.Header[k] = v
	}
	if step != "" {
		m.Header.Set(headerStep, step)
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	ack, err := w.js.PublishMsg(ctx, m, jetstream.WithExpectStream(w.names.RunsStream()))
	switch {
	case err != nil && !jserr.SubjectFull(err):
		w.log.Warn().Err(err).Str("run_id", runID).Msg(failed)
		return false
	case err == nil && ack.Duplicate:
		w.log.Info().Str("run_id", runID).Str("msg_id", msgID).Msg("the run's job was queued with this id already, within the dedupe window; not again")
		return false
	}
	return true
}

// wakeLooks is how many times a wake (wakesStep) is read before the worker
// takes the run's answers for incomplete: after 1, 2 and 3 s.
const wakeLooks = 4

// wakesStep reports whether the job continues the step the run waits
// after (headerStep is the record's step plus one): the waker read every
// answer of that pause.
func (r *run) wakesStep(st events.RunState) bool {
	return r.msg.Headers().Get(headerStep) == strconv.Itoa(st.Step+1)
}

// stepAnswered reports, for a job that continues a run (headerStep), that
// every item of its pause has an answer; false for any other job.
func (r *run) stepAnswered() bool {
	if r.msg.Headers().Get(headerStep) == "" {
		return false
	}
	st, exists, err := r.w.readState(r.hard, r.id)
	if err != nil || !exists || st.Status != events.StatusWaiting {
		return false
	}
	ok, err := r.w.answered(r.hard, r.id, st.Asked)
	return err == nil && ok
}

// answerInputs builds the input items of the next step from the stored
// answers of the pause (items), and publishes input.received for each.
func (r *run) answerInputs(ctx context.Context, items []events.InputItem) (json.RawMessage, error) {
	var input []map[string]any
	for _, it := range items {
		m, err := r.w.res.Inputs.GetLastMsgForSubject(ctx, r.w.names.InputRecordSubject(r.id, it.ID))
		if err != nil {
			return nil, fmt.Errorf("read the answer to %s: %w", it.ID, err)
		}
		a, err := events.DecodeInputAnswer(m.Data)
		if err != nil {
			return nil, fmt.Errorf("decode the answer to %s: %w", it.ID, err)
		}
		rec := &events.ReceivedInput{ID: it.ID, Kind: it.Kind}
		if a.Approve != nil {
			item := map[string]any{"type": "mcp_approval_response", "approval_request_id": it.ID, "approve": *a.Approve}
			if a.Reason != "" {
				item["reason"] = a.Reason
			}
			input = append(input, item)
			rec.Approve = a.Approve
		} else {
			input = append(input, map[string]any{"type": "function_call_output", "call_id": it.ID, "output": *a.Output})
			rec.OutputBytes = len(*a.Output)
		}
		r.rel.add(events.RunEvent{Type: events.TypeInputReceived, Input: rec}, -1)
	}
	return json.Marshal(input)
}

// onInput answers one answer request. A failure to read or write JetStream
// gets no reply: the client asks again, perhaps another worker.
func (w *Worker) onInput(ctx context.Context, m *nats.Msg) {
	runID, ok := w.names.RunIDFromSubject(m.Subject)
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	var reply events.InputReply
	if !ok {
		reply = events.InputReply{Result: events.InputInvalid, Error: "subject " + m.Subject + " does not name a valid run id"}
	} else if a, err := events.DecodeInputAnswer(m.Data); err != nil {
		reply = events.InputReply{Result: events.InputInvalid, Error: err.Error()}
	} else if reply, err = w.answer(ctx, runID, a, m.Data); err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Msg("answer to a waiting run not recorded; the caller will ask again")
		return
	}
	w.log.Info().Str("run_id", runID).Str("result", reply.Result).Str("error", reply.Error).Msg("input answered")
	w.m.inputAnswers.WithLabelValues(reply.Result).Inc()
	data, _ := json.Marshal(reply)
	if m.Reply != "" {
		_ = m.Respond(data)
	}
}

// answer records answer a (raw: its body) for run runID.
func (w *Worker) answer(ctx context.Context, runID string, a events.InputAnswer, raw []byte) (events.InputReply, error) {
	st, exists, err := w.readState(ctx, runID)
	if err != nil {
		return events.InputReply{}, err
	}
	switch {
	case !exists:
		return events.InputReply{Result: events.InputUnknownID, Error: "no such run"}, nil
	case st.Finished():
		return events.InputReply{Result: events.InputRunFinished}, nil
	}
	var item *events.InputItem
	for i := range st.Asked {
		if st.Asked[i].ID == a.ID {
			item = &st.Asked[i]
		}
	}
	if item == nil {
		return events.InputReply{Result: events.InputUnknownID}, nil
	}
	if item.Kind != a.Kind() {
		want := "approve"
		if item.Kind == events.InputFunctionCall {
			want = "output"
		}
		return events.InputReply{Result: events.InputInvalid, Error: fmt.Sprintf("%s is a %s: answer it with %s", a.ID, item.Kind, want)}, nil
	}
	if st.Status != events.StatusWaiting {
		// The step that answers it has started: the answer is in.
		return events.InputReply{Result: events.InputAlreadyAnswered}, nil
	}
	first, err := w.storeAnswer(ctx, runID, a.ID, raw)
	if jserr.StoreFull(err) {
		why := err.Error()
		if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) {
			why = apiErr.Description
		}
		return events.InputReply{Result: events.InputStoreFull, Error: fmt.Sprintf(
			"%s is full (%s); nothing was recorded: answer again once runs have ended or been answered", w.names.InputsStream(), why)}, nil
	}
	if err != nil {
		return events.InputReply{}, err
	}
	result := events.InputAccepted
	if !first {
		result = events.InputAlreadyAnswered
	}
	w.wakeIfAnswered(ctx, runID)
	return events.InputReply{Result: result}, nil
}

// storeAnswer stores raw (an events.InputAnswer) as the answer to item id
// of run runID on the inputs stream, unless the item has one already
// (first is then false): the first answer stays, whoever gave it (the
// caller, or a function tool served over NATS).
func (w *Worker) storeAnswer(ctx context.Context, runID, id string, raw []byte) (first bool, err error) {
	msg := nats.NewMsg(w.names.InputRecordSubject(runID, id))
	msg.Data = raw
	_, err = w.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(w.names.InputsStream()))
	switch {
	case jserr.SubjectFull(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// repairPause publishes input.required again for a waiting run whose last
// stored event is not it (the owner that paused it stopped between the
// record and the event).
func (r *run) repairPause(st events.RunState, pos position) {
	if pos.Type == events.TypeInputRequired || len(st.Asked) == 0 || len(st.Steps) == 0 {
		return
	}
	asked, err := r.w.unanswered(r.hard, r.id, st.Asked, 0)
	switch {
	case err != nil:
		r.logger().Warn().Err(err).Msg("read the answers of a waiting run; asking for every item of its pause")
		asked = st.Asked
	case len(asked) == 0:
		return // every item is answered: the wake follows
	}
	last := st.Steps[len(st.Steps)-1]
	ev := events.RunEvent{RunID: r.id, Seq: pos.Seq + 1, Type: events.TypeInputRequired, Time: time.Now().UTC(),
		ResponseID: last.ResponseID, Status: last.Status, Items: asked, Usage: last.Usage}
	if err := r.w.publishEnd(r.hard, r.id, pos, ev, *r.logger()); err != nil {
		r.logger().Warn().Err(err).Msg("publish input.required of a waiting run again")
	}
}

// withSteps adds the usage of a run's earlier steps to that of its last
// response: a run's usage is that of every response it made. nil stays nil
// (usage unknown).
func withSteps(steps []events.Step, u *events.Usage) *events.Usage {
	if u == nil || len(steps) == 0 {
		return u
	}
	sum := *u
	for _, st := range steps {
		if st.Usage != nil {
			sum.InputTokens += st.Usage.InputTokens
			sum.OutputTokens += st.Usage.OutputTokens
			sum.TotalTokens += st.Usage.TotalTokens
			sum.CachedTokens += st.Usage.CachedTokens
			sum.ReasoningTokens += st.Usage.ReasoningTokens
		}
	}
	return &sum
}

// waitingEnd completes the terminal event of a run ended while it waits
// (or while queued: end is returned as it is): its usage is that of its
// steps, Foundry's last word that of its last response.
func waitingEnd(s *events.RunState, end events.RunEvent) events.RunEvent {
	if s.Status != events.StatusWaiting || len(s.Steps) == 0 {
		return end
	}
	end.Usage = withSteps(s.Steps, &events.Usage{})
	end.UpstreamStatus = s.Steps[len(s.Steps)-1].Status
	return end
}

// endWaiting ends a waiting run whose deadline (run.cancelled, reason
// timeout) or input deadline (run.failed input_timeout) has passed
// (endJobless: its job was acked when it paused); a run whose deadlines
// have not passed, or that no longer waits, is left alone. It reports
// whether the run is settled: not if its end could not be stored or
// recorded (NATS unavailable, the store full), to be tried again.
func (w *Worker) endWaiting(ctx context.Context, runID string, st events.RunState) bool {
	now := time.Now().UTC()
	var rec *events.CancelRecord
	end := events.RunEvent{RunID: runID, Time: now}
	switch {
	case st.Deadline != nil && !now.Before(*st.Deadline):
		rec = &events.CancelRecord{Reason: events.ReasonTimeout, Note: "deadline passed while the run waited for answers", At: now}
		end.Type, end.Reason = events.TypeRunCancelled, events.ReasonTimeout
	case st.InputDeadline != nil && !now.Before(*st.InputDeadline):
		end = failedWith("", events.CodeInputTimeout, false, fmt.Sprintf("no answer to %d item(s) the run asked for within its input_timeout_seconds (waiting since %s)",
			len(st.Asked), st.WaitingSince.Format(time.RFC3339)))
		end.RunID, end.Time = runID, now
	default:
		return true
	}
	pos, err := w.tail(ctx, runID)
	if err != nil {
		w.log.Warn().Err(err).Str("run_id", runID).Msg("read the last event of a waiting run past its deadline; tried again")
		return false
	}
	end.Seq = pos.Seq + 1
	st, stored, err := w.endJobless(ctx, joblessEnding{
		runID: runID, pos: pos,
		what: "the end of a waiting run past its deadline",
		record: func() (events.RunState, error) {
			st, err := w.states.Update(ctx, runID, func(s *events.RunState) error {
				return endWaitingRun(s, w.cfg.WorkerID, rec, end, now)
			})
			if err == nil {
				w.m.deadlinesEnforced.Inc()
			}
			return st, err
		},
	})
	if err != nil {
		if isDecision(err) {
			return true
		}
		w.log.Warn().Err(err).Str("run_id", runID).Msg("end a waiting run past its deadline; tried again")
		return false
	}
	if !stored {
		// Nothing else would: a waiting run has no job. The publish may
		// have spent ctx.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		w.queueKept(qctx, runID, runID+".end", "", "queue a job to publish the end of a waiting run if this worker cannot")
		cancel()
	}
	w.log.Info().Str("run_id", runID).Str("type", string(st.End.Type)).Msg("waiting run ended: its deadline passed")
	return true
}
