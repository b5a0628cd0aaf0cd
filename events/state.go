package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foundryq/foundryq/internal/jserr"
	"github.com/foundryq/foundryq/internal/retry"
)

// RunStatus is the lifecycle status of a run in the state bucket.
type RunStatus string

// Run statuses.
const (
	StatusQueued    RunStatus = "queued"
	StatusRunning   RunStatus = "running"
	StatusCompleted RunStatus = "completed"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
)

// Finished reports whether s is a final status.
func (s RunStatus) Finished() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// CancelRecord is a recorded cancel request.
type CancelRecord struct {
	Reason string    `json:"reason"`         // ReasonRequested, ReasonTimeout or ReasonAbandoned
	Note   string    `json:"note,omitempty"` // the requester's text (CancelRequest.Reason), if any
	At     time.Time `json:"at"`
}

// RunState is the value stored in the KV bucket (<prefix>-runs) under the
// run id: the run's lifecycle record. Only workers write it; clients read it.
type RunState struct {
	RunID string `json:"run_id"`
	// Schema is the version of the record's layout (1 since the layout
	// below; absent in records written before). A worker that finds a newer
	// schema than it knows leaves the run to a newer worker.
	Schema int       `json:"schema,omitempty"`
	Status RunStatus `json:"status"`
	// Digest identifies the request (RunRequest.Digest): a run id runs once,
	// for one request.
	Digest     string `json:"digest,omitempty"`
	ResponseID string `json:"response_id,omitempty"`
	// Owner is the worker that owns the run now; empty while the run waits
	// for a worker (queued, handed off, or retrying after a failure).
	Owner   string `json:"owner,omitempty"`
	Attempt int    `json:"attempt,omitempty"` // delivery attempt of the last owner
	// Failures counts failed attempts (upstream errors, workers that
	// vanished); hand-offs and lease renewals do not count.
	Failures  int    `json:"failures,omitempty"`
	LastError string `json:"last_error,omitempty"` // why the last failed attempt failed
	// CreateStartedAt is set before the upstream create is sent; with no
	// ResponseID it means a response may exist that nobody knows the id of.
	CreateStartedAt *time.Time    `json:"create_started_at,omitempty"`
	Cancel          *CancelRecord `json:"cancel,omitempty"` // set once a cancel was requested
	Terminal        EventType     `json:"terminal,omitempty"`
	// End is the run's terminal event, exactly as it is (or is about to be)
	// stored on the events subject: the record says how the run ended, with
	// its usage, even after the events have expired.
	End            *RunEvent  `json:"end,omitempty"`
	UpstreamStatus string     `json:"upstream_status,omitempty"`
	CreatedAt      time.Time  `json:"created_at,omitzero"`
	UpdatedAt      time.Time  `json:"updated_at,omitzero"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
}

// Finished reports whether the run has ended.
func (s RunState) Finished() bool { return s.Status.Finished() }

// ErrSkipUpdate, returned by the function given to StateStore.Update or
// Upsert, leaves the stored state as it is; the call returns the current
// state and a nil error.
var ErrSkipUpdate = errors.New("skip state update")

// maxCASAttempts bounds the read-modify-write retries of Update and Upsert.
const maxCASAttempts = 32

// StateStore reads and writes RunStates in the KV bucket with
// compare-and-set, so that concurrent writers (workers, cancel helpers)
// never overwrite each other's changes. Safe for concurrent use.
type StateStore struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// NewStateStore wraps the state bucket (Resources.State, or
// js.KeyValue(ctx, names.Bucket())).
func NewStateStore(kv jetstream.KeyValue) *StateStore {
	return &StateStore{kv: kv, now: time.Now}
}

// KeyValue returns the underlying bucket.
func (s *StateStore) KeyValue() jetstream.KeyValue { return s.kv }

// Get returns the state of runID and its KV revision, or ErrStateNotFound.
// A stored value that is not a RunState gives an error wrapping
// ErrStateCorrupt, with the value's revision.
func (s *StateStore) Get(ctx context.Context, runID string) (RunState, uint64, error) {
	if !ValidRunID(runID) {
		return RunState{}, 0, fmt.Errorf("events: get state: run id %q: %w", runID, ErrBadRunID)
	}
	e, err := s.kv.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, ErrStateNotFound)
	}
	if err != nil {
		return RunState{}, 0, fmt.Errorf("events: get state of run %s: %w", runID, err)
	}
	var st RunState
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return RunState{}, e.Revision(), fmt.Errorf("events: decode state of run %s (revision %d): %w: %v", runID, e.Revision(), ErrStateCorrupt, err)
	}
	return st, e.Revision(), nil
}

// Create stores st as a new state (st.RunID is the key). It fails with
// ErrStateExists if a state is already stored. CreatedAt and UpdatedAt are
// set to now when zero.
func (s *StateStore) Create(ctx context.Context, st RunState) (uint64, error) {
	if !ValidRunID(st.RunID) {
		return 0, fmt.Errorf("events: create state: run id %q: %w", st.RunID, ErrBadRunID)
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
		return 0, fmt.Errorf("events: encode state of run %s: %w", st.RunID, err)
	}
	rev, err := s.kv.Create(ctx, st.RunID, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("events: create state of run %s: %w", st.RunID, ErrStateExists)
	}
	if err != nil {
		return 0, fmt.Errorf("events: create state of run %s: %w", st.RunID, err)
	}
	return rev, nil
}

// Update applies fn to the stored state of runID and writes the result
// with compare-and-set on the revision it read, retrying (re-reading and
// re-applying fn) when another writer got there first, at most 32 times
// (then ErrStateConflict). fn may run several times and must only change
// the state it is given. If fn returns ErrSkipUpdate nothing is written and
// the current state is returned; any other error from fn is returned as is.
// A missing state gives ErrStateNotFound. UpdatedAt is set to now.
func (s *StateStore) Update(ctx context.Context, runID string, fn func(*RunState) error) (RunState, error) {
	return s.update(ctx, runID, false, func(st *RunState, exists bool) error {
		if !exists {
			return fmt.Errorf("events: update state of run %s: %w", runID, ErrStateNotFound)
		}
		return fn(st)
	})
}

// Upsert is Update that also handles a missing state: fn gets exists=false
// and a zero RunState with RunID set, and the result is created (with
// compare-and-set against a concurrent create).
func (s *StateStore) Upsert(ctx context.Context, runID string, fn func(st *RunState, exists bool) error) (RunState, error) {
	return s.update(ctx, runID, true, fn)
}

func (s *StateStore) update(ctx context.Context, runID string, create bool, fn func(*RunState, bool) error) (RunState, error) {
	if !ValidRunID(runID) {
		return RunState{}, fmt.Errorf("events: update state: run id %q: %w", runID, ErrBadRunID)
	}
	b := retry.Backoff(time.Millisecond, 32*time.Millisecond)
	for range maxCASAttempts {
		cur, rev, err := s.Get(ctx, runID)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrStateNotFound) {
			return RunState{}, err
		}
		if !exists {
			cur = RunState{RunID: runID}
		}
		next := cur
		if err := fn(&next, exists); err != nil {
			if errors.Is(err, ErrSkipUpdate) {
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
			return cur, fmt.Errorf("events: encode state of run %s: %w", runID, err)
		}
		if exists {
			_, err = s.kv.Update(ctx, runID, data, rev)
		} else {
			_, err = s.kv.Create(ctx, runID, data)
		}
		switch {
		case err == nil:
			return next, nil
		case isCASConflict(err):
			if !retry.Sleep(ctx, b.NextBackOff()) {
				return cur, fmt.Errorf("events: update state of run %s: %w", runID, context.Cause(ctx))
			}
			continue
		default:
			return cur, fmt.Errorf("events: update state of run %s: %w", runID, err)
		}
	}
	return RunState{}, fmt.Errorf("events: update state of run %s after %d attempts: %w", runID, maxCASAttempts, ErrStateConflict)
}

// isCASConflict reports a lost compare-and-set: revision mismatch, key
// created meanwhile, or the wrong-last-sequence fence.
func isCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || jserr.WrongLastSequence(err)
}

// Replace writes st over the value stored at revision rev (compare-and-set),
// e.g. to repair a record that Get reported as ErrStateCorrupt. UpdatedAt is
// set to now.
func (s *StateStore) Replace(ctx context.Context, st RunState, rev uint64) error {
	if !ValidRunID(st.RunID) {
		return fmt.Errorf("events: replace state: run id %q: %w", st.RunID, ErrBadRunID)
	}
	now := s.now().UTC()
	st.UpdatedAt = now
	if st.CreatedAt.IsZero() {
		st.CreatedAt = now
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("events: encode state of run %s: %w", st.RunID, err)
	}
	if _, err := s.kv.Update(ctx, st.RunID, data, rev); err != nil {
		return fmt.Errorf("events: replace state of run %s: %w", st.RunID, err)
	}
	return nil
}
