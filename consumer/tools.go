package consumer

// Function tools served over NATS (the protocol: events/tools.go). A
// response that stops on function calls does not at once ask the run's
// caller: its owner, still holding the job (its lease renewed as while
// streaming), sends each call whose tool has a service to it, all at once
// (callTools). Each output is stored as the call's answer on the inputs
// stream, where a caller's answer goes (the first answer stays), before
// the run goes on: an owner that takes the run over after a crash finds
// the same calls in the response, and sends only those with no stored
// answer. A call nobody serves (no responders) is asked of the caller
// with input.required, with the approvals (pause); with none left, the run
// goes on to its next step at once (continueRun). A call that fails, times
// out, or whose service stops answering fails the run. A stop of the run
// while calls are in flight cancels each of them at once
// (<prefix>.tools.cancel.<run_id>), waits at most ToolCancelGrace for
// their services, and ends the run as its cause says (endToolsStopped).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/foundryq/foundryq/events"
)

// toolSilence is how long a service that sent progress may then stay
// silent (three missed beats of one a second) before the worker takes it
// for dead.
const toolSilence = 3 * time.Second

// toolTries bounds the tries of one call of an idempotent tool.
const toolTries = 3

// toolFlushTimeout bounds the round trip after a call is sent that tells
// whether anybody serves the tool.
const toolFlushTimeout = 5 * time.Second

// toolEnd says how a call ended; it is the result label of the
// foundryq_tool_calls_total metric.
type toolEnd string

const (
	toolCompleted toolEnd = "completed" // the service answered an output
	toolUnserved  toolEnd = "unserved"  // nobody serves the tool: the caller is asked
	toolError     toolEnd = "error"     // the service answered an error, or an output that cannot be used
	toolTimedOut  toolEnd = "timeout"   // no answer within the tool's timeout
	toolDead      toolEnd = "dead"      // the service stopped answering in the middle of the call
	toolGivenUp   toolEnd = "cancelled" // the worker gave the call up: the run stopped, or another call failed
	toolUnsent    toolEnd = "unsent"    // NATS failed the worker: the call could not be sent
)

// failed reports an end that fails the run.
func (e toolEnd) failed() bool { return e == toolError || e == toolTimedOut || e == toolDead }

// toolResult is how one call ended.
type toolResult struct {
	item    events.InputItem
	end     toolEnd
	output  string        // with toolCompleted
	message string        // why, for a failure
	took    time.Duration // from the first send
}

// code is the error code of a failed call.
func (res toolResult) code() string {
	if res.end == toolTimedOut {
		return events.CodeToolTimeout
	}
	return events.CodeToolFailed
}

// callTools sends the function calls of ev (a response that stopped on
// items) whose tools have a service, and records their outputs. It
// returns the items left to ask of the caller; false if the run ended or
// left this worker instead.
func (r *run) callTools(ev events.RunEvent) ([]events.InputItem, bool) {
	if r.w.cfg.DisableServedTools || !slices.ContainsFunc(ev.Items, isFunctionCall) {
		return ev.Items, true
	}
	if r.ctx.Err() != nil {
		r.endToolsStopped(ev)
		return nil, false
	}
	// Calls a previous owner's tools answered are not sent again.
	open, err := r.w.unanswered(r.hard, r.id, ev.Items, 0)
	if err != nil {
		r.endUpstreamError(outcome{err: fmt.Errorf("read the stored answers: %w", err), op: opState, upstreamSeq: -1})
		return nil, false
	}
	var calls, asked []events.InputItem
	for _, it := range open {
		if isFunctionCall(it) {
			calls = append(calls, it)
		}
	}
	answered, ok := r.runCalls(ev, calls)
	if !ok {
		return nil, false
	}
	for _, it := range open {
		if !answered[it.ID] {
			asked = append(asked, it)
		}
	}
	return asked, true
}

func isFunctionCall(it events.InputItem) bool { return it.Kind == events.InputFunctionCall }

// callBatch is the calls of one response in flight.
type callBatch struct {
	results  chan toolResult
	pending  int
	giveUp   context.CancelFunc
	answered map[string]bool
	failed   *toolResult // the first call that failed
	natsErr  error       // a call that could not be sent, or an output that could not be stored
	stopped  bool        // given up because the run stopped
}

// runCalls sends every call at once and settles each as it ends. A
// failure gives the other calls up and ends the run; so does a stop of
// the run, except at shutdown, which lets the calls run until shortly
// before the shutdown timeout (their answers spare the next owner the
// calls). It returns the ids of the calls answered; false if the run
// ended.
func (r *run) runCalls(ev events.RunEvent, calls []events.InputItem) (map[string]bool, bool) {
	ctx, giveUp := context.WithCancel(r.hard)
	defer giveUp()
	b := callBatch{results: make(chan toolResult, len(calls)), pending: len(calls), giveUp: giveUp, answered: make(map[string]bool)}
	for _, it := range calls {
		go func() { b.results <- r.callTool(ctx, it) }()
	}
	r.gather(&b)
	_, cancelled := cancelOf(r.ctx)
	switch {
	case r.hard.Err() != nil:
		return nil, false // aborted: the job's lease lapses
	case b.stopped, cancelled:
		r.endToolsStopped(ev)
	case b.natsErr != nil:
		// Not the run's fault: it is retried, by this worker or another.
		r.endUpstreamError(outcome{err: b.natsErr, op: opState, upstreamSeq: -1})
	case b.failed != nil:
		r.endToolFailed(*b.failed)
	default:
		return b.answered, true
	}
	return nil, false
}

// gather settles the calls of b as they end, until none is in flight.
func (r *run) gather(b *callBatch) {
	stop := r.ctx.Done()
	var handoff <-chan time.Time
	for b.pending > 0 {
		select {
		case res := <-b.results:
			b.pending--
			r.settleCall(b, res)
		case <-stop:
			stop = nil
			if errors.Is(context.Cause(r.ctx), ErrShutdown) && !r.w.nc.IsClosed() {
				t := time.NewTimer(time.Until(r.w.handoffDeadline()))
				defer t.Stop()
				handoff = t.C
				continue
			}
			b.stopped = true
			b.giveUp()
		case <-handoff:
			b.stopped = true
			b.giveUp()
		}
	}
}

// settleCall records what one call came to: an output is stored as the
// call's answer, then tool.completed; a failure is tool.failed, and gives
// the other calls up.
func (r *run) settleCall(b *callBatch, res toolResult) {
	r.w.m.toolCallEnded(res)
	tool := &events.Tool{Type: "function", Name: res.item.Name, CallID: res.item.ID}
	switch {
	case res.end == toolUnsent:
		b.natsFailed(fmt.Errorf("send the call %s of tool %s: %s", res.item.ID, res.item.Name, res.message))
	case res.end == toolCompleted:
		if err := r.storeOutput(res); err != nil {
			b.natsFailed(err)
			return
		}
		b.answered[res.item.ID] = true
		output, cut := cutText(res.output, maxTextLen)
		r.rel.add(events.RunEvent{Type: events.TypeToolCompleted, Tool: tool, Output: output, OutputTruncated: cut}, -1)
	case res.end.failed():
		r.logger().Warn().Str("tool", res.item.Name).Str("call_id", res.item.ID).Str("end", string(res.end)).Msg(res.message)
		r.rel.add(events.RunEvent{Type: events.TypeToolFailed, Tool: tool, Error: &events.Error{Code: res.code(), Message: truncateText(res.message)}}, -1)
		if b.failed == nil {
			b.failed = &res
			b.giveUp()
		}
	}
}

// natsFailed notes the first NATS failure of the batch, and gives the other
// calls up.
func (b *callBatch) natsFailed(err error) {
	if b.natsErr == nil {
		b.natsErr = err
		b.giveUp()
	}
}

// storeOutput stores a call's output as its answer (the first one stays).
func (r *run) storeOutput(res toolResult) error {
	raw, err := json.Marshal(events.InputAnswer{ID: res.item.ID, Output: &res.output})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.hard, answerTimeout)
	defer cancel()
	if _, err := r.w.storeAnswer(ctx, r.id, res.item.ID, raw); err != nil {
		return fmt.Errorf("store the output of tool %s (call %s): %w", res.item.Name, res.item.ID, err)
	}
	return nil
}

// endToolFailed ends the run whose call res failed.
func (r *run) endToolFailed(res toolResult) {
	retryable := res.end != toolError // the service may answer a new run
	r.end(endWith(failedWith(r.currentResponseID(), res.code(), retryable, fmt.Sprintf("tool %s: %s", res.item.Name, res.message)), -1, ""))
}

// endToolsStopped ends a run stopped while (or just before) its function
// tools were called, as the stop's cause says: a cancel (requested, the
// deadline, abandonment) ends it as a cancel between two steps does, its
// response having ended; any other cause (a shutdown hands it off) as if
// its reader had been interrupted having read nothing more.
func (r *run) endToolsStopped(ev events.RunEvent) {
	reason, cancelled := cancelOf(r.ctx)
	if !cancelled {
		read := make(chan outcome, 1)
		read <- outcome{upstreamSeq: -1}
		r.interrupt(read, func() {})
		return
	}
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	r.recordCancel(ctx, r.heardCancel(reason))
	cancel()
	r.endCancelledBetweenSteps(reason, ev.ResponseID, ev.Status, ev.Usage)
}

// cancelOf reports whether ctx (a run's) ended for a cancel (requested,
// the deadline, abandonment), and its reason.
func cancelOf(ctx context.Context) (reason string, ok bool) {
	cause := context.Cause(ctx)
	if !errors.Is(cause, ErrCancelRequested) && !errors.Is(cause, ErrRunTimeout) && !errors.Is(cause, ErrAbandoned) {
		return "", false
	}
	return reasonOf(cause), true
}

// heardCancel is the record of a cancel of the run for reason, with the
// requester's note and id when the cancel was heard directly.
func (r *run) heardCancel(reason string) events.CancelRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return events.CancelRecord{Reason: reason, Note: r.cancelNote, At: time.Now().UTC(), ID: r.cancelID}
}

// continueRun goes on to the run's next step, every item of its response
// being answered (by served tools): the events are stored, the step is
// recorded (nextStep), and the job given back at once, so that its next
// delivery, on any worker, creates the next step's response. A crash
// before the record only delays this: the next owner finds the answers.
func (r *run) continueRun(ev events.RunEvent) {
	if err := r.rel.flush(r.hard); err != nil {
		r.logger().Warn().Err(err).Msg("store the run's events before its next step; the job will be delivered again")
		return
	}
	step := events.Step{ResponseID: ev.ResponseID, Status: ev.Status, Usage: ev.Usage}
	if _, err := r.persist("record the step", func(s *events.RunState, _ bool) error {
		return nextStep(s, r.owner, step, ev.Items)
	}); err != nil {
		r.endStepRefused(err, ev)
		return
	}
	r.logger().Info().Int("items", len(ev.Items)).Msg("every call answered by its tool; the run's next step is queued")
	// No longer this worker's: a delivery that comes back before handle
	// returns must not be taken for a repeat of this one.
	r.w.unregister(r)
	r.end(retryAfter(0))
}

// endStepRefused ends a run whose step could not be recorded at its end
// (pauseRun, nextStep): a cancel on record ends the run; anything else
// leaves the job to be delivered again.
func (r *run) endStepRefused(err error, ev events.RunEvent) {
	if errors.Is(err, errCancelPending) {
		// Cancelled as the step ended: the cancel ends the run.
		r.endCancelledBetweenSteps(r.mustCancelReason(), ev.ResponseID, ev.Status, ev.Usage)
		return
	}
	r.logger().Warn().Err(err).Msg("record the end of the step; the job will be delivered again")
	r.end(ending{job: leave})
}

// toolCall is one call in flight.
type toolCall struct {
	item     events.InputItem
	inbox    string
	replies  chan *nats.Msg
	deadline time.Time // when the worker gives it up
	early    *nats.Msg // a reply read while checking that the tool is served
}

// callTool sends one call to its tool's service and waits for its end.
// ctx ends when the worker gives the call up.
func (r *run) callTool(ctx context.Context, it events.InputItem) toolResult {
	start := time.Now()
	c := &toolCall{item: it, inbox: r.w.nc.NewInbox(), replies: make(chan *nats.Msg, 64),
		deadline: start.Add(r.w.cfg.toolTimeout(it.Name))}
	sub, err := r.w.nc.ChanSubscribe(c.inbox, c.replies)
	if err != nil {
		return toolResult{item: it, end: toolUnsent, message: "subscribe to the call's replies: " + err.Error()}
	}
	defer func() { _ = sub.Unsubscribe() }()
	res := r.sendFirst(ctx, c)
	res.item, res.took = it, time.Since(start)
	return res
}

// sendFirst sends the call for the first time: an unserved tool ends it
// there; otherwise tool.started, and the call is awaited.
func (r *run) sendFirst(ctx context.Context, c *toolCall) toolResult {
	served, err := r.send(c)
	switch {
	case err != nil:
		return toolResult{end: toolUnsent, message: err.Error()}
	case !served:
		r.logger().Info().Str("tool", c.item.Name).Str("call_id", c.item.ID).Msg("no service serves the tool; its call is asked of the caller")
		return toolResult{end: toolUnserved}
	}
	r.rel.add(events.RunEvent{Type: events.TypeToolStarted, Tool: &events.Tool{Type: "function", Name: c.item.Name, CallID: c.item.ID}}, -1)
	return r.await(ctx, c)
}

// send publishes the call's request and reports whether anybody serves
// it: once the server has answered a flush, a "no responders" status
// would have arrived before its answer.
func (r *run) send(c *toolCall) (served bool, err error) {
	m := nats.NewMsg(r.w.names.ToolSubject(c.item.Name))
	m.Reply = c.inbox
	m.Data = []byte(c.item.Arguments)
	m.Header.Set(events.HeaderToolRunID, r.id)
	m.Header.Set(events.HeaderToolCallID, c.item.ID)
	m.Header.Set(events.HeaderToolName, c.item.Name)
	m.Header.Set(events.HeaderToolDeadline, c.deadline.UTC().Format(time.RFC3339Nano))
	if err := r.w.nc.PublishMsg(m); err != nil {
		return false, err
	}
	if err := r.w.nc.FlushTimeout(toolFlushTimeout); err != nil {
		return false, err
	}
	select {
	case reply := <-c.replies:
		if noResponders(reply) {
			return false, nil
		}
		c.early = reply
	default:
	}
	return true, nil
}

// await waits for the call's final answer, its timeout, or the worker
// giving it up. Progress messages keep it going; a service that sent
// them and then falls silent for toolSilence is dead: an idempotent
// tool's call is sent again (to another instance, at most toolTries in
// all), any other's fails.
func (r *run) await(ctx context.Context, c *toolCall) toolResult {
	timeout := time.NewTimer(time.Until(c.deadline))
	defer timeout.Stop()
	silence := time.NewTimer(toolSilence)
	silence.Stop() // armed by the first progress message
	defer silence.Stop()
	for tries := 1; ; {
		var m *nats.Msg
		if m, c.early = c.early, nil; m == nil {
			select {
			case m = <-c.replies:
			case <-silence.C:
				if !r.w.cfg.idempotent(c.item.Name) || tries == toolTries {
					r.cancelCall(c)
					return toolResult{end: toolDead, message: fmt.Sprintf("the service stopped answering (no progress for %s, %d tries)", toolSilence, tries)}
				}
				tries++
				r.logger().Warn().Str("tool", c.item.Name).Str("call_id", c.item.ID).Int("try", tries).Msg("the tool's service stopped answering; sending the call again")
				if served, err := r.send(c); err != nil {
					return toolResult{end: toolUnsent, message: err.Error()}
				} else if !served {
					return toolResult{end: toolDead, message: "the service stopped answering, and no other instance serves the tool"}
				}
				continue
			case <-timeout.C:
				r.cancelCall(c)
				return toolResult{end: toolTimedOut, message: fmt.Sprintf("no answer within %s (cancelled)", r.w.cfg.toolTimeout(c.item.Name))}
			case <-ctx.Done():
				r.cancelCall(c)
				r.graceWait(c)
				return toolResult{end: toolGivenUp}
			}
		}
		if m.Header.Get(events.HeaderToolStatus) == events.ToolStatusWorking {
			silence.Reset(toolSilence)
			continue
		}
		return finalAnswer(c, m)
	}
}

// finalAnswer is what the service's final answer m to call c says.
func finalAnswer(c *toolCall, m *nats.Msg) toolResult {
	if noResponders(m) {
		return toolResult{end: toolDead, message: "no instance of the service serves the tool any more"}
	}
	if desc := m.Header.Get(micro.ErrorHeader); desc != "" {
		msg := desc
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			msg += " (code " + code + ")"
		}
		if len(m.Data) > 0 {
			msg += ": " + string(m.Data)
		}
		return toolResult{end: toolError, message: msg}
	}
	output := string(m.Data)
	if err := (events.InputAnswer{ID: c.item.ID, Output: &output}).Validate(); err != nil {
		return toolResult{end: toolError, message: "the service's output cannot be sent on: " + err.Error()}
	}
	return toolResult{end: toolCompleted, output: output}
}

// cancelCall tells every instance of the tool's service to stop the call.
func (r *run) cancelCall(c *toolCall) {
	m := nats.NewMsg(r.w.names.ToolCancelSubject(r.id))
	m.Header.Set(events.HeaderToolCallID, c.item.ID)
	if err := r.w.nc.PublishMsg(m); err != nil {
		r.logger().Warn().Err(err).Str("tool", c.item.Name).Str("call_id", c.item.ID).Msg("publish the cancel of a tool call")
	}
}

// graceWait gives a cancelled call's service ToolCancelGrace to answer,
// so that the run does not end while the tool still works, if it stops
// in time.
func (r *run) graceWait(c *toolCall) {
	grace := time.NewTimer(r.w.cfg.ToolCancelGrace)
	defer grace.Stop()
	for {
		select {
		case m := <-c.replies:
			if m.Header.Get(events.HeaderToolStatus) != events.ToolStatusWorking {
				return
			}
		case <-grace.C:
			return
		case <-r.hard.Done():
			return
		}
	}
}

// noResponders reports the server's "no responders" status: nobody
// listened on the subject a request went to.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// cutText cuts s to at most n bytes, at a character boundary; cut reports
// whether it did.
func cutText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n], true
}
