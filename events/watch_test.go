package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/testkit"
)

// publisher plays the worker: it publishes a run's events with the
// headers and fencing the worker uses.
type publisher struct {
	t     *testing.T
	e     *env
	runID string
	seq   uint64
	last  uint64 // stream sequence of the run's last event (fencing)
}

func (p *publisher) publish(ev events.RunEvent) events.RunEvent {
	p.t.Helper()
	p.seq++
	ev.RunID, ev.Seq = p.runID, p.seq
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	m, err := eventMsg(p.e.names, ev)
	if err != nil {
		p.t.Fatal(err)
	}
	ack, err := p.e.js.PublishMsg(testCtx(p.t), m, jetstream.WithExpectLastSequencePerSubject(p.last))
	if err != nil {
		p.t.Fatalf("publish event %d: %v", p.seq, err)
	}
	p.last = ack.Sequence
	return ev
}

func (p *publisher) text(s string) events.RunEvent {
	return p.publish(events.RunEvent{Type: events.TypeTextDelta, Text: s})
}

// readAll reads events until io.EOF.
func readAll(t *testing.T, w *events.Watch) []events.RunEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []events.RunEvent
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
}

func sameEvents(a, b []events.RunEvent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Time.Equal(y.Time) {
			return false
		}
		x.Time, y.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestWatchLiveAndLate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	p := &publisher{t: t, e: e, runID: "run_live"}

	var published []events.RunEvent
	published = append(published, p.publish(events.RunEvent{Type: events.TypeRunStarted, ResponseID: "resp_1", Attempt: 1, Worker: "w1"}))
	published = append(published, p.text("Hel"))

	live := e.client.Watch(ctx, "run_live", events.WatchOptions{})
	defer live.Close()
	liveDone := make(chan []events.RunEvent, 1)
	go func() { liveDone <- readAll(t, live) }()

	published = append(published, p.text("lo"))
	published = append(published, p.publish(events.RunEvent{Type: events.TypeToolStarted, Tool: &events.Tool{Type: "mcp_call", Name: "search", ServerLabel: "docs", CallID: "c1"}}))
	published = append(published, p.publish(events.RunEvent{Type: events.TypeToolCompleted, Tool: &events.Tool{Type: "mcp_call", Name: "search", ServerLabel: "docs", CallID: "c1"}}))
	published = append(published, p.publish(events.RunEvent{Type: events.TypeRunCompleted, ResponseID: "resp_1", Status: "completed",
		Usage: &events.Usage{InputTokens: 3, OutputTokens: 2, TotalTokens: 5}}))

	var liveEvents []events.RunEvent
	select {
	case liveEvents = <-liveDone:
	case <-time.After(10 * time.Second):
		t.Fatal("live watcher did not finish")
	}
	if !sameEvents(liveEvents, published) {
		t.Fatalf("live watcher saw\n%+v\nwant\n%+v", liveEvents, published)
	}
	if _, err := live.Next(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("Next after the terminal event: %v, want io.EOF", err)
	}

	late := e.client.Watch(ctx, "run_live", events.WatchOptions{NoHeartbeat: true})
	defer late.Close()
	if lateEvents := readAll(t, late); !sameEvents(lateEvents, liveEvents) {
		t.Fatalf("late watcher saw\n%+v\nlive saw\n%+v", lateEvents, liveEvents)
	}
}

func TestWatchFromNow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)

	t.Run("running", func(t *testing.T) {
		p := &publisher{t: t, e: e, runID: "now1"}
		p.publish(events.RunEvent{Type: events.TypeRunStarted})
		p.text("old")
		w := e.client.Watch(ctx, "now1", events.WatchOptions{From: events.FromNow, NoHeartbeat: true})
		defer w.Close()
		want := []events.RunEvent{p.text("new"), p.publish(events.RunEvent{Type: events.TypeRunCancelled, Reason: events.ReasonRequested, UpstreamStatus: "cancelled", UsageUnknown: true})}
		if got := readAll(t, w); !sameEvents(got, want) {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
	})

	t.Run("finished", func(t *testing.T) {
		p := &publisher{t: t, e: e, runID: "now2"}
		p.publish(events.RunEvent{Type: events.TypeRunStarted})
		terminal := p.publish(events.RunEvent{Type: events.TypeRunFailed, Error: &events.Error{Code: "server_error", Message: "boom"}})
		if _, err := e.store.Create(ctx, events.RunState{RunID: "now2", Status: events.StatusFailed, Terminal: events.TypeRunFailed}); err != nil {
			t.Fatal(err)
		}
		w := e.client.Watch(ctx, "now2", events.WatchOptions{From: events.FromNow, NoHeartbeat: true})
		defer w.Close()
		if got := readAll(t, w); !sameEvents(got, []events.RunEvent{terminal}) {
			t.Fatalf("got %+v, want only the terminal event", got)
		}
	})

	t.Run("not started", func(t *testing.T) {
		w := e.client.Watch(ctx, "now3", events.WatchOptions{From: events.FromNow, NoHeartbeat: true})
		defer w.Close()
		p := &publisher{t: t, e: e, runID: "now3"}
		want := []events.RunEvent{p.publish(events.RunEvent{Type: events.TypeRunStarted}), p.publish(events.RunEvent{Type: events.TypeRunCompleted, Status: "completed"})}
		if got := readAll(t, w); !sameEvents(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})

	t.Run("expired events", func(t *testing.T) {
		if _, err := e.store.Create(ctx, events.RunState{RunID: "gone", Status: events.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
		w := e.client.Watch(ctx, "gone", events.WatchOptions{NoHeartbeat: true})
		defer w.Close()
		if _, err := w.Next(ctx); !errors.Is(err, events.ErrEventsUnavailable) {
			t.Fatalf("err = %v, want ErrEventsUnavailable", err)
		}
	})
}

func TestWatchOrderChecks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	raw := func(runID string, seq uint64, typ events.EventType, id string) {
		t.Helper()
		m, err := eventMsg(e.names, events.RunEvent{RunID: runID, Seq: seq, Type: typ, Time: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set(jetstream.MsgIDHeader, id) // bypass dedupe to store a repeat
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	raw("ord", 1, events.TypeRunStarted, "a")
	raw("ord", 2, events.TypeTextDelta, "b")
	raw("ord", 2, events.TypeTextDelta, "c") // repeated: dropped
	raw("ord", 4, events.TypeTextDelta, "d") // gap: reported, then delivered
	bad := nats.NewMsg(e.names.EventSubject("ord"))
	bad.Data = []byte(`{not json`)
	if _, err := e.js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	raw("ord", 5, events.TypeRunCompleted, "e")

	w := e.client.Watch(ctx, "ord", events.WatchOptions{NoHeartbeat: true})
	defer w.Close()
	var seqs []uint64
	var gaps, bads int
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		switch {
		case errors.Is(err, events.ErrSeqGap):
			gaps++
			continue
		case errors.Is(err, events.ErrBadEvent):
			bads++
			continue
		case err != nil:
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 4 5]" || gaps != 1 || bads != 1 {
		t.Fatalf("seqs %v, gaps %d, bad events %d", seqs, gaps, bads)
	}
}

func TestWatchHeartbeats(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	// A synchronous subscription: after a Flush every message the server
	// sent before it sits in the subscription's queue.
	sub, err := e.nc.SubscribeSync(e.names.WatchSubject("hb"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		t.Helper()
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	w := e.client.Watch(ctx, "hb", events.WatchOptions{HeartbeatInterval: 20 * time.Millisecond})
	testkit.Eventually(t, 5*time.Second, "3 heartbeats", func() bool { return pending() >= 3 })

	// Next blocks (no events); Close unblocks it.
	nextErr := make(chan error, 1)
	go func() { _, err := w.Next(ctx); nextErr <- err }()
	time.Sleep(30 * time.Millisecond) // let Next block; the result does not depend on it
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-nextErr:
		if !errors.Is(err, events.ErrWatchClosed) {
			t.Fatalf("Next after Close: %v, want ErrWatchClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Next")
	}
	// Drop what was sent before Close returned, then expect silence.
	for n := pending(); n > 0; n-- {
		if _, err := sub.NextMsg(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // 5 intervals: no heartbeat may arrive
	if n := pending(); n != 0 {
		t.Fatalf("%d heartbeats after Close", n)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// NoHeartbeat sends none.
	quiet, err := e.nc.SubscribeSync(e.names.WatchSubject("quiet"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = quiet.Unsubscribe() }()
	w2 := e.client.Watch(ctx, "quiet", events.WatchOptions{NoHeartbeat: true})
	time.Sleep(100 * time.Millisecond)
	_ = w2.Close()
	_ = e.nc.Flush()
	if n, _, _ := quiet.Pending(); n != 0 {
		t.Fatalf("%d heartbeats with NoHeartbeat", n)
	}
}

func TestWatchContextEnds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	parent, cancel := context.WithCancel(testCtx(t))
	w := e.client.Watch(parent, "ctxrun", events.WatchOptions{NoHeartbeat: true})
	defer w.Close()

	short, scancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer scancel()
	if _, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with an expiring ctx: %v", err)
	}
	cancel()
	if _, err := w.Next(testCtx(t)); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after the watch ctx ended: %v, want context.Canceled", err)
	}
}

func TestWatchBadRunID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.client.Watch(testCtx(t), "bad.id", events.WatchOptions{})
	defer w.Close()
	if _, err := w.Next(testCtx(t)); !errors.Is(err, events.ErrBadRunID) {
		t.Fatalf("err = %v", err)
	}
}

func TestWatchHeartbeatsStopAtTerminal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := testCtx(t)
	sub, err := e.nc.SubscribeSync(e.names.WatchSubject("hbend"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	p := &publisher{t: t, e: e, runID: "hbend"}
	p.publish(events.RunEvent{Type: events.TypeRunStarted})
	p.publish(events.RunEvent{Type: events.TypeRunCompleted, Status: "completed"})

	w := e.client.Watch(ctx, "hbend", events.WatchOptions{HeartbeatInterval: 10 * time.Millisecond})
	defer w.Close()
	if got := readAll(t, w); len(got) != 2 {
		t.Fatalf("got %d events", len(got))
	}
	// Heartbeats ended with the terminal event, before Close.
	_ = e.nc.Flush()
	n0, _, _ := sub.Pending()
	time.Sleep(60 * time.Millisecond)
	_ = e.nc.Flush()
	if n1, _, _ := sub.Pending(); n1 != n0 {
		t.Fatalf("%d heartbeats after the terminal event", n1-n0)
	}
}

// eventMsg is a run event as a worker stores it (the headers a watch needs).
func eventMsg(n events.Names, ev events.RunEvent) (*nats.Msg, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(n.EventSubject(ev.RunID))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%d", ev.RunID, ev.Seq))
	m.Header.Set(events.HeaderType, string(ev.Type))
	return m, nil
}
