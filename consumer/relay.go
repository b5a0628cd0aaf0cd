package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
)

// relay publishes one run's events on its event subject with exactly one
// publish in flight. Events added while a publish waits for its ack queue up;
// consecutive text deltas merge into one event, so a slow store gets fewer,
// larger events and a fast one gets every delta at once. With an interval,
// a lone text delta also waits until that long after the previous publish,
// trading that much token latency for fewer, larger events.
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

	mu       sync.Mutex
	pending  []pendingEvent
	inflight bool
	closed   bool
	err      error
	wake     chan struct{} // capacity 1: something was added or closed
	idle     chan struct{} // closed when pending drains or the relay fails; nil if nobody waits

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

type pendingEvent struct {
	ev          events.RunEvent
	upstreamSeq int64 // -1: not tied to an upstream event
}

func newRelay(js jetstream.JetStream, stream jetstream.Stream, n events.Names, runID string, last position, interval time.Duration, m *metrics) *relay {
	return &relay{
		interval: interval,
		js:       js,
		stream:   stream,
		names:    n,
		runID:    runID,
		subject:  n.EventSubject(runID),
		metrics:  m,
		wake:     make(chan struct{}, 1),
		last:     last,
	}
}

// add queues an event. upstreamSeq is the Foundry sequence number the event
// came from (-1 if none); a merged delta carries the newest one.
func (r *relay) add(ev events.RunEvent, upstreamSeq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.err != nil {
		return
	}
	if ev.Type == events.TypeTextDelta && len(r.pending) > 0 {
		tail := &r.pending[len(r.pending)-1]
		if tail.ev.Type == events.TypeTextDelta {
			tail.ev.Text += ev.Text
			if upstreamSeq >= 0 {
				tail.upstreamSeq = upstreamSeq
			}
			r.metrics.deltasCoalesced.Inc()
			return
		}
	}
	r.pending = append(r.pending, pendingEvent{ev: ev, upstreamSeq: upstreamSeq})
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run publishes queued events until close is called and the queue is empty,
// a publish fails for good, or ctx ends. onFail is called once with the
// error that stopped it early.
func (r *relay) run(ctx context.Context, onFail func(error)) {
	for {
		r.mu.Lock()
		for len(r.pending) == 0 {
			if r.closed {
				r.signalIdle()
				r.mu.Unlock()
				return
			}
			r.signalIdle()
			r.mu.Unlock()
			select {
			case <-r.wake:
			case <-ctx.Done():
				r.fail(context.Cause(ctx))
				return
			}
			r.mu.Lock()
		}
		if wait := r.holdFor(); wait > 0 {
			// A lone text delta waits for more text, at most until
			// EventInterval has passed since the last publish.
			r.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.wake:
			case <-ctx.Done():
				t.Stop()
				r.fail(context.Cause(ctx))
				return
			}
			t.Stop()
			continue
		}
		pe := r.pending[0]
		r.pending = r.pending[1:]
		r.inflight = true
		pe.ev.RunID = r.runID
		pe.ev.Seq = r.last.Seq + 1
		pe.ev.Time = time.Now().UTC()
		if pe.upstreamSeq < 0 {
			// Carry the cursor forward: the subject's last event always tells
			// a new owner where to re-attach upstream.
			pe.upstreamSeq = r.last.UpstreamSeq
		}
		expect := r.last.StreamSeq
		r.mu.Unlock()

		streamSeq, err := r.publish(ctx, pe, expect)
		if err != nil {
			r.fail(err)
			onFail(err)
			return
		}
		r.mu.Lock()
		r.inflight = false
		r.lastPublish = time.Now()
		r.last = position{Seq: pe.ev.Seq, StreamSeq: streamSeq, UpstreamSeq: pe.upstreamSeq, Type: pe.ev.Type}
		r.mu.Unlock()
	}
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

func (r *relay) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	r.inflight = false
	r.signalIdle()
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
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}: // a held delta goes out now
		default:
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("consumer: flush events of run %s: %w", r.runID, context.Cause(ctx))
		}
	}
}

// close lets run return once the queue is empty.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// publish stores one event, retrying what may succeed on a retry (timeouts,
// a reconnecting connection, JetStream briefly unavailable). The retry keeps
// the message id, and a fence failure caused by our own earlier attempt
// having been stored is recognised as success.
func (r *relay) publish(ctx context.Context, pe pendingEvent, expect uint64) (uint64, error) {
	msg, err := events.NewEventMsg(r.names, pe.ev, pe.upstreamSeq)
	if err != nil {
		return 0, fmt.Errorf("consumer: %w", err)
	}
	backoff := 20 * time.Millisecond
	lost := func() (uint64, error) {
		return 0, fmt.Errorf("%w: run %s: another writer stored an event on %s", ErrLostOwnership, r.runID, r.subject)
	}
	for {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := r.js.PublishMsg(pctx, msg, jetstream.WithExpectLastSequencePerSubject(expect))
		cancel()
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
		if isWrongLastSequence(err) {
			// Either an earlier attempt of ours was stored and its ack lost,
			// or another writer got there first. Only the exact bytes tell:
			// another writer uses the same message ids.
			if m, err := r.stream.GetLastMsgForSubject(ctx, r.subject); err == nil && bytes.Equal(m.Data, msg.Data) {
				return m.Sequence, nil
			}
			return lost()
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("consumer: publish %s event of run %s: %w", pe.ev.Type, r.runID, context.Cause(ctx))
		}
		r.metrics.publishRetries.Inc()
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return 0, fmt.Errorf("consumer: publish %s event of run %s: %w", pe.ev.Type, r.runID, context.Cause(ctx))
		}
		backoff = min(2*backoff, time.Second)
	}
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
