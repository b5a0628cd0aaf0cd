package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotReady is wrapped by every error Ready returns; the rest of the
// message is a one-line reason.
var ErrNotReady = errors.New("not ready")

// readiness is what Ready looks at: the pull loop's heartbeat, and the last
// check that the streams, consumer and bucket exist (reused for
// Config.ReadyCheckInterval).
type readiness struct {
	running atomic.Bool  // the pull loop has started and not ended
	ended   atomic.Bool  // the pull loop has ended
	beat    atomic.Int64 // unix nanos of the pull loop's last heartbeat

	mu        sync.Mutex // held during a resource check: one at a time
	checkedAt time.Time  // zero: check again
	checkErr  error      // the last check's result
}

// heartbeat records that the pull loop is alive.
func (r *readiness) heartbeat(now time.Time) { r.beat.Store(now.UnixNano()) }

// invalidate makes the next Ready check the resources again.
func (r *readiness) invalidate() {
	r.mu.Lock()
	r.checkedAt = time.Time{}
	r.mu.Unlock()
}

// pullLoop says whether the pull loop is alive at now: started, not ended,
// and with a heartbeat no older than stale.
func (r *readiness) pullLoop(now time.Time, stale time.Duration) error {
	switch {
	case r.ended.Load():
		return fmt.Errorf("%w: pull loop stopped", ErrNotReady)
	case !r.running.Load():
		return fmt.Errorf("%w: starting: streams, consumer and bucket not provisioned yet", ErrNotReady)
	}
	if age := now.Sub(time.Unix(0, r.beat.Load())); age > stale {
		return fmt.Errorf("%w: pull loop: no heartbeat for %s (limit %s)", ErrNotReady, age.Round(time.Millisecond), stale)
	}
	return nil
}

// pullStaleAfter is how long the pull loop may go without a heartbeat
// before Ready says it is stuck: one fetch lasts at most PollWait, and a
// loop waiting for a free slot beats every PollWait.
func (w *Worker) pullStaleAfter() time.Duration { return 5*w.cfg.PollWait + 5*time.Second }

// Ready reports whether the worker can take and run jobs: nil while its
// NATS connections are up, the streams, consumer and bucket exist (checked
// at most once per Config.ReadyCheckInterval, with two JetStream API calls)
// and the pull loop is alive; otherwise an error wrapping ErrNotReady whose
// message is a one-line reason. It is what /readyz answers. Safe for
// concurrent use; ctx bounds a resource check.
func (w *Worker) Ready(ctx context.Context) error {
	if err := w.ready.pullLoop(time.Now(), w.pullStaleAfter()); err != nil {
		return err
	}
	if !w.nc.IsConnected() {
		return fmt.Errorf("%w: nats: %s", ErrNotReady, w.nc.Status())
	}
	if pc := w.pubConn.Load(); pc != nil && !pc.IsConnected() {
		return fmt.Errorf("%w: nats (event publishing connection): %s", ErrNotReady, pc.Status())
	}
	return w.resourcesReady(ctx)
}

// resourcesReady returns the result of the last resource check, checking
// again if it is older than ReadyCheckInterval.
func (w *Worker) resourcesReady(ctx context.Context) error {
	w.ready.mu.Lock()
	defer w.ready.mu.Unlock()
	if !w.ready.checkedAt.IsZero() && time.Since(w.ready.checkedAt) < w.cfg.ReadyCheckInterval {
		return w.ready.checkErr
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := w.checkResources(ctx)
	if err != nil && !errors.Is(err, errResourceMissing) {
		// A check that could not be made is not cached: the next probe tries again.
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrNotReady, err)
		w.resourcesMissing() // recreate them, as a failed call would
	}
	w.ready.checkedAt, w.ready.checkErr = time.Now(), err
	return err
}

// errResourceMissing marks a stream, consumer or bucket that does not exist.
var errResourceMissing = errors.New("missing")

// checkResources lists the account's streams (one API call) and reads the
// worker consumer's info (another).
func (w *Worker) checkResources(ctx context.Context) error {
	want := []string{w.names.RunsStream(), w.names.EventsStream(), w.names.DeadStream(), w.names.CancelsStream(), "KV_" + w.names.Bucket()}
	have := make(map[string]bool, len(want))
	lister := w.js.StreamNames(ctx)
	for name := range lister.Name() {
		have[name] = true
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("jetstream: list streams: %w", err)
	}
	for _, name := range want {
		if !have[name] {
			what := "stream " + name
			if name == want[len(want)-1] {
				what = "bucket " + w.names.Bucket()
			}
			return fmt.Errorf("%s %w", what, errResourceMissing)
		}
	}
	if _, err := w.res.Consumer.Info(ctx); err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("consumer %s %w", w.names.Consumer(), errResourceMissing)
		}
		return fmt.Errorf("jetstream: consumer %s: %w", w.names.Consumer(), err)
	}
	return nil
}
