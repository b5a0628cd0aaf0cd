package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/tracing"
)

// handle takes one request, on the endpoint subscription's goroutine: it
// parses it, registers the call (so that a cancel reaches it even while it
// waits for a slot) and runs it on a goroutine of its own. Replies are
// published directly, not with req.Respond or req.Error, which micro does
// not expect after handle returns.
func (s *Service) handle(req micro.Request) {
	reply := req.Reply()
	call, err := s.parse(req)
	if err != nil {
		s.replyError(reply, Error{Code: "400", Description: err.Error()})
		return
	}
	ctx, f, ok := s.begin(call, nats.Header(req.Headers()))
	if !ok {
		s.replyError(reply, Error{Code: "503", Description: "tool " + s.name + ": the service is stopping"})
		return
	}
	go s.run(ctx, f, reply)
}

// parse reads a request's headers and body into a Call.
func (s *Service) parse(req micro.Request) (Call, error) {
	h := req.Headers()
	c := Call{
		RunID:     h.Get(events.HeaderToolRunID),
		CallID:    h.Get(events.HeaderToolCallID),
		Name:      s.name,
		Arguments: json.RawMessage(req.Data()),
	}
	if !events.ValidRunID(c.RunID) {
		return c, fmt.Errorf("header %s %q: want a run id ([A-Za-z0-9_-]{1,64})", events.HeaderToolRunID, c.RunID)
	}
	if c.CallID == "" {
		return c, fmt.Errorf("header %s missing", events.HeaderToolCallID)
	}
	if n := h.Get(events.HeaderToolName); n != "" && n != s.name {
		return c, fmt.Errorf("header %s %q: this service serves %q", events.HeaderToolName, n, s.name)
	}
	if d := h.Get(events.HeaderToolDeadline); d != "" {
		t, err := time.Parse(time.RFC3339Nano, d)
		if err != nil {
			return c, fmt.Errorf("header %s %q: want RFC 3339", events.HeaderToolDeadline, d)
		}
		c.Deadline = t
	}
	return c, nil
}

// begin registers call and returns its ctx (with the request's trace
// context, ended by a cancel message, the deadline or Stop), or false if
// the service is stopping.
func (s *Service) begin(call Call, h nats.Header) (context.Context, *inflight, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancelCause(tracing.Extract(s.base, h))
	f := &inflight{call: call, cancel: cancel}
	if !call.Deadline.IsZero() {
		var stopTimer context.CancelFunc
		ctx, stopTimer = context.WithDeadlineCause(ctx, call.Deadline, ErrDeadline)
		f.cancel = func(cause error) { cancel(cause); stopTimer() }
	}
	s.calls[f] = struct{}{}
	s.running.Add(1)
	if s.early.take(callKey{call.RunID, call.CallID}, time.Now()) {
		f.cancel(ErrCancelled)
	}
	return ctx, f, true
}

// acquire takes a slot for a call, unless its ctx ends first.
func (s *Service) acquire(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case s.slots <- struct{}{}:
		s.mu.Lock()
		s.stats.InFlight++
		s.mu.Unlock()
		return true
	case <-ctx.Done():
		return false
	}
}

// end unregisters a call, and frees its slot if it held one.
func (s *Service) end(f *inflight, slot bool) {
	f.cancel(context.Canceled)
	s.mu.Lock()
	delete(s.calls, f)
	if slot {
		s.stats.InFlight--
	}
	s.mu.Unlock()
	if slot {
		<-s.slots
	}
	s.running.Done()
}

// outcome is what a handler returned.
type outcome struct {
	output string
	err    error
}

// run waits for a free slot, runs the call's handler and sends progress
// messages until it returns, then the reply. A call whose ctx ends before
// it gets a slot is answered without running.
func (s *Service) run(ctx context.Context, f *inflight, reply string) {
	if !s.acquire(ctx) {
		s.replyError(reply, Error{Code: "503", Description: fmt.Sprintf("tool %s: the call did not start: %v", s.name, context.Cause(ctx))})
		s.end(f, false)
		return
	}
	defer s.end(f, true)
	result := make(chan outcome, 1)
	go func() { result <- s.invoke(ctx, f.call) }()
	s.answer(reply, s.progressUntil(reply, result))
}

// invoke calls the handler; a panic becomes an error.
func (s *Service) invoke(ctx context.Context, call Call) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = outcome{err: Error{Code: "500", Description: fmt.Sprintf("tool %s panicked: %v", s.name, r)}}
		}
	}()
	out, err := s.handler(ctx, call)
	return outcome{out, err}
}

// progressUntil sends a progress message every heartbeat until the
// handler's outcome arrives, and returns it. The first one names this
// instance.
func (s *Service) progressUntil(reply string, result <-chan outcome) outcome {
	t := time.NewTicker(s.cfg.heartbeat)
	defer t.Stop()
	first := true
	for {
		select {
		case o := <-result:
			return o
		case <-t.C:
			m := nats.NewMsg(reply)
			m.Header.Set(events.HeaderToolStatus, events.ToolStatusWorking)
			if first {
				m.Header.Set(events.HeaderToolInstance, s.instance)
				first = false
			}
			// A lost progress message is made up for by the next one.
			_ = s.nc.PublishMsg(m)
		}
	}
}

// answer sends a handler's outcome as the call's reply.
func (s *Service) answer(reply string, o outcome) {
	if o.err != nil {
		s.replyError(reply, s.asError(o.err))
		return
	}
	err := s.nc.PublishMsg(&nats.Msg{Subject: reply, Data: []byte(o.output)})
	if errors.Is(err, nats.ErrMaxPayload) {
		s.replyError(reply, Error{Code: "413", Description: fmt.Sprintf("tool %s: the output (%d bytes) is larger than the server's max payload (%d bytes)", s.name, len(o.output), s.nc.MaxPayload())})
	}
	// Any other error: the connection is gone, and the reply with it.
}

// asError is a handler's err as an Error with a code and a description.
func (s *Service) asError(err error) Error {
	var e Error
	var pe *Error
	switch {
	case errors.As(err, &e):
	case errors.As(err, &pe) && pe != nil:
		e = *pe
	default:
		e = Error{Description: err.Error()}
	}
	if e.Code == "" {
		e.Code = "500"
	}
	if e.Description == "" {
		e.Description = "tool " + s.name + " failed"
	}
	return e
}

// replyError sends a micro error reply and counts it.
func (s *Service) replyError(reply string, e Error) {
	s.mu.Lock()
	s.stats.Errors++
	s.stats.LastError = e.Code + ": " + e.Description
	s.mu.Unlock()
	m := nats.NewMsg(reply)
	m.Header.Set(micro.ErrorHeader, e.Description)
	m.Header.Set(micro.ErrorCodeHeader, e.Code)
	// An error here: the connection is gone, and the reply with it.
	_ = s.nc.PublishMsg(m)
}
