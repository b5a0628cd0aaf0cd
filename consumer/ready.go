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

	upstream upstreamCheck
}

// upstreamCheck is the state of CheckUpstream.
type upstreamCheck struct {
	mu        sync.Mutex                  // held during a check: one at a time
	check     func(context.Context) error // nil: no check
	passed    bool                        // a check passed: not run again
	checkedAt time.Time
	err       error // the last failed check's error
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
// at most once per Config.ReadyCheckInterval, with six JetStream API calls)
// the pull loop is alive and JetStream has not refused a write for want of
// space in the last few seconds; otherwise an error wrapping ErrNotReady whose
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
	if err := w.store.refusing(time.Now()); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if err := w.upstreamReady(ctx); err != nil {
		return err
	}
	return w.resourcesReady(ctx)
}

// CheckUpstream runs check, a cheap authenticated request to Foundry
// (foundry.Client.Check), now, and returns its error. Until a check
// passes, Ready reports the failure ("upstream: <why>") and runs check
// again at most once per Config.ReadyCheckInterval; once one passed, it is
// not run again: it tests the worker's configuration (endpoint, TLS,
// credentials), not Foundry's health, which each run's retries handle.
// Runs are taken meanwhile: they end with the code of the failure
// (upstream_unreachable, upstream_tls_error, auth_error). Call it before
// or after Run; without a call Ready checks nothing upstream.
func (w *Worker) CheckUpstream(ctx context.Context, check func(context.Context) error) error {
	u := &w.ready.upstream
	u.mu.Lock()
	defer u.mu.Unlock()
	u.check, u.passed = check, false
	return u.run(ctx)
}

// run runs the check, bounded to 10s, and records its result; u.mu is held.
func (u *upstreamCheck) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := u.check(ctx)
	u.checkedAt, u.err, u.passed = time.Now(), err, err == nil
	return err
}

// upstreamReady is Ready's part of CheckUpstream: nil once a check passed
// (or none was asked for), else the last failure, after running the check
// again if the last one is older than ReadyCheckInterval.
func (w *Worker) upstreamReady(ctx context.Context) error {
	u := &w.ready.upstream
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.check == nil || u.passed {
		return nil
	}
	err := u.err
	if time.Since(u.checkedAt) >= w.cfg.ReadyCheckInterval {
		err = u.run(ctx)
	}
	if err != nil {
		return fmt.Errorf("%w: upstream: %w", ErrNotReady, err)
	}
	return nil
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

// checkResources reads the info of each stream (the bucket's included) and
// of the worker consumer: seven JetStream API calls, each one the worker role
// may make already.
func (w *Worker) checkResources(ctx context.Context) error {
	streams := []struct{ name, what string }{
		{w.names.RunsStream(), "stream " + w.names.RunsStream()},
		{w.names.EventsStream(), "stream " + w.names.EventsStream()},
		{w.names.DeadStream(), "stream " + w.names.DeadStream()},
		{w.names.CancelsStream(), "stream " + w.names.CancelsStream()},
		{w.names.InputsStream(), "stream " + w.names.InputsStream()},
		{"KV_" + w.names.Bucket(), "bucket " + w.names.Bucket()},
	}
	for _, s := range streams {
		if _, err := w.js.Stream(ctx, s.name); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("%s %w", s.what, errResourceMissing)
			}
			return fmt.Errorf("jetstream: %s: %w", s.what, err)
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
