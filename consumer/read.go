package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/retry"
)

// maxStreamBreaks is how often a run re-attaches to a response's stream
// before it falls back to polling.
const maxStreamBreaks = 5

// outcome is how the upstream reader of a run stopped.
type outcome struct {
	terminal          *events.RunEvent  // run.completed or run.failed reported by Foundry
	upstreamSeq       int64             // sequence number of the upstream terminal event, -1 if none
	upstreamStatus    string            // Foundry's final status
	cancelledUpstream *foundry.Response // Foundry reports the response cancelled on its own
	err               error             // the reader stopped without an end
	op                string            // what failed: create, resume, get, or state (the state bucket)
	noResponse        bool              // no response exists upstream (the create was refused, or never sent)
	rateLimited       bool              // the create was refused for rate limits (not a failed attempt)
	streamLost        bool              // a foreground response could not be followed to its end
	invalid           bool              // the request cannot run (a secret reference that does not resolve)
	lost              bool              // a create may have started a response whose id is unknown
	lostOwnership     bool              // the run's record says another worker owns the run
}

// ended reports whether the reader stopped on an end of its own, not cut
// short by the run's stop: Foundry ended the response (or cancelled it),
// or the run's record names another owner.
func (o outcome) ended() bool {
	return o.terminal != nil || o.cancelledUpstream != nil || o.lostOwnership
}

// opState marks an outcome caused by the state bucket, not by Foundry.
const opState = "state"

// read starts the run upstream (create, or re-attach to the response the
// run's record names) and relays its events until Foundry reports an end,
// ctx ends, or the response cannot be reached. Terminal events are
// returned, never relayed: the run decides the one terminal event.
//
// The run's goroutine spends the response's life parked in relayStream,
// under read, drive, execute and handle: each keeps its frame small, the
// work before and after the stream done in functions of their own, so that
// the parked goroutine uses under a quarter of an 8 KiB stack and the
// collector shrinks its stack to that (it halves a stack only then). With
// one large frame more on that path a streaming run holds a 16 KiB stack.
func (r *run) read(ctx context.Context, pos position) outcome {
	s, last, out := r.open(ctx, pos)
	if s == nil {
		return out
	}
	var stall stallWatch
	for breaks := 1; ; breaks++ {
		out, ended := r.relayStream(s, &last)
		_ = s.Close()
		if ended {
			return out
		}
		if s, out = r.reattach(ctx, out.err, last, breaks, &stall); s == nil {
			return out
		}
	}
}

// open starts the run's response upstream, or re-attaches to the one its
// record names; last is the upstream sequence number relayed last. With a
// nil stream, out says why it did not start.
func (r *run) open(ctx context.Context, pos position) (s *foundry.Stream, last int64, out outcome) {
	st := r.lastState()
	id := st.ResponseID
	if id == "" {
		// A new response (a later step's): its events from the first.
		s, out = r.create(ctx, r.req)
		return s, -1, out
	}
	last = pos.UpstreamSeq
	seen := time.Now()
	if st.CreateStartedAt != nil {
		seen = *st.CreateStartedAt
	}
	r.reattached(id, seen)
	r.logger().Info().Int64("after", last).Msg("re-attaching to the run's response")
	s, err := r.resume(ctx, id, last)
	if err != nil {
		if ctx.Err() != nil {
			return nil, last, outcome{err: context.Cause(ctx), op: "resume", upstreamSeq: -1}
		}
		r.w.m.runsStarted.WithLabelValues("polled").Inc()
		return nil, last, r.cannotResume(ctx, id, err)
	}
	r.w.m.runsStarted.WithLabelValues("resumed").Inc()
	return s, last, outcome{}
}

// reattached takes up the response id the run's record names, seen at
// seen, and announces it with run.started as a re-attach: the publish
// fences out a previous owner that may still be storing events.
func (r *run) reattached(id string, seen time.Time) {
	r.setResponseID(id, seen)
	r.rel.add(events.RunEvent{Type: events.TypeRunStarted, ResponseID: id, Attempt: r.owner.attempt, Worker: r.w.cfg.WorkerID}, -1)
}

// stallWatch counts a response's idle timeouts in a row with no upstream
// event between them.
type stallWatch struct {
	count int
	at    int64 // the upstream sequence number at the last one
}

// reattach settles a stream that stopped without an end (streamErr says
// why) after breaks streams: it re-attaches to the response after last,
// or, with a nil stream, out says how the run's reading ends.
func (r *run) reattach(ctx context.Context, streamErr error, last int64, breaks int, stall *stallWatch) (s *foundry.Stream, out outcome) {
	if ctx.Err() != nil {
		return nil, outcome{err: context.Cause(ctx), upstreamSeq: -1}
	}
	id := r.currentResponseID()
	if id == "" {
		// The stream ended before response.created: a response may exist
		// whose id we will never learn.
		return nil, outcome{err: fmt.Errorf("stream ended before the response id was known: %w", streamErr), op: "create", lost: true, upstreamSeq: -1}
	}
	if r.isForeground() {
		// Not a background response: it cannot be re-attached to.
		return nil, r.cannotResume(ctx, id, fmt.Errorf("%w: %w", foundry.ErrStreamingNotEnabled, streamErr))
	}
	// A stream also ends without a terminal event when the response was
	// cancelled by someone else, and an error event does not say whether
	// the response goes on; a stream that keeps breaking is not worth
	// re-attaching to. All are settled by asking Foundry, then polling.
	resp, err := r.w.up.Get(ctx, id)
	if (err == nil && resp.Terminal()) || breaks > maxStreamBreaks {
		r.logger().Info().Err(streamErr).Int("breaks", breaks).Msg("upstream stream ended without a terminal event; polling the response")
		return nil, r.poll(ctx, id, 0)
	}
	if errors.Is(streamErr, foundry.ErrStreamIdle) {
		// Silent, not even a keepalive: re-attach once; silent again
		// with no progress meanwhile, and the run gives it up.
		if last != stall.at {
			stall.count = 0
		}
		stall.count++
		stall.at = last
		r.markStalled(true)
		if stall.count > 1 {
			status := "unknown"
			if err == nil {
				status = resp.Status
			}
			return nil, outcome{err: fmt.Errorf("%w: %w, again after re-attaching, while Foundry reports it %s", errUpstreamStalled, streamErr, status), op: "resume", upstreamSeq: -1}
		}
		r.logger().Warn().Err(streamErr).Msg("upstream stream silent; re-reading the response and re-attaching once")
	} else {
		r.logger().Info().Err(streamErr).Int64("after", last).Msg("upstream stream broke; re-attaching")
	}
	if s, err = r.resume(ctx, id, last); err != nil {
		if ctx.Err() != nil {
			return nil, outcome{err: context.Cause(ctx), upstreamSeq: -1}
		}
		return nil, r.cannotResume(ctx, id, err)
	}
	return s, outcome{}
}

// create starts the run's one upstream response. "Create started" is
// recorded durably before the request is sent: a later owner that finds it
// without a response id never creates again. A create the service answered
// with an HTTP error started nothing, and the mark is cleared; any other
// failure leaves it (the response may exist).
func (r *run) create(ctx context.Context, req events.RunRequest) (*foundry.Stream, outcome) {
	cr := createRequest(req, r.id)
	if st := r.lastState(); len(st.Steps) > 0 {
		// A later step: it continues the last response with the answers.
		input, err := r.answerInputs(ctx, st.Asked)
		if err != nil {
			return nil, outcome{err: err, op: opState, noResponse: true, upstreamSeq: -1}
		}
		cr.Input, cr.PreviousResponseID = input, st.Steps[len(st.Steps)-1].ResponseID
	}
	tools, err := r.w.cfg.Secrets.ResolveTools(cr.Tools)
	if err != nil {
		return nil, outcome{err: err, invalid: true, noResponse: true, upstreamSeq: -1}
	}
	cr.Tools = tools
	deployment := deploymentOf(req)
	probe, err := r.w.limiter.wait(ctx, r.ctx, deployment)
	if err != nil {
		return nil, outcome{err: err, noResponse: true, upstreamSeq: -1}
	}
	sent := false
	defer func() {
		if !sent {
			r.w.limiter.done(deployment, probe, false, 0) // let the next create test the gate
		}
	}()
	if r.ctx.Err() != nil {
		return nil, outcome{err: context.Cause(r.ctx), noResponse: true, upstreamSeq: -1}
	}
	mark := time.Now().UTC() // the same on every retry of the write
	if _, err := r.persist("record the create", func(s *events.RunState, _ bool) error {
		return startCreate(s, r.owner, mark)
	}); err != nil {
		return nil, r.stateOutcome(err)
	}
	if r.ctx.Err() != nil {
		// Stopped while the mark was written: nothing was sent.
		r.clearCreate()
		return nil, outcome{err: context.Cause(r.ctx), noResponse: true, upstreamSeq: -1}
	}
	r.markCreateSent()
	sent = true
	r.createAt = time.Now()
	s, err := r.w.up.Create(ctx, cr)
	limited := errors.Is(err, foundry.ErrRateLimited)
	r.w.limiter.done(deployment, probe, limited, retryDelay(err, 0))
	if limited {
		r.w.rateLimited(ctx, req, retryDelay(err, 0)) // for the whole fleet (budget.go)
	} else if err == nil {
		r.w.observeRateLimit(ctx, req, s.RateLimit())
	}
	if err != nil {
		if createAnswered(err) {
			r.clearCreate()
			return nil, outcome{err: fmt.Errorf("create response: %w", err), op: "create", noResponse: true, rateLimited: limited, upstreamSeq: -1}
		}
		return nil, outcome{err: fmt.Errorf("create response: %w", err), op: "create", lost: true, upstreamSeq: -1}
	}
	r.w.m.runsStarted.WithLabelValues("created").Inc()
	return s, outcome{}
}

// clearCreate records that no response was started (createRefused).
func (r *run) clearCreate() {
	if _, err := r.persist("clear the create mark", func(s *events.RunState, _ bool) error {
		return createRefused(s, r.owner)
	}); err != nil {
		r.logger().Warn().Err(err).Msg("clear the create mark; the next owner will not create again")
	}
}

// createAnswered reports whether a failed create certainly started no
// response: the service answered with an HTTP error (a streamed create is
// answered 200 as soon as the response exists; failures after that arrive
// as stream events), the request was refused before it was sent (invalid,
// or no Entra ID token for it), or the connection was never made (the host
// name does not resolve, the server's certificate was refused, the dial
// failed).
func createAnswered(err error) bool {
	var apiErr *foundry.APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode >= 400 {
		return true
	}
	if errors.Is(err, foundry.ErrInvalidRequest) || errors.Is(err, foundry.ErrAuth) {
		return true // refused before sending, or no token to send it with
	}
	if neverSent(err) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// stateOutcome turns a failed lifecycle write of the reader into an outcome.
func (r *run) stateOutcome(err error) outcome {
	switch {
	case errors.Is(err, errNotOwner), errors.Is(err, errFinished), errors.Is(err, errOtherResponse):
		return outcome{err: err, lostOwnership: true, upstreamSeq: -1}
	case errors.Is(err, errCreateStarted):
		return outcome{err: err, lost: true, upstreamSeq: -1}
	}
	return outcome{err: err, op: opState, upstreamSeq: -1}
}

// saveResponseID records the response id durably (knowResponse, retried
// until it lands), then announces it with run.started. A response Foundry
// runs in the foreground (hosted agents ignore background) is announced as
// such. A run being cancelled stops retrying: its cancel waits for this
// reader before it calls Foundry with the id it knows, and a store that
// refuses writes must not delay it.
func (r *run) saveResponseID(id string, seq int64, foreground bool) (outcome, bool) {
	r.setResponseID(id, time.Now())
	if foreground {
		r.setForeground()
	}
	ctx, giveUp := context.WithCancel(r.hard)
	defer giveUp()
	defer context.AfterFunc(r.ctx, func() {
		if isCancelCause(context.Cause(r.ctx)) {
			giveUp()
		}
	})()
	if _, err := r.persistUntil(ctx, "save the response id", func(s *events.RunState, _ bool) error {
		return knowResponse(s, r.owner, id)
	}); err != nil {
		if ctx.Err() != nil && r.hard.Err() == nil {
			return outcome{err: context.Cause(r.ctx), upstreamSeq: -1}, false // the cancel calls Foundry
		}
		if !isDecision(err) {
			// The run was aborted before the id could be saved anywhere: no
			// worker will ever find this response, so it must not run on.
			r.cancelUnreachable(id)
		}
		return r.stateOutcome(err), false
	}
	started := events.RunEvent{Type: events.TypeRunStarted, ResponseID: id, Attempt: r.owner.attempt, Worker: r.w.cfg.WorkerID}
	if step := r.lastState().Step; step > 1 {
		started = events.RunEvent{Type: events.TypeStepStarted, ResponseID: id, Step: step}
	}
	if foreground {
		started.Background = new(bool)
	}
	r.rel.add(started, seq)
	r.logger().Info().Bool("foreground", foreground).Msg("run started upstream")
	return outcome{}, true
}

// findResponse looks for the response id of a create a previous owner
// started: the record has none, so the first event on the run's subject is
// the only place left. Without it the run ends (endLost). It reports
// whether the run may go on.
func (r *run) findResponse(pos position) bool {
	id := ""
	if pos.Seq > 0 && r.lastState().Step <= 1 { // a later step's id is only ever in the record
		var err error
		if id, err = r.w.firstResponseID(r.hard, r.id); err != nil {
			r.logger().Warn().Err(err).Msg("look for the response id on the run's subject; the job will be retried")
			r.end(ending{release: true, job: nak, delay: r.w.cfg.RetryDelay})
			return false
		}
	}
	if id == "" {
		r.endLost(errors.New("a previous attempt started a create whose response id was never recorded"))
		return false
	}
	r.logger().Info().Str("response_id", id).Msg("response id of an earlier create found on the run's subject")
	if _, err := r.persist("save the response id", func(s *events.RunState, _ bool) error {
		return knowResponse(s, r.owner, id)
	}); err != nil {
		r.logger().Warn().Err(err).Msg("save the response id found on the run's subject")
		return false
	}
	return true
}

// resume re-attaches to the response's stream, retrying transient errors a
// few times. Errors that a retry cannot fix (the resume window has passed)
// are returned at once.
func (r *run) resume(ctx context.Context, id string, after int64) (*foundry.Stream, error) {
	var err error
	b := retry.Backoff(250*time.Millisecond, 2*time.Second)
	for attempt := 0; attempt < 4; attempt++ {
		var s *foundry.Stream
		s, err = r.w.up.Resume(ctx, id, after)
		if err == nil {
			return s, nil
		}
		r.w.m.upstreamErrors.WithLabelValues("resume").Inc()
		if r.notYetVisible(err) {
			attempt = 0 // not counted: Azure answers 404 for a while after a streamed create
		} else if !retryable(err) {
			return nil, err
		}
		retry.Sleep(ctx, retryDelay(err, b.NextBackOff()))
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
	}
	return nil, err
}

// relayStream relays one upstream stream. ended is true when Foundry
// reported an end; otherwise out.err says why the stream stopped.
func (r *run) relayStream(s *foundry.Stream, last *int64) (out outcome, ended bool) {
	for s.Next() {
		ev := s.Event()
		if ev.Type == foundry.EventKeepalive {
			continue // no state; its number is not part of the replay
		}
		seq := int64(-1)
		if ev.HasSeq && ev.Type != foundry.EventError {
			if ev.SequenceNumber <= *last {
				continue // replayed by a resume: already relayed
			}
			seq = ev.SequenceNumber
			*last = seq
		}
		st := translate(ev)
		if st.status != "" {
			r.watchQueued(st.status)
		} else if st.emit != nil {
			r.watchQueued(foundry.StatusInProgress) // output: it runs
		}
		if r.stalled {
			r.markStalled(false) // it speaks again
		}
		if st.responseID != "" && r.currentResponseID() == "" {
			if out, ok := r.saveResponseID(st.responseID, seq, st.foreground); !ok {
				return out, true
			}
		}
		if st.emit != nil {
			r.emit(st.emit, seq)
		}
		if st.end != nil {
			return endOutcome(st.end, seq, s.RequestID()), true
		}
		if st.streamErr != nil {
			return outcome{err: st.streamErr, upstreamSeq: -1}, false
		}
	}
	err := s.Err()
	if err == nil {
		err = errors.New("stream ended without a terminal event")
	}
	return outcome{err: err, upstreamSeq: -1}, false
}

// emit relays an event of the response (relayStream): the copy of the
// event it hands the relay is made in this frame, not in the stream's.
func (r *run) emit(ev *events.RunEvent, upstreamSeq int64) {
	if ev.Type == events.TypeTextDelta && !r.createAt.IsZero() && !r.firstText {
		r.firstText = true
		r.w.m.firstTokenSeconds.Observe(time.Since(r.createAt).Seconds())
	}
	r.rel.add(*ev, upstreamSeq)
}

// watchQueued bounds the time Foundry keeps the response queued: the
// reader is stopped with errUpstreamQueued once it has been queued for
// Config.QueuedTimeout since this reader first saw it so; any other status
// (or output) ends the watch.
func (r *run) watchQueued(status string) {
	switch {
	case status == foundry.StatusQueued && r.queued == nil:
		limit := r.w.cfg.QueuedTimeout
		r.queued = time.AfterFunc(limit, func() {
			r.upStop(fmt.Errorf("%w for %s (--queued-timeout)", errUpstreamQueued, limit))
		})
	case status != foundry.StatusQueued && r.queued != nil:
		r.queued.Stop()
	}
}

// markStalled records in the run's record that its response's stream went
// silent (stalled_at, for foundryq runs), or speaks again. A write that
// does not land is not retried: the mark is information, not state.
func (r *run) markStalled(stalled bool) {
	r.stalled = stalled
	var at *time.Time
	if stalled {
		now := time.Now().UTC()
		at = &now
	}
	ctx, cancel := context.WithTimeout(r.hard, 5*time.Second)
	defer cancel()
	st, err := r.w.states.Upsert(ctx, r.id, func(s *events.RunState, _ bool) error {
		return markStalled(s, r.owner, at)
	})
	if err == nil {
		r.setState(st)
	}
}

// endOutcome is the outcome of a response that ended (endOf); a failure
// carries requestID, the x-request-id of the answer that reported it.
func endOutcome(resp *foundry.Response, upstreamSeq int64, requestID string) outcome {
	ev, cancelled := endOf(resp)
	if cancelled {
		return outcome{cancelledUpstream: resp, upstreamSeq: upstreamSeq}
	}
	if ev.Error != nil {
		ev.Error.RequestID = requestID
	}
	return outcome{terminal: &ev, upstreamSeq: upstreamSeq, upstreamStatus: resp.Status}
}

// cannotResume settles a response whose stream cannot be re-attached to:
// past the resume window it is polled to its end; a foreground response
// (hosted agents ignore background: resume answers "Streaming is not enabled
// for this response" and GET may stay in_progress for ever) is polled for
// at most ForegroundPollTimeout, then the run ends stream_lost.
func (r *run) cannotResume(ctx context.Context, id string, err error) outcome {
	if errors.Is(err, foundry.ErrStreamingNotEnabled) || errors.Is(err, foundry.ErrNotBackground) {
		r.setForeground()
		r.logger().Warn().Err(err).Str("response_id", id).Msg("the response runs in the foreground and cannot be re-attached to; polling it for a while")
		return r.poll(ctx, id, r.w.cfg.ForegroundPollTimeout)
	}
	r.logger().Info().Err(err).Str("response_id", id).Msg("cannot re-attach to the stream; polling the response")
	return r.poll(ctx, id, 0)
}

// poll follows a response that can no longer be streamed until it ends (or,
// with a limit > 0, for at most that long), then publishes the text not yet
// published and the terminal event.
func (r *run) poll(ctx context.Context, id string, limit time.Duration) outcome {
	b := retry.Backoff(500*time.Millisecond, 5*time.Second)
	failures := 0
	var queuedSince time.Time
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	for {
		resp, err := r.w.up.Get(ctx, id)
		switch {
		case err == nil && resp.Terminal():
			return r.publishRest(ctx, resp)
		case err == nil && resp.Status == foundry.StatusQueued:
			if queuedSince.IsZero() {
				queuedSince = time.Now()
			} else if time.Since(queuedSince) > r.w.cfg.QueuedTimeout {
				return outcome{err: fmt.Errorf("%w for %s (--queued-timeout)", errUpstreamQueued, r.w.cfg.QueuedTimeout), op: "get", upstreamSeq: -1}
			}
		case err != nil && ctx.Err() != nil:
			return outcome{err: context.Cause(ctx), upstreamSeq: -1}
		case err != nil && r.notYetVisible(err):
			// Not visible yet right after a streamed create: keep polling.
		case err != nil && (isNotFound(err) || !retryable(err)):
			return outcome{err: fmt.Errorf("get response %s: %w", id, err), op: "get", upstreamSeq: -1}
		case err != nil:
			r.w.m.upstreamErrors.WithLabelValues("get").Inc()
			if failures++; failures > 10 {
				return outcome{err: fmt.Errorf("get response %s: %w", id, err), op: "get", upstreamSeq: -1}
			}
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return outcome{err: fmt.Errorf("response %s runs in the foreground, its stream broke and it cannot be re-attached to; "+
				"it did not end within %s", id, limit), op: "get", streamLost: true, upstreamSeq: -1}
		}
		retry.Sleep(ctx, retryDelay(err, b.NextBackOff()))
	}
}

// publishRest publishes the part of a finished response's text that the
// run's subject does not hold yet, and returns its terminal outcome.
func (r *run) publishRest(ctx context.Context, resp *foundry.Response) outcome {
	if err := r.rel.flush(ctx); err != nil {
		return outcome{err: err, upstreamSeq: -1}
	}
	published, err := r.w.publishedText(ctx, r.id)
	if err != nil {
		return outcome{err: fmt.Errorf("read published text: %w", err), op: "get", upstreamSeq: -1}
	}
	if len(resp.OutputText) > len(published) && resp.OutputText[:len(published)] == published {
		r.rel.add(events.RunEvent{Type: events.TypeTextDelta, Text: resp.OutputText[len(published):]}, -1) // split by the relay
	} else if resp.OutputText != published {
		r.logger().Warn().Int("published", len(published)).Int("upstream", len(resp.OutputText)).Msg("published text is not a prefix of the upstream text; nothing more published")
	}
	return endOutcome(resp, -1, "")
}

func createRequest(req events.RunRequest, runID string) foundry.CreateRequest {
	md := make(map[string]string, len(req.Metadata)+1)
	for k, v := range req.Metadata {
		md[k] = v
	}
	md["run_id"] = runID
	cr := foundry.CreateRequest{
		Model:           req.Model,
		Input:           req.Input,
		Instructions:    req.Instructions,
		Tools:           req.Tools,
		Metadata:        md,
		MaxOutputTokens: req.MaxOutputTokens,
		Options:         req.Options,
	}
	if req.Agent != nil {
		cr.Agent = &foundry.AgentRef{Name: req.Agent.Name, Version: req.Agent.Version}
	}
	return cr
}

// deploymentOf names the Foundry deployment a request goes to, for the
// create limiter: a model deployment or an agent.
func deploymentOf(req events.RunRequest) string {
	if req.Agent != nil {
		return "agent:" + req.Agent.Name
	}
	return "model:" + req.Model
}

// retryDelay is the wait the service asked for in a 429 or 5xx answer
// (Retry-After-Ms, Retry-After), or fallback.
func retryDelay(err error, fallback time.Duration) time.Duration {
	var apiErr *foundry.APIError
	if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
		return min(apiErr.RetryAfter, 5*time.Minute)
	}
	return fallback
}

// retryable reports whether an upstream error may go away on a retry:
// rate limits, server errors and network errors.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var apiErr *foundry.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Retryable()
	}
	return !errors.Is(err, foundry.ErrResumeExpired) && !errors.Is(err, foundry.ErrNotBackground) && !errors.Is(err, foundry.ErrNotFound) &&
		!errors.Is(err, foundry.ErrInvalidRequest) && !errors.Is(err, foundry.ErrNotStreaming) && !errors.Is(err, foundry.ErrAuth) &&
		!errors.Is(err, foundry.ErrStreamingNotEnabled)
}

// neverSent reports whether a call failed before its request left the
// machine for a reason a retry does not fix: the endpoint's host name does
// not resolve, or its TLS certificate cannot be verified. A create that
// failed so ends the run at once (upstream_unreachable,
// upstream_tls_error); a resume or get of a response already started keeps
// its retries.
func neverSent(err error) bool {
	return errors.Is(err, foundry.ErrHostNotFound) || errors.Is(err, foundry.ErrTLSVerification)
}

func isNotFound(err error) bool { return errors.Is(err, foundry.ErrNotFound) }
