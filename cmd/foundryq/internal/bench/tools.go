package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/tools"
)

// benchTool is the function tool the bench serves.
const benchTool = "bench_tool"

// functionTools is the tool list of a run whose model calls benchTool
// (emu_tool_ms makes the emulator's model call it).
var functionTools = []string{`{"type":"function","name":"` + benchTool + `"}`}

// toolServer serves benchTool in the bench's own process (tools.Serve, on
// a connection of its own), so that the time from a cancel request to the
// end of a call's ctx is read on one clock. A call runs for the hold set
// (0: until its ctx ends) and is noted by run id.
type toolServer struct {
	nc  *nats.Conn
	svc *tools.Service

	mu    sync.Mutex
	hold  time.Duration
	calls map[string]*servedCall
	wake  chan struct{} // closed and replaced at every change
}

// servedCall is what the service saw of one run's call.
type servedCall struct {
	started, ended time.Time
	// cause ended the call's ctx before its hold was over (nil: it ran to
	// its end).
	cause error
}

// serveTool starts serving benchTool on a connection of its own to url,
// under prefix.
func serveTool(url, prefix string) (*toolServer, error) {
	nc, err := events.Connect(url, nats.Name("foundryq-bench-tool"))
	if err != nil {
		return nil, fmt.Errorf("bench: tool service: %w", err)
	}
	s := &toolServer{nc: nc, calls: map[string]*servedCall{}, wake: make(chan struct{})}
	// Every call of the largest phase at once.
	if s.svc, err = tools.Serve(nc, benchTool, s.handle, tools.WithPrefix(prefix), tools.WithMaxInFlight(4096)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: tool service: %w", err)
	}
	return s, nil
}

// close stops the service (its calls' ctx end) and its connection.
func (s *toolServer) close() error {
	err := s.svc.Stop()
	s.nc.Close()
	return err
}

// holdFor sets how long the calls that start from now on run (0: until
// their ctx ends).
func (s *toolServer) holdFor(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = d
}

func (s *toolServer) handle(ctx context.Context, call tools.Call) (string, error) {
	var over <-chan time.Time
	if hold := s.begin(call.RunID); hold > 0 {
		t := time.NewTimer(hold)
		defer t.Stop()
		over = t.C
	}
	select {
	case <-over:
		s.finish(call.RunID, nil)
		return `{"done":true}`, nil
	case <-ctx.Done():
		cause := context.Cause(ctx)
		s.finish(call.RunID, cause)
		return "", cause
	}
}

// begin notes a call's start and returns its hold.
func (s *toolServer) begin(runID string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[runID] = &servedCall{started: time.Now()}
	s.changed()
	return s.hold
}

// finish notes a call's end.
func (s *toolServer) finish(runID string, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.calls[runID]; c != nil {
		c.ended, c.cause = time.Now(), cause
	}
	s.changed()
}

func (s *toolServer) changed() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// call returns what the service saw of run id's call (ok false if none
// started).
func (s *toolServer) call(id string) (servedCall, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[id]
	if c == nil {
		return servedCall{}, false
	}
	return *c, true
}

// waitStarted waits until the call of every run of ids has started, for
// at most limit.
func (s *toolServer) waitStarted(ctx context.Context, ids []string, limit time.Duration) error {
	return s.wait(ctx, ids, "started", limit, func(c *servedCall) bool { return c != nil })
}

// waitEnded waits until the call of every run of ids has ended, for at
// most limit.
func (s *toolServer) waitEnded(ctx context.Context, ids []string, limit time.Duration) error {
	return s.wait(ctx, ids, "ended", limit, func(c *servedCall) bool { return c != nil && !c.ended.IsZero() })
}

func (s *toolServer) wait(ctx context.Context, ids []string, what string, limit time.Duration, done func(*servedCall) bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		missing := 0
		for _, id := range ids {
			if !done(s.calls[id]) {
				missing++
			}
		}
		wake := s.wake
		s.mu.Unlock()
		if missing == 0 {
			return nil
		}
		select {
		case <-wake:
		case <-deadline.C:
			return fmt.Errorf("%d of %d calls of %s not %s after %s", missing, len(ids), benchTool, what, limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// toolWork sums what the calls of ids did after each one's ask.
func (s *toolServer) toolWork(ids []string, asked map[string]time.Time) ToolWork {
	var w ToolWork
	for _, id := range ids {
		c, ok := s.call(id)
		if !ok || c.ended.IsZero() {
			continue
		}
		if d := c.ended.Sub(asked[id]); d > 0 {
			w.ToolSeconds += d.Seconds()
		}
		if c.cause == nil {
			w.CallsToEnd++
		}
	}
	return w
}

// naiveCall is a client that runs benchTool itself over NATS as run id,
// and stops by dropping its connection: it sends the call, asks to stop
// think after the call started (calling ask), and closes its connection,
// which the service does not hear.
func (b *bench) naiveCall(ctx context.Context, srv *toolServer, id string, think time.Duration, ask func(string)) error {
	nc, err := events.Connect(b.sys.natsURL, nats.Name("foundryq-bench-naive"))
	if err != nil {
		return err
	}
	defer nc.Close()
	m := nats.NewMsg(b.sys.names.ToolSubject(benchTool))
	m.Reply = nc.NewInbox()
	m.Header.Set(events.HeaderToolRunID, id)
	m.Header.Set(events.HeaderToolCallID, "call_"+id)
	m.Header.Set(events.HeaderToolName, benchTool)
	m.Data = []byte(`{}`)
	if _, err := nc.SubscribeSync(m.Reply); err != nil {
		return err
	}
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	if err := srv.waitStarted(ctx, []string{id}, 2*time.Minute); err != nil {
		return err
	}
	time.Sleep(think) // the user's think time, not a wait for a condition
	ask(id)
	nc.Close() // dropped, as a naive client stops
	return nil
}
