package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// claim records this worker as the run's owner (claimRun). One attempt: a
// claim that does not land leaves the job for a later delivery.
func (r *run) claim(digest string, fair events.Fairness, timeout time.Duration, answered bool) (events.RunState, error) {
	st, err := r.w.states.Upsert(r.hard, r.id, func(s *events.RunState, exists bool) error {
		if err := claimStep(s, exists, r.owner, digest, timeout, answered, time.Now().UTC()); err != nil {
			return err
		}
		if fair.Key != "" {
			s.FairnessKey, s.Priority = fair.Key, fair.Priority
		}
		s.QueueReason = "" // taken: it waits no more
		return nil
	})
	if err == nil {
		r.setState(st)
	}
	return st, err
}

// persist applies a lifecycle transition to the run's record. A write that
// does not land (NATS unavailable, the compare-and-set lost too often) is
// retried until it does or the run is aborted; the transition's own answer
// (a decision such as errNotOwner, or an unreadable record) is returned at
// once.
func (r *run) persist(what string, fn func(*events.RunState, bool) error) (events.RunState, error) {
	return r.persistUntil(r.hard, what, fn)
}

// persistUntil is persist that gives up when ctx (r.hard or a context
// derived from it) ends.
func (r *run) persistUntil(ctx context.Context, what string, fn func(*events.RunState, bool) error) (events.RunState, error) {
	b := retry.Backoff(50*time.Millisecond, 2*time.Second)
	for tries := 0; ; tries++ {
		st, err := r.w.states.Upsert(ctx, r.id, fn)
		switch {
		case err == nil:
			r.setState(st)
			return st, nil
		case isDecision(err) || errors.Is(err, events.ErrStateCorrupt) || ctx.Err() != nil:
			return st, err
		}
		if tries%10 == 0 {
			r.logger().Warn().Err(err).Int("tries", tries+1).Msg(what + " in the state bucket; retrying")
		}
		if jserr.MissingResource(err) {
			r.w.resourcesMissing()
		}
		retry.Sleep(ctx, b.NextBackOff())
	}
}

func (r *run) setState(st events.RunState) {
	r.mu.Lock()
	r.state = st
	r.mu.Unlock()
}

func (r *run) lastState() events.RunState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}
