package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// The state bucket as the worker writes it: compare-and-set, so that
// concurrent writers (workers answering cancels, owners, zombies) never
// overwrite each other's changes; the lifecycle transitions are the
// functions applied.

// maxCASAttempts bounds the read-modify-write retries of Update and Upsert.
const maxCASAttempts = 32

// stateStore reads and writes RunStates in the KV bucket with
// compare-and-set, so that concurrent writers (workers, cancel helpers)
// never overwrite each other's changes. Safe for concurrent use.
type stateStore struct {
	kv    jetstream.KeyValue
	nc    *nats.Conn // reads go to the bucket's stream leader (events.ReadState)
	now   func() time.Time
	store *storeWatch // told of each write's result; nil: nobody listens
	last  lastWrites
}

// lastWrites keeps what this worker last wrote of each run it is
// working on, with its revision, so that an update can compare-and-set
// against it without first asking the bucket's stream leader: a run's
// owner is nearly always the only writer of its record, and a leader read
// (a JetStream API request) costs NATS more than the write itself. A
// record someone else wrote meanwhile makes the write fail its revision
// check, and the update then reads the record and goes on as before.
type lastWrites struct {
	mu sync.Mutex
	m  map[string]lastWrite
}

type lastWrite struct {
	data []byte // the record as stored: decoded afresh for every use
	rev  uint64
}

// maxLastWrites bounds lastWrites; past it the map starts again empty.
// Entries leave when a run's record says it finished and when the run
// leaves the worker (forget), so this is only a backstop.
const maxLastWrites = 1 << 16

func (l *lastWrites) get(runID string) (events.RunState, uint64, bool) {
	l.mu.Lock()
	e, ok := l.m[runID]
	l.mu.Unlock()
	if !ok {
		return events.RunState{}, 0, false
	}
	var st events.RunState
	if err := json.Unmarshal(e.data, &st); err != nil {
		return events.RunState{}, 0, false
	}
	return st, e.rev, true
}

func (l *lastWrites) put(runID string, st events.RunState, data []byte, rev uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st.Finished() {
		delete(l.m, runID)
		return
	}
	if l.m == nil || len(l.m) >= maxLastWrites {
		l.m = make(map[string]lastWrite)
	}
	l.m[runID] = lastWrite{data: data, rev: rev}
}

func (l *lastWrites) forget(runID string) {
	l.mu.Lock()
	delete(l.m, runID)
	l.mu.Unlock()
}

// newStateStore wraps the state bucket (Resources.State, or
// js.KeyValue(ctx, names.Bucket())).
func newStateStore(kv jetstream.KeyValue, nc *nats.Conn) *stateStore {
	return &stateStore{kv: kv, nc: nc, now: time.Now}
}

// Get returns the state of runID and its KV revision (events.ReadState),
// read from the bucket's stream leader.
func (s *stateStore) Get(ctx context.Context, runID string) (events.RunState, uint64, error) {
	return events.ReadState(ctx, s.nc, s.kv.Bucket(), runID)
}

// unconfirmed returns this worker's last write of runID if it kept one,
// else the record as a direct get reads it; found is false if there is
// none, ok is false when neither answered.
func (s *stateStore) unconfirmed(ctx context.Context, runID string) (st events.RunState, rev uint64, found, ok bool) {
	if st, rev, ok := s.last.get(runID); ok {
		return st, rev, true, true
	}
	e, err := s.kv.Get(ctx, runID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return events.RunState{}, 0, false, true
	case err != nil:
		return events.RunState{}, 0, false, false
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return events.RunState{}, 0, false, false // the leader's read reports it
	}
	return st, e.Revision(), true, true
}

// forget drops what the store kept of runID's last write: the run left
// this worker, and the next update of it reads the record first.
func (s *stateStore) forget(runID string) { s.last.forget(runID) }

// Create stores st as a new state (st.RunID is the key). It fails with
// events.ErrStateExists if a state is already stored. CreatedAt and UpdatedAt are
// set to now when zero.
func (s *stateStore) Create(ctx context.Context, st events.RunState) (uint64, error) {
	if !events.ValidRunID(st.RunID) {
		return 0, fmt.Errorf("consumer: create state: run id %q: %w", st.RunID, events.ErrBadRunID)
	}
	now := s.now().UTC()
	if st.CreatedAt.IsZero() {
		st.CreatedAt = now
	}
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = now
	}
	data, err := json.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("consumer: encode state of run %s: %w", st.RunID, err)
	}
	s.last.forget(st.RunID)
	rev, err := s.kv.Create(ctx, st.RunID, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("consumer: create state of run %s: %w", st.RunID, events.ErrStateExists)
	}
	if err != nil {
		return 0, fmt.Errorf("consumer: create state of run %s: %w", st.RunID, err)
	}
	return rev, nil
}

// Update applies fn to the stored state of runID and writes the result
// with compare-and-set on the revision it read, retrying (re-reading and
// re-applying fn) when another writer got there first, at most 32 times
// (then events.ErrStateConflict). fn may run several times and must only change
// the state it is given. If fn returns errSkipUpdate nothing is written and
// the current state is returned; any other error from fn is returned as is.
// A missing state gives events.ErrStateNotFound. UpdatedAt is set to now.
func (s *stateStore) Update(ctx context.Context, runID string, fn func(*events.RunState) error) (events.RunState, error) {
	return s.update(ctx, runID, false, func(st *events.RunState, exists bool) error {
		if !exists {
			return fmt.Errorf("consumer: update state of run %s: %w", runID, events.ErrStateNotFound)
		}
		return fn(st)
	})
}

// Upsert is Update that also handles a missing state: fn gets exists=false
// and a zero events.RunState with RunID set, and the result is created (with
// compare-and-set against a concurrent create).
func (s *stateStore) Upsert(ctx context.Context, runID string, fn func(st *events.RunState, exists bool) error) (events.RunState, error) {
	return s.update(ctx, runID, true, fn)
}

func (s *stateStore) update(ctx context.Context, runID string, create bool, fn func(*events.RunState, bool) error) (events.RunState, error) {
	if !events.ValidRunID(runID) {
		return events.RunState{}, fmt.Errorf("consumer: update state: run id %q: %w", runID, events.ErrBadRunID)
	}
	b := retry.Backoff(time.Millisecond, 32*time.Millisecond)
	first := true
	for range maxCASAttempts {
		// The first attempt starts from this worker's last write of the
		// record, if it kept one, else from a direct get (any replica
		// answers; it may lag): the write's revision check stands in for a
		// read from the leader. Only a write can rely on such a start; a
		// decision not to write is taken again on the record as the leader
		// reads it, and so is every later attempt.
		var (
			cur     events.RunState
			rev     uint64
			err     error
			settled = true // cur is the record as the leader read it
		)
		if first {
			first = false
			var found, ok bool
			if cur, rev, found, ok = s.unconfirmed(ctx, runID); ok {
				settled = false
				if !found {
					err = events.ErrStateNotFound
				}
			}
		}
		if settled {
			cur, rev, err = s.Get(ctx, runID)
		}
		exists := err == nil
		if err != nil && !errors.Is(err, events.ErrStateNotFound) {
			return events.RunState{}, err
		}
		if !exists {
			cur = events.RunState{RunID: runID}
		}
		next := cur
		if err := fn(&next, exists); err != nil {
			if !settled {
				s.last.forget(runID)
				continue
			}
			if errors.Is(err, errSkipUpdate) {
				return cur, nil
			}
			return cur, err
		}
		next.RunID = runID
		now := s.now().UTC()
		next.UpdatedAt = now
		if next.CreatedAt.IsZero() {
			next.CreatedAt = now
		}
		data, err := json.Marshal(next)
		if err != nil {
			return cur, fmt.Errorf("consumer: encode state of run %s: %w", runID, err)
		}
		var wrote uint64
		if exists {
			wrote, err = s.kv.Update(ctx, runID, data, rev)
		} else {
			wrote, err = s.kv.Create(ctx, runID, data)
		}
		if s.store != nil && !isCASConflict(err) {
			s.store.observe("state", err)
		}
		switch {
		case err == nil:
			s.last.put(runID, next, data, wrote)
			return next, nil
		case isCASConflict(err):
			s.last.forget(runID)
			if !settled {
				continue // someone else wrote since: read it, at once
			}
			if !retry.Sleep(ctx, b.NextBackOff()) {
				return cur, fmt.Errorf("consumer: update state of run %s: %w", runID, context.Cause(ctx))
			}
			continue
		default:
			s.last.forget(runID)
			return cur, fmt.Errorf("consumer: update state of run %s: %w", runID, err)
		}
	}
	return events.RunState{}, fmt.Errorf("consumer: update state of run %s after %d attempts: %w", runID, maxCASAttempts, events.ErrStateConflict)
}

// isCASConflict reports a lost compare-and-set: revision mismatch, key
// created meanwhile, or the wrong-last-sequence fence.
func isCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || jserr.WrongLastSequence(err)
}

// Replace writes st over the value stored at revision rev (compare-and-set),
// e.g. to repair a record that Get reported as events.ErrStateCorrupt. UpdatedAt is
// set to now.
func (s *stateStore) Replace(ctx context.Context, st events.RunState, rev uint64) error {
	if !events.ValidRunID(st.RunID) {
		return fmt.Errorf("consumer: replace state: run id %q: %w", st.RunID, events.ErrBadRunID)
	}
	now := s.now().UTC()
	st.UpdatedAt = now
	if st.CreatedAt.IsZero() {
		st.CreatedAt = now
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("consumer: encode state of run %s: %w", st.RunID, err)
	}
	s.last.forget(st.RunID)
	if _, err := s.kv.Update(ctx, st.RunID, data, rev); err != nil {
		return fmt.Errorf("consumer: replace state of run %s: %w", st.RunID, err)
	}
	return nil
}
