package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// From says where a Watch starts.
type From int

const (
	// FromStart replays every stored event of the run, then follows live ones.
	FromStart From = iota
	// FromNow follows events published after the watch starts; if the run
	// has already finished it delivers only the terminal event.
	FromNow
)

// WatchOptions configure a Watch. The zero value watches from the start
// with heartbeats on.
type WatchOptions struct {
	// From is where to start. Default FromStart.
	From From
	// NoHeartbeat turns off the watcher heartbeats on <prefix>.watch.<run_id>
	// (they keep a run with cancel_on_disconnect_seconds alive).
	NoHeartbeat bool
	// HeartbeatInterval overrides ClientConfig.HeartbeatInterval.
	HeartbeatInterval time.Duration
}

// Watch follows the events of one run, in order. Next returns them one by
// one and io.EOF after the terminal event; Close releases everything. A
// Watch is meant for one reading goroutine; Close may be called from any.
type Watch struct {
	c     *Client
	runID string

	ctx    context.Context // ends with the caller's ctx or Close
	cancel context.CancelCauseFunc

	hbStop context.CancelFunc
	hbDone chan struct{}

	nextMu  sync.Mutex // held by Next; Close takes it to stop the iterator
	iter    jetstream.MessagesContext
	queue   []RunEvent // events to return before reading the iterator
	lastSeq uint64     // seq of the last event returned
	pending *RunEvent  // the event after a gap, returned by the next call
	err     error      // sticky setup error
	done    bool       // terminal event returned
	closed  bool
}

// Watch starts following runID's events. ctx bounds the whole watch (when
// it ends, heartbeats stop and Next fails with its cause). While JetStream
// cannot answer for a moment (a fail-over on a cluster), the setup waits
// for it within ctx. Setup errors (a bad run id, a missing events stream)
// are returned by the first Next.
// Heartbeats start at once, even before the first Next.
func (c *Client) Watch(ctx context.Context, runID string, opts WatchOptions) *Watch {
	wctx, cancel := context.WithCancelCause(ctx)
	w := &Watch{c: c, runID: runID, ctx: wctx, cancel: cancel}
	if !ValidRunID(runID) {
		w.err = fmt.Errorf("events: watch run %q: %w", runID, ErrBadRunID)
		return w
	}
	if !opts.NoHeartbeat {
		interval := opts.HeartbeatInterval
		if interval <= 0 {
			interval = c.cfg.HeartbeatInterval
		}
		hctx, stop := context.WithCancel(wctx)
		w.hbStop, w.hbDone = stop, make(chan struct{})
		go w.heartbeat(hctx, interval)
	}
	if err := w.setupRetrying(opts.From); err != nil {
		w.err = err
		w.stopHeartbeat()
	}
	return w
}

// heartbeat publishes an empty message on the watch subject at once and
// then every interval until ctx ends.
func (w *Watch) heartbeat(ctx context.Context, interval time.Duration) {
	defer close(w.hbDone)
	subject := w.c.names.WatchSubject(w.runID)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_ = w.c.nc.Publish(subject, nil) // best effort: a lost heartbeat is covered by the next
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Watch) stopHeartbeat() {
	if w.hbStop != nil {
		w.hbStop()
		<-w.hbDone
	}
}

// WatchSetupAttempt bounds each attempt to set a Watch up (reading the
// run's last event, creating its consumer). While a stream has no leader
// (a JetStream cluster changing leaders) its API requests go unanswered or
// are refused with a 503; the next attempt may reach the new leader.
const WatchSetupAttempt = 5 * time.Second

// setupRetrying looks the run up and starts the consumer, retrying (with
// backoff, for as long as the Watch's context lives) while JetStream is
// unavailable for a moment: a request not answered in WatchSetupAttempt, a
// 503, or no responder to a request to the existing stream, as during a
// fail-over.
func (w *Watch) setupRetrying(from From) error {
	b := retry.Backoff(100*time.Millisecond, 2*time.Second)
	for {
		ctx, cancel := context.WithTimeout(w.ctx, WatchSetupAttempt)
		err := w.setupOnce(ctx, from)
		cancel()
		if err == nil || w.ctx.Err() != nil || !(jserr.Unavailable(err) || errors.Is(err, errNotServing)) {
			return err
		}
		retry.Sleep(w.ctx, b.NextBackOff())
	}
}

// errNotServing marks a request to the events stream that nothing
// answered although the stream exists (its info was just read): during a
// fail-over its replicas may not serve direct gets yet.
var errNotServing = errors.New("the events stream is not serving requests yet")

func notServing(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: %w", errNotServing, err)
	}
	return err
}

func (w *Watch) setupOnce(ctx context.Context, from From) error {
	w.queue, w.lastSeq = nil, 0
	subject := w.c.names.EventSubject(w.runID)
	stream, err := w.c.js.Stream(ctx, w.c.names.EventsStream())
	if err != nil {
		return fmt.Errorf("events: watch run %s: open stream %s: %w", w.runID, w.c.names.EventsStream(), err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	err = notServing(err)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("events: watch run %s: read last event: %w", w.runID, err)
	}
	if last == nil && w.expired(ctx) {
		return fmt.Errorf("events: watch run %s: %w", w.runID, ErrEventsUnavailable)
	}
	occ := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if from == FromNow && last != nil {
		ev, err := DecodeRunEvent(last.Data)
		if err != nil {
			return fmt.Errorf("events: watch run %s: last event (stream seq %d): %w", w.runID, last.Sequence, err)
		}
		if ev.Type.Terminal() {
			w.queue = append(w.queue, ev)
			return nil
		}
		// Continue right after the last stored event: nothing published
		// between this read and the consumer's creation is missed.
		w.lastSeq = ev.Seq
		occ.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		occ.OptStartSeq = last.Sequence + 1
	}
	cons, err := w.c.js.OrderedConsumer(ctx, w.c.names.EventsStream(), occ)
	err = notServing(err)
	if err != nil {
		return fmt.Errorf("events: watch run %s: create consumer: %w", w.runID, err)
	}
	iter, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("events: watch run %s: start consumer: %w", w.runID, err)
	}
	w.iter = iter
	return nil
}

// expiredAfter is how long after a run ended its terminal event must be
// stored: a worker records the end in the state bucket first and publishes
// the terminal event right after (or, if it failed meanwhile, the next
// worker to see the job does).
const expiredAfter = 2 * time.Minute

// expired reports whether the state bucket says the run ended long enough
// ago that its missing events must have expired; any look-up error counts
// as "not known to be expired".
func (w *Watch) expired(ctx context.Context) bool {
	st, _, err := w.c.State(ctx, w.runID)
	if err != nil || !st.Finished() {
		return false
	}
	return st.FinishedAt == nil || time.Since(*st.FinishedAt) > expiredAfter
}

// Next returns the run's next event. After the terminal event it returns
// io.EOF. Other errors:
//   - an error wrapping ErrSeqGap when the next event's seq skips numbers
//     (e.g. the oldest events expired); the event itself is returned by the
//     following call, so callers may log the gap and go on;
//   - an error wrapping ErrBadEvent for a message that is not a RunEvent of
//     this run; the watch goes on with the next message;
//   - ErrWatchClosed after Close, or the cause of the Watch's context;
//   - ctx's error when ctx ends first (the watch stays usable).
//
// Events repeated with a seq already returned are dropped.
func (w *Watch) Next(ctx context.Context) (RunEvent, error) {
	w.nextMu.Lock()
	defer w.nextMu.Unlock()
	switch {
	case w.closed:
		return RunEvent{}, ErrWatchClosed
	case w.done:
		return RunEvent{}, io.EOF
	case w.err != nil:
		return RunEvent{}, w.err
	}
	if len(w.queue) > 0 {
		ev := w.queue[0]
		w.queue = w.queue[1:]
		return w.deliver(ev), nil
	}
	if w.pending != nil {
		ev := *w.pending
		w.pending = nil
		return w.deliver(ev), nil
	}
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(w.ctx, cancel)
	defer stop()
	for {
		msg, err := w.iter.Next(jetstream.NextContext(nctx))
		if err != nil {
			if w.ctx.Err() != nil {
				return RunEvent{}, w.closedErr()
			}
			if ctx.Err() != nil {
				return RunEvent{}, ctx.Err()
			}
			w.err = fmt.Errorf("events: watch run %s: %w", w.runID, err)
			return RunEvent{}, w.err
		}
		ev, err := DecodeRunEvent(msg.Data())
		if err == nil && ev.RunID != w.runID {
			err = fmt.Errorf("%w: run_id %q on the subject of run %s", ErrBadEvent, ev.RunID, w.runID)
		}
		if err != nil {
			var seq uint64
			if md, merr := msg.Metadata(); merr == nil {
				seq = md.Sequence.Stream
			}
			return RunEvent{}, fmt.Errorf("events: watch run %s: message at stream seq %d: %w", w.runID, seq, err)
		}
		if ev.Seq <= w.lastSeq {
			continue // repeated event
		}
		if ev.Seq != w.lastSeq+1 {
			w.pending = &ev
			return RunEvent{}, fmt.Errorf("events: watch run %s: %w: after seq %d came seq %d", w.runID, ErrSeqGap, w.lastSeq, ev.Seq)
		}
		return w.deliver(ev), nil
	}
}

// deliver records ev as returned and, for a terminal event, ends the
// heartbeats and the consumer.
func (w *Watch) deliver(ev RunEvent) RunEvent {
	if ev.Seq > w.lastSeq {
		w.lastSeq = ev.Seq
	}
	if ev.Type.Terminal() {
		w.done = true
		w.stopHeartbeat()
		if w.iter != nil {
			w.iter.Stop()
		}
	}
	return ev
}

func (w *Watch) closedErr() error {
	if cause := context.Cause(w.ctx); cause != nil && !errors.Is(cause, ErrWatchClosed) {
		return fmt.Errorf("events: watch run %s: %w", w.runID, cause)
	}
	return ErrWatchClosed
}

// RunID returns the watched run's id.
func (w *Watch) RunID() string { return w.runID }

// Close stops the heartbeats and the consumer and waits for them. It is
// safe to call more than once and while Next is blocked (Next then
// returns ErrWatchClosed).
func (w *Watch) Close() error {
	w.cancel(ErrWatchClosed)
	w.stopHeartbeat()
	w.nextMu.Lock()
	defer w.nextMu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.iter != nil {
		w.iter.Stop()
	}
	return nil
}
