package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
	"github.com/foundryq/foundryq/internal/tracing"
)

// maxEventText bounds the text of one text.delta event, in bytes: 32 KiB,
// or an eighth of the server's max payload if that is smaller. Merged deltas
// and a finished response's remaining text are split at it, so that an
// event stays far below the max payload even when JSON escaping multiplies
// its size: a stream that ran on during an outage must not produce an event
// the server refuses.
const maxEventText = 32 << 10

func eventTextLimit(maxPayload int64) int {
	return int(max(min(maxEventText, maxPayload/8), 512))
}

// relay publishes one run's events on its event subject with exactly one
// publish in flight. Events added while a publish waits for its ack queue up;
// consecutive text deltas merge into one event, so a slow store gets fewer,
// larger events and a fast one gets every delta at once. With an interval,
// a lone text delta also waits until that long after the previous publish,
// trading that much token latency for fewer, larger events.
//
// A goroutine publishes only while events are queued (drain, on a goroutine
// of the worker's pool: drainers), and a held delta waits on a timer, not a
// goroutine: of 5,000 runs streaming a token every second or so, almost
// none has a publish in flight at any moment, and a parked goroutine per
// run would cost its stack (8 KiB) for nothing.
//
// Every publish carries Nats-Msg-Id <run_id>:<seq> and expects the subject's
// last stream sequence to be the one this relay stored last. A second writer
// (a zombie owner, or the worker that took the run over) therefore cannot
// interleave: the loser's publish fails and the relay reports
// ErrLostOwnership.
type relay struct {
	js      jetstream.JetStream
	stream  jetstream.Stream // the events stream, for reading the subject's tail
	names   events.Names
	runID   string
	subject string
	metrics *metrics
	log     zerolog.Logger
	// onMissing is called when no stream answers a publish (the events
	// stream was deleted); the publish is retried.
	onMissing func()
	maxText   int       // eventTextLimit
	drainers  *drainers // runs drain
	// activity, when set, receives the time (unix nanos) of each event
	// stored, for the stuck-runs gauge.
	activity *atomic.Int64
	// store is told of each publish's result. When JetStream has refused
	// the head event for want of space for storeFullAfter, onStoreFull is
	// called once (the relay keeps retrying: the events are stored once
	// space is freed).
	store          *storeWatch
	storeFullAfter time.Duration
	onStoreFull    func()

	mu       sync.Mutex
	pending  []pendingEvent
	spare    []byte // a published delta's text buffer, for the next delta
	inflight bool
	closed   bool
	err      error
	idle     chan struct{} // closed when pending drains or the relay fails; nil if nobody waits

	ctx      context.Context // set by start
	onFail   func(error)
	started  bool
	draining bool          // a drain goroutine runs
	held     *time.Timer   // wakes a held delta; nil if none
	done     chan struct{} // closed once the relay is finished (finish)
	unwatch  func() bool   // stops watching ctx

	last        position      // what is stored on the subject
	lastPublish time.Time     // when the last event was stored
	interval    time.Duration // Config.EventInterval
}

// position is the tail of a run's event subject.
type position struct {
	Seq         uint64 // RunEvent.Seq of the last stored event, 0 if none
	StreamSeq   uint64 // its stream sequence (the fence for the next publish)
	UpstreamSeq int64  // Foundry sequence_number it carried, -1 if none
	Type        events.EventType
}

// pendingEvent is a queued event. A text delta keeps its text in text,
// where merged tokens are appended without an allocation each, until it
// is published.
type pendingEvent struct {
	ev          events.RunEvent
	text        []byte // a text delta's text (ev.Text is set at publish)
	upstreamSeq int64  // -1: not tied to an upstream event
}

// maxSpare bounds the text buffer a relay keeps for its next delta.
const maxSpare = 1 << 10

func (w *Worker) newRelay(runID string, last position, interval time.Duration, log zerolog.Logger) *relay {
	return &relay{
		interval:       interval,
		js:             w.pub,
		stream:         w.res.Events,
		names:          w.names,
		runID:          runID,
		subject:        w.names.EventSubject(runID),
		metrics:        w.m,
		log:            log,
		onMissing:      w.resourcesMissing,
		maxText:        w.maxText,
		drainers:       w.drainers,
		store:          &w.store,
		storeFullAfter: w.cfg.StoreFullTimeout,
		done:           make(chan struct{}),
		last:           last,
	}
}

// add queues an event. upstreamSeq is the Foundry sequence number the event
// came from (-1 if none); a merged delta carries the newest one. Text is
// merged into the queued delta up to maxText and split beyond it; only
// the part that ends an upstream delta carries its sequence number, so that
// a new owner never skips text that was not stored.
func (r *relay) add(ev events.RunEvent, upstreamSeq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.err != nil {
		return
	}
	if ev.Type == events.TypeTextDelta {
		r.addText(ev.Text, upstreamSeq)
	} else {
		r.pending = append(r.pending, pendingEvent{ev: ev, upstreamSeq: upstreamSeq})
	}
	r.kick()
}

// addText merges text into the queued delta, splitting at maxText.
// Called with mu held.
func (r *relay) addText(text string, upstreamSeq int64) {
	for {
		var tail *pendingEvent
		if n := len(r.pending); n > 0 && r.pending[n-1].ev.Type == events.TypeTextDelta && len(r.pending[n-1].text) < r.maxText {
			tail = &r.pending[n-1]
		} else {
			tail = r.newDelta()
		}
		room := r.maxText - len(tail.text)
		if len(text) <= room {
			if len(tail.text) > 0 {
				r.metrics.deltasCoalesced.Inc()
			}
			tail.text = append(tail.text, text...)
			if upstreamSeq >= 0 {
				tail.upstreamSeq = upstreamSeq
			}
			return
		}
		cut := room
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		if cut == 0 && len(tail.text) == 0 {
			cut = room // not UTF-8 at all; cut anyway
		}
		tail.text = append(tail.text, text[:cut]...)
		text = text[cut:]
		// Force the rest into a new event.
		r.newDelta()
	}
}

// newDelta queues an empty text delta, on the spare buffer if there is one.
// Called with mu held.
func (r *relay) newDelta() *pendingEvent {
	r.pending = append(r.pending, pendingEvent{ev: events.RunEvent{Type: events.TypeTextDelta}, text: r.spare, upstreamSeq: -1})
	r.spare = nil
	return &r.pending[len(r.pending)-1]
}

// start lets the relay publish on ctx from now on; onFail is called once
// with the error that stops it early (not when ctx ends while nothing is
// queued). done is closed once close was called and the queue is empty,
// or the relay failed, and no publish is in flight.
func (r *relay) start(ctx context.Context, onFail func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx, r.onFail, r.started = ctx, onFail, true
	// No goroutine waits for ctx: the relay fails when it ends.
	r.unwatch = context.AfterFunc(ctx, func() { r.fail(context.Cause(ctx)) })
	r.kick()
}

// run publishes queued events until close is called and the queue is empty,
// a publish fails for good, or ctx ends: start, then wait for done.
func (r *relay) run(ctx context.Context, onFail func(error)) {
	r.start(ctx, onFail)
	<-r.done
}

// kick starts a drain goroutine if events wait and none runs, or arms the
// timer of a held delta; it closes done once the relay is finished.
// Called with mu held.
func (r *relay) kick() {
	if !r.started || r.draining {
		return
	}
	if r.err != nil || len(r.pending) == 0 {
		r.signalIdle()
		if r.err != nil || r.closed {
			r.finish()
		}
		return
	}
	if wait := r.holdFor(); wait > 0 {
		// A lone text delta waits for more text, at most until
		// EventInterval has passed since the last publish.
		if r.held == nil {
			r.held = time.AfterFunc(wait, func() {
				r.mu.Lock()
				r.held = nil
				r.kick()
				r.mu.Unlock()
			})
		}
		return
	}
	r.draining = true
	r.drainers.start(r)
}

// finish closes done, once. Called with mu held.
func (r *relay) finish() {
	select {
	case <-r.done:
	default:
		close(r.done)
		if r.unwatch != nil {
			r.unwatch()
		}
		if r.held != nil {
			r.held.Stop()
			r.held = nil
		}
	}
}

// drain publishes the queued events one at a time, then returns.
func (r *relay) drain() {
	for {
		r.mu.Lock()
		if r.err != nil || len(r.pending) == 0 || r.holdFor() > 0 {
			r.draining = false
			r.kick()
			r.mu.Unlock()
			return
		}
		pe := r.pending[0]
		r.pending[0] = pendingEvent{}
		r.pending = r.pending[1:]
		if len(r.pending) == 0 {
			r.pending = r.pending[:0:0] // let the drained array go
		}
		r.inflight = true
		pe.ev.RunID = r.runID
		if pe.ev.Type == events.TypeTextDelta {
			pe.ev.Text = string(pe.text)
		}
		if pe.ev.Seq == 0 {
			pe.ev.Seq = r.last.Seq + 1
			pe.ev.Time = time.Now().UTC()
		} else if pe.ev.Seq != r.last.Seq+1 {
			// A terminal event numbered in advance (finish) no longer fits.
			r.mu.Unlock()
			r.failDrain(fmt.Errorf("%w: run %s: event seq %d does not follow stored seq %d", ErrLostOwnership, r.runID, pe.ev.Seq, r.last.Seq))
			return
		}
		if pe.upstreamSeq < 0 {
			// Carry the cursor forward: the subject's last event always tells
			// a new owner where to re-attach upstream.
			pe.upstreamSeq = r.last.UpstreamSeq
		}
		expect := r.last.StreamSeq
		ctx := r.ctx
		r.mu.Unlock()

		streamSeq, err := r.publish(ctx, pe, expect)
		if err != nil {
			r.failDrain(err)
			return
		}
		r.mu.Lock()
		r.inflight = false
		r.lastPublish = time.Now()
		if r.activity != nil {
			r.activity.Store(r.lastPublish.UnixNano())
		}
		r.last = position{Seq: pe.ev.Seq, StreamSeq: streamSeq, UpstreamSeq: pe.upstreamSeq, Type: pe.ev.Type}
		if pe.text != nil && cap(pe.text) <= maxSpare && r.spare == nil {
			r.spare = pe.text[:0]
		}
		r.mu.Unlock()
	}
}

// failDrain ends a drain goroutine with err, and tells onFail.
func (r *relay) failDrain(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.inflight = false
	r.draining = false
	r.kick()
	onFail := r.onFail
	r.mu.Unlock()
	onFail(err)
}

// holdFor is how long the head of the queue should wait before it is
// published: only a lone text delta waits, and only while nobody flushes.
// Called with mu held.
func (r *relay) holdFor() time.Duration {
	if r.interval <= 0 || r.closed || r.idle != nil || len(r.pending) != 1 || r.pending[0].ev.Type != events.TypeTextDelta {
		return 0
	}
	return r.interval - time.Since(r.lastPublish)
}

// fail stops the relay with err (its ctx ended). A publish in flight ends
// on its own.
func (r *relay) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	if !r.draining {
		r.inflight = false
	}
	r.kick()
}

// signalIdle wakes flush waiters. Called with mu held.
func (r *relay) signalIdle() {
	if r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

// flush waits until every queued event is stored, or the relay failed.
func (r *relay) flush(ctx context.Context) error {
	for {
		r.mu.Lock()
		if r.err != nil {
			err := r.err
			r.mu.Unlock()
			return err
		}
		if len(r.pending) == 0 && !r.inflight {
			r.mu.Unlock()
			return nil
		}
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle := r.idle
		r.kick() // a held delta goes out now
		r.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("consumer: flush events of run %s: %w", r.runID, context.Cause(ctx))
		}
	}
}

// nextSeq is the seq the next event will get once the queue is empty;
// call it after flush.
func (r *relay) nextSeq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last.Seq + uint64(len(r.pending)) + 1
}

// tail returns what is stored on the subject.
func (r *relay) tail() position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// close lets the relay finish once the queue is empty.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.kick()
	r.mu.Unlock()
}

// publish stores one event, retrying what may succeed on a retry (timeouts,
// a reconnecting connection, JetStream briefly unavailable, a deleted
// stream being recreated) until ctx ends, and logging the retries. The retry
// keeps the message id, and a fence failure caused by our own earlier
// attempt having been stored is recognised as success. A message the server
// refuses for its size fails at once (errPublishRefused).
func (r *relay) publish(ctx context.Context, pe pendingEvent, expect uint64) (uint64, error) {
	msg, err := newEventMsg(r.names, pe.ev, pe.upstreamSeq)
	if err != nil {
		return 0, fmt.Errorf("consumer: %w", err)
	}
	tracing.Inject(ctx, msg.Header) // the run's trace context

	b := retry.Backoff(20*time.Millisecond, time.Second)
	lost := func() (uint64, error) {
		return 0, fmt.Errorf("%w: run %s: another writer stored an event on %s", ErrLostOwnership, r.runID, r.subject)
	}
	var refusedSince time.Time // JetStream refuses this event, its store full, since
	for retries := 0; ; retries++ {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := r.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequencePerSubject(expect))
		cancel()
		if r.store != nil && r.store.observe("event", err) {
			if refusedSince.IsZero() {
				refusedSince = start
			}
			if r.onStoreFull != nil && time.Since(refusedSince) >= r.storeFullAfter {
				r.onStoreFull()
				r.onStoreFull = nil // once
			}
		}
		if err == nil && ack.Duplicate {
			// The dedupe window holds an event with this id: an earlier
			// attempt of ours, or the same seq from another writer.
			if m, err := r.stream.GetMsg(ctx, ack.Sequence); err == nil && bytes.Equal(m.Data, msg.Data) {
				return ack.Sequence, nil
			}
			return lost()
		}
		if err == nil {
			r.metrics.publishSeconds.Observe(time.Since(start).Seconds())
			r.metrics.eventsPublished.WithLabelValues(string(pe.ev.Type)).Inc()
			return ack.Sequence, nil
		}
		if jserr.WrongLastSequence(err) {
			// Either an earlier attempt of ours was stored and its ack lost,
			// or another writer got there first. Only the exact bytes tell:
			// another writer uses the same message ids.
			if m, err := r.stream.GetLastMsgForSubject(ctx, r.subject); err == nil && bytes.Equal(m.Data, msg.Data) {
				return m.Sequence, nil
			}
			return lost()
		}
		if isTooLarge(err) {
			return 0, fmt.Errorf("consumer: publish %s event of run %s (%d bytes): %w: %w", pe.ev.Type, r.runID, len(msg.Data), errPublishRefused, err)
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("consumer: publish %s event of run %s: %w", pe.ev.Type, r.runID, context.Cause(ctx))
		}
		if jserr.MissingResource(err) && r.onMissing != nil {
			r.onMissing()
		}
		r.metrics.publishRetries.Inc()
		if retries%20 == 0 {
			r.log.Warn().Err(err).Str("type", string(pe.ev.Type)).Uint64("seq", pe.ev.Seq).Int("retries", retries).
				Msg("publish run event; retrying")
		}
		if !retry.Sleep(ctx, b.NextBackOff()) {
			return 0, fmt.Errorf("consumer: publish %s event of run %s: %w", pe.ev.Type, r.runID, context.Cause(ctx))
		}
	}
}

// isTooLarge reports a message the server refuses for its size, whatever
// the retry.
func isTooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum)
}
