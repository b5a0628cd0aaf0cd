package consumer

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

// Text merged while a publish is held up (a NATS outage, a slow store) is
// split into events of at most maxEventText bytes, at rune boundaries, and
// only the part that ends an upstream delta carries its sequence number.
func TestRelaySplitsText(t *testing.T) {
	r := &relay{metrics: newMetrics(nil, nil), done: make(chan struct{}), maxText: eventTextLimit(1 << 20)}
	var want strings.Builder
	chunk := strings.Repeat("héllo wörld ", 700) // ~9.1 KB, multibyte runes
	for i := range 12 {
		r.add(events.RunEvent{Type: events.TypeTextDelta, Text: chunk}, int64(i))
		want.WriteString(chunk)
	}
	huge := strings.Repeat("€", r.maxText) // one upstream delta of 3 × maxText bytes
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: huge}, 99)
	want.WriteString(huge)

	var got strings.Builder
	for i, pe := range r.pending {
		if len(pe.text) > r.maxText {
			t.Fatalf("event %d holds %d bytes, more than %d", i, len(pe.text), r.maxText)
		}
		if !utf8.Valid(pe.text) {
			t.Fatalf("event %d was cut inside a rune", i)
		}
		got.Write(pe.text)
	}
	if got.String() != want.String() {
		t.Fatal("the split text differs from what was added")
	}
	last := r.pending[len(r.pending)-1]
	if last.upstreamSeq != 99 {
		t.Fatalf("last part carries upstream seq %d, want 99", last.upstreamSeq)
	}
	for _, pe := range r.pending[len(r.pending)-3 : len(r.pending)-1] {
		if pe.upstreamSeq == 99 {
			t.Fatal("a part before the end of an upstream delta carries its sequence number: a new owner would skip the rest")
		}
	}
	if n := len(r.pending); n < 7 {
		t.Fatalf("%d events for %d bytes", n, want.Len())
	}
}

func TestEventTextLimit(t *testing.T) {
	for _, tt := range []struct {
		maxPayload int64
		want       int
	}{{1 << 20, maxEventText}, {64 << 10, 8 << 10}, {1024, 512}} {
		if got := eventTextLimit(tt.maxPayload); got != tt.want {
			t.Errorf("max payload %d: %d, want %d", tt.maxPayload, got, tt.want)
		}
	}
}

// relayWorker is a worker with what its relays need, on an embedded server
// with file storage, its pool of drains closed when tb ends.
func relayWorker(tb testing.TB) *Worker {
	tb.Helper()
	ns := natsembed.StartT(tb, natsembed.Config{InProcess: true})
	nc, err := ns.Connect()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	names, _ := events.NewNames("")
	res, err := Provision(tb.Context(), js, names, ProvisionConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	w := &Worker{nc: nc, js: js, pub: js, res: res, names: names, m: newMetrics(nil, nil), maxText: eventTextLimit(nc.MaxPayload()),
		drainers: newDrainers(), stopping: make(chan struct{})}
	tb.Cleanup(w.drainers.close)
	return w
}

// testRelay is a relay on a run's subject of an embedded server with file
// storage, publishing with the given event interval.
func testRelay(t *testing.T, interval time.Duration) (*relay, jetstream.Stream) {
	t.Helper()
	w := relayWorker(t)
	return w.newRelay("r1", position{}, interval, zerolog.Nop()), w.res.Events
}

// A relay holds no goroutine while nothing is queued: one publishes while
// events wait, a held delta waits on a timer, and the relay finishes when
// its ctx ends while idle, as when it is closed and drained.
func TestRelayPublishesWithoutParkedGoroutine(t *testing.T) {
	t.Parallel()
	r, stream := testRelay(t, 50*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var failed atomic.Value
	r.start(ctx, func(err error) { failed.Store(err) })
	draining := func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.draining || r.held != nil }
	if draining() {
		t.Fatal("a started relay with nothing queued runs a publisher or a timer")
	}
	r.add(events.RunEvent{Type: events.TypeRunStarted, ResponseID: "resp_1"}, -1)
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: "hel"}, 1)
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: "lo"}, 2)
	// The lone delta after run.started is held (interval), then published
	// by its timer without a flush.
	testkit.Eventually(t, 10*time.Second, "both events to be stored", func() bool { return r.tail().Seq == 2 })
	m, err := stream.GetLastMsgForSubject(t.Context(), r.subject)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := events.DecodeRunEvent(m.Data); err != nil || ev.Text != "hello" || ev.Seq != 2 {
		t.Fatalf("last event %+v, %v; want the merged text.delta hello, seq 2", ev, err)
	}
	testkit.Eventually(t, 10*time.Second, "the publisher to return", func() bool { return !draining() })
	cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not finish when its ctx ended while idle")
	}
	if err := r.flush(t.Context()); !errors.Is(err, context.Canceled) {
		t.Fatalf("flush after ctx ended: %v, want context.Canceled", err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("onFail called with %v for an idle relay's ctx", err)
	}
}

// close ends a relay once what was queued is stored.
func TestRelayCloseDrains(t *testing.T) {
	t.Parallel()
	r, _ := testRelay(t, time.Hour) // a held delta must not wait for the interval once closed
	r.add(events.RunEvent{Type: events.TypeRunStarted, ResponseID: "resp_1"}, -1)
	r.add(events.RunEvent{Type: events.TypeTextDelta, Text: "x"}, 1)
	r.start(t.Context(), func(err error) { t.Errorf("onFail(%v)", err) })
	r.close()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not finish after close")
	}
	if got := r.tail().Seq; got != 2 {
		t.Fatalf("stored seq %d after close, want 2", got)
	}
}
